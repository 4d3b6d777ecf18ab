"""The code tool that verl's ReTool recipe names, against a stand-in Sandbox Fusion service on
127.0.0.1 that really runs the code: the request it gets, what the model reads, every failure
answered and counted, the in-flight limit, a ReTool-style subclass (its own `execute` through
`execution_pool`), and one run of the real `tool_agent` loop that calls it."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest

from core_v1.agent_loop.tools import ToolConfigError, ToolResponse
from core_v1.agent_loop.tools.sandbox_fusion import (
    PoolMode,
    SandboxFusionConfig,
    SandboxFusionTool,
    init_execution_pool,
)
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config
from core_v1.utils.rollout_trace import rollout_trace_op
from tests.core_v1.agent_loop.sandbox_service import SandboxService

NO_COUNTS = {"api_errors": 0.0, "timeouts": 0.0, "run_errors": 0.0}


@pytest.fixture()
def service():
    sandbox = SandboxService()
    yield sandbox
    sandbox.close()


def make_tool(url: str, cls: type = SandboxFusionTool, **config) -> SandboxFusionTool:
    return cls({"sandbox_fusion_url": url, "type": "native", "retry_delay_s": 0.01, **config})


def call(tool: SandboxFusionTool, parameters: dict) -> tuple[str, Any, dict]:
    async def one_call():
        instance, _ = await tool.create()
        response, reward, metrics = await tool.execute(instance, parameters)
        assert await tool.calc_reward(instance) == 0.0
        await tool.release(instance)
        return response.text, reward, metrics

    return asyncio.run(one_call())


def test_the_code_runs_and_the_model_reads_stdout_then_stderr(service):
    text, reward, metrics = call(
        make_tool(service.url, memory_limit_mb=256),
        {"code": "import sys\nprint(6 * 7)\nprint('note', file=sys.stderr)"},
    )
    assert text == "42\nnote\n" and reward == 0.0 and metrics == NO_COUNTS
    assert service.requests == [
        {
            "compile_timeout": 30,
            "run_timeout": 30,
            "code": "import sys\nprint(6 * 7)\nprint('note', file=sys.stderr)",
            "stdin": None,
            "memory_limit_MB": 256,
            "language": "python",
            "files": {},
            "fetch_files": [],
        }
    ]


def test_a_failing_run_shows_its_traceback_and_is_counted(service):
    text, _, metrics = call(make_tool(service.url), {"code": "1 / 0"})
    assert "ZeroDivisionError: division by zero" in text and metrics == {**NO_COUNTS, "run_errors": 1.0}


def test_a_run_past_its_time_limit_says_so_with_its_partial_output(service):
    started = time.perf_counter()
    text, _, metrics = call(
        make_tool(service.url, default_timeout=1), {"code": "import time\nprint('started', flush=True)\ntime.sleep(30)"}
    )
    assert time.perf_counter() - started < 10
    assert text == "started\nError: the code did not finish within 1 s." and metrics == {**NO_COUNTS, "timeouts": 1.0}
    assert service.requests[0]["run_timeout"] == 1


def test_the_call_may_give_its_own_timeout_and_language(service):
    text, _, _ = call(make_tool(service.url), {"code": "print(1)", "timeout": "5", "language": "python"})
    assert text == "1\n" and service.requests[0]["run_timeout"] == 5.0
    text, _, metrics = call(make_tool(service.url), {"code": "puts 1", "language": "cobol"})
    assert text.startswith("Error: the code sandbox does not run 'cobol'; languages: python, cpp")
    assert len(service.requests) == 1 and metrics == {**NO_COUNTS, "run_errors": 1.0}


@pytest.mark.parametrize(
    "mode, message",
    [
        (500, "HTTP 500 Internal Server Error"),
        ("sandbox-error", "SandboxError: no runner is free"),
        ("not-json", "the sandbox's answer is not JSON"),
    ],
)
def test_a_service_error_is_answered_and_counted_never_raised(service, mode, message):
    service.mode = mode
    text, _, metrics = call(make_tool(service.url), {"code": "print(1)"})
    assert text.startswith("Error: the code sandbox failed: ") and message in text
    assert len(service.requests) == 1 and metrics == {**NO_COUNTS, "api_errors": 1.0}


def test_a_gateway_timeout_is_retried_as_verl_does(service):
    service.mode = 504
    text, _, metrics = call(make_tool(service.url), {"code": "print(1)"})
    assert len(service.requests) == 3 and text.endswith("HTTP 504 Gateway Timeout (attempt 3 of 3)")
    assert metrics["api_errors"] == 1.0


def test_a_refused_connection_is_answered_and_counted(service):
    url = service.url
    service.close()
    text, _, metrics = call(make_tool(url), {"code": "print(1)"})
    assert text == f"Error: the code sandbox failed: {url}: connection refused"
    assert metrics == {**NO_COUNTS, "api_errors": 1.0}


def test_a_service_that_does_not_answer_in_time_is_answered_and_counted(service, monkeypatch):
    monkeypatch.setattr("core_v1.agent_loop.tools.sandbox_fusion.HTTP_MARGIN_S", 0.0)
    service.mode = "slow"
    text, _, metrics = call(make_tool(service.url), {"code": "print(1)", "timeout": 0.2})  # waits 2 * 0.2 s
    assert text == f"Error: the code sandbox failed: {service.url}: timed out" and metrics["api_errors"] == 1.0


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_in_flight_calls_are_limited_by_rate_limit_within_a_process(service):
    service.delay_s = 0.1

    async def three_calls(tool):
        instance, _ = await tool.create()
        return await asyncio.gather(*(tool.execute(instance, {"code": f"print({i})"}) for i in range(3)))

    results = asyncio.run(three_calls(make_tool(service.url, num_workers=4, rate_limit=1)))
    assert service.peak == 1 and sorted(r.text for r, _, _ in results) == ["0\n", "1\n", "2\n"]
    service.peak = 0
    asyncio.run(three_calls(make_tool(service.url, num_workers=4, rate_limit=1, enable_global_rate_limit=False)))
    assert service.peak == 3


class CodeBlockTool(SandboxFusionTool):
    """A ReTool-style subclass: takes the code out of a ```python block, prints the last expression,
    and returns what `execute_code` gave, with no metrics (as ReTool's does)."""

    def __init__(self, config, tool_schema=None):
        super().__init__(config, tool_schema)
        self.code_pattern = re.compile(r"```python(.*?)```", re.DOTALL)

    @rollout_trace_op
    async def execute(self, instance_id, parameters, **kwargs):
        found = self.code_pattern.findall(parameters["code"])
        code = found[0].strip() if found else parameters["code"]
        *body, last = code.split("\n")
        code = "\n".join([*body, last if last.startswith("print") else f"print({last})"])
        result = await self.execution_pool.execute.remote(
            self.execute_code, instance_id, code, parameters.get("timeout", self.default_timeout), self.default_language
        )
        return result, None, None


def test_a_retool_style_subclass_runs_through_the_execution_pool_and_its_failures_are_counted(service):
    text, reward, metrics = call(make_tool(service.url, CodeBlockTool), {"code": "```python\nx = 6\nx * 7\n```"})
    assert text == "42\n" and reward is None and metrics == NO_COUNTS
    assert service.requests[0]["code"] == "x = 6\nprint(x * 7)"
    service.mode = 503
    text, _, metrics = call(make_tool(service.url, CodeBlockTool), {"code": "1"})
    assert text.startswith("Error: the code sandbox failed:") and metrics == {**NO_COUNTS, "api_errors": 1.0}


def test_verls_tool_yaml_loads_and_a_bad_config_is_one_clear_error(tmp_path):
    config = tmp_path / "sandbox_fusion_tool_config.yaml"
    config.write_text(
        "tools:\n  - class_name: core_v1.agent_loop.tools.sandbox_fusion.SandboxFusionTool\n"
        "    config:\n      sandbox_fusion_url: http://localhost:8080/run_code\n      num_workers: 128\n"
        "      enable_global_rate_limit: true\n      rate_limit: 128\n      default_timeout: 30\n"
        "      default_language: python\n      memory_limit_mb: 1024\n      type: native\n"
        "    tool_schema:\n      type: function\n      function:\n        name: code_interpreter\n"
        "        description: A tool for executing code.\n        parameters:\n          type: object\n"
        "          properties:\n            code: {type: string, description: The code to execute.}\n"
        "          required: [code]\n"
    )
    [tool] = initialize_tools_from_config(config)
    assert tool.name == "code_interpreter" and tool.sandbox_config == SandboxFusionConfig(
        "http://localhost:8080/run_code", num_workers=128, rate_limit=128
    )
    assert (tool.default_timeout, tool.default_language, tool.memory_limit_mb) == (30, "python", 1024)
    assert tool.config["timeout_s"] == 3 * 70 + 3 + 1  # the worst case of verl's three attempts, then a second
    config.write_text(
        "tools:\n  - class_name: core_v1.agent_loop.tools.sandbox_fusion.SandboxFusionTool\n"
        "    config: {type: native}\n"
    )
    with pytest.raises(ToolConfigError, match=r"tools\[0\]: SandboxFusionTool needs config.sandbox_fusion_url"):
        initialize_tools_from_config(config)
    with pytest.raises(ToolConfigError, match="default_language 'cobol' is not one the sandbox runs"):
        make_tool("http://localhost:8080/run_code", default_language="cobol")


def test_the_tool_agent_loop_runs_code_and_counts_the_sandboxs_failures(service):
    from tests.core_v1.agent_loop.scripted_llm import converse_with_tool

    call_text = '<tool_call>{"name": "code_interpreter", "arguments": {"code": "print(2 + 3)"}}</tool_call>'

    def converse(tool: SandboxFusionTool) -> tuple[str, dict]:
        observation, output = converse_with_tool(tool, call_text, "What is 2 + 3?")
        return observation, output.metrics

    observation, metrics = converse(make_tool(service.url, CodeBlockTool))
    assert "<|im_start|>tool\n5\n" in observation
    assert metrics["code_interpreter/api_errors"] == 0.0 and metrics["tool_errors"] == 0.0
    service.mode = 500
    observation, metrics = converse(make_tool(service.url, CodeBlockTool))
    assert "Error: the code sandbox failed:" in observation and "HTTP 500" in observation
    assert metrics["code_interpreter/api_errors"] == 1.0 and metrics["tool_errors"] == 0.0


def test_execution_pool_remote_starts_at_once_and_an_exception_reaches_the_caller(service):
    tool = make_tool(service.url)

    async def calls():
        started = tool.execution_pool.execute.remote(time.sleep, 0.05)
        assert isinstance(
            await tool.execution_pool.execute.remote(lambda a, b=0: ToolResponse(text=f"{a}{b}"), 1, b=2), ToolResponse
        )
        await started
        with pytest.raises(ZeroDivisionError):
            await tool.execution_pool.execute.remote(lambda: 1 / 0)

    asyncio.run(calls())


def test_verls_init_execution_pool_gives_a_pool_of_threads_and_refuses_processes():
    pool = init_execution_pool(num_workers=2, enable_global_rate_limit=True, rate_limit=1, mode=PoolMode.ThreadMode)

    async def two_calls():
        return await asyncio.gather(pool.execute.remote(lambda: 1), pool.execute.remote(lambda x: x + 1, 2))

    assert asyncio.run(two_calls()) == [1, 3] and pool.ping()
    with pytest.raises(NotImplementedError, match="only PoolMode.ThreadMode"):
        init_execution_pool(num_workers=2, mode=PoolMode.ProcessMode)
