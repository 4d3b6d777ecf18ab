"""Function tools run in killable worker processes: a tool that hangs, hoards memory, burns CPU or
opens a socket is stopped or refused, the model gets a message, and the pool carries on."""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time

import pytest

from core_v1.agent_loop.tool_parser import FunctionCall
from core_v1.agent_loop.tools.function_tool import FunctionTool
from core_v1.agent_loop.tools.errors import ToolConfigError
from core_v1.agent_loop.tools.sandbox import (
    SandboxFailure,
    SandboxLimits,
    ToolSandbox,
    check_function,
    pass_environment,
    sandbox_for,
)
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema
from core_v1.agent_loop.tools.session import ToolLimits, ToolSession
from core_v1.utils.loading import load_file
from tests.faults import sandbox_code_tools, sandbox_tools


@pytest.fixture
def sandbox():
    box = ToolSandbox(SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0))
    yield box
    box.close()


def _call(box, fn, timeout_s=20.0, **arguments):
    return asyncio.run(box.call(fn, arguments, timeout_s))


def test_a_call_returns_its_value_from_another_process(sandbox):
    first = _call(sandbox, sandbox_tools.add, a=2, b=3)
    second = _call(sandbox, sandbox_tools.add, a=1, b=1)
    assert first["sum"] == 5 and second["sum"] == 2
    assert first["worker"] == second["worker"]  # pooled: one worker serves both ...
    assert first["pid"] != second["pid"] and os.getpid() not in (first["pid"], second["pid"])  # ... each in a child
    assert _call(sandbox, sandbox_tools.async_echo, text="hi") == "hi"


def test_a_tool_that_sleeps_forever_is_killed_and_replaced(sandbox):
    started = time.monotonic()
    with pytest.raises(SandboxFailure) as failure:
        _call(sandbox, sandbox_tools.sleep_forever, timeout_s=1.0)
    assert failure.value.status == "timeout" and time.monotonic() - started < 15
    pids = [w.process.pid for pool in sandbox._idle.values() for w in pool]
    assert pids == []  # the killed worker is not handed out again
    assert _call(sandbox, sandbox_tools.add, a=1, b=2)["sum"] == 3


def test_a_tool_that_allocates_without_bound_gets_an_error(sandbox):
    with pytest.raises(SandboxFailure) as failure:
        _call(sandbox, sandbox_tools.allocate_without_bound)
    assert failure.value.status == "error" and "memory" in str(failure.value)
    assert [w for pool in sandbox._idle.values() for w in pool] == []  # replaced after the limit


def test_a_tool_that_burns_cpu_is_stopped_by_its_cpu_budget_and_its_worker_replaced(sandbox):
    with pytest.raises(SandboxFailure) as failure:
        _call(sandbox, sandbox_tools.spin_forever, timeout_s=300.0)  # a loaded machine gives little CPU
    assert "CPU time" in str(failure.value)
    assert [w for pool in sandbox._idle.values() for w in pool] == []  # a worker whose call hit a limit goes


def test_a_tool_cannot_open_a_socket_by_default(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    try:
        with pytest.raises(SandboxFailure) as failure:
            _call(sandbox, sandbox_tools.open_a_socket, port=listener.getsockname()[1])
        assert failure.value.status == "error"
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing got through
    finally:
        listener.close()


def test_network_true_lets_a_tool_connect():
    box = ToolSandbox(SandboxLimits(workers=1, network=True))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    try:
        assert _call(box, sandbox_tools.open_a_socket, port=listener.getsockname()[1]) == "connected"
    finally:
        listener.close()
        box.close()


def _tool(fn) -> FunctionTool:
    schema = OpenAIFunctionToolSchema.model_validate(
        {
            "type": "function",
            "function": {
                "name": fn.__name__,
                "description": "test",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    )
    return FunctionTool(fn.__name__, fn, schema)


def test_the_session_answers_the_model_and_counts_each_failure(sandbox):
    tools = {t.name: t for t in map(_tool, (sandbox_tools.sleep_forever, sandbox_tools.raise_error, sandbox_tools.add))}
    session = ToolSession(tools, ToolLimits(max_parallel_calls=3, timeout_s=1.0), sandbox=sandbox)
    calls = [
        FunctionCall(name="sleep_forever", arguments="{}"),
        FunctionCall(name="raise_error", arguments="{}"),
        FunctionCall(name="add", arguments='{"a": 4, "b": 5}'),
    ]
    hung, broken, fine = asyncio.run(session.run_calls(calls))
    assert hung.status == "timeout" and "stopped" in hung.text
    assert broken.status == "error" and "the tool broke" in broken.text
    assert fine.status == "ok" and '"sum": 9' in fine.text


def test_a_lambda_is_sent_by_value_and_runs_in_a_worker(sandbox):
    seen = _call(sandbox, lambda a, b: {"product": a * b, "pid": os.getpid()}, a=6, b=7)
    assert seen["product"] == 42 and seen["pid"] != os.getpid()
    scaled = _call(sandbox, sandbox_tools.Scaler(3).scale, x=5)  # a bound method, with its object
    assert scaled["value"] == 15 and scaled["pid"] != os.getpid()


def test_a_nested_function_runs_in_a_worker_under_the_same_limits(sandbox, monkeypatch):
    monkeypatch.setenv("RLBRIDGE_ALLOWED", "yes")
    monkeypatch.setenv("RLBRIDGE_HIDDEN", "secret")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port, factor = listener.getsockname()[1], 7

    def probe(x: int) -> dict:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
            network = "connected"
        except OSError as error:
            network = f"refused: {error}"
        environ = {name: os.environ.get(name) for name in ("RLBRIDGE_ALLOWED", "RLBRIDGE_HIDDEN")}
        return {"value": x * factor, "pid": os.getpid(), "network": network, "environ": environ}

    pass_environment(probe, ("RLBRIDGE_ALLOWED",))  # what @function_tool(env=[...]) does
    try:
        seen = _call(sandbox, probe, x=6)
        with pytest.raises(socket.timeout):
            listener.accept()  # nothing got through
    finally:
        listener.close()
    assert seen["value"] == 42 and seen["pid"] != os.getpid() and seen["network"].startswith("refused")
    assert seen["environ"] == {"RLBRIDGE_ALLOWED": "yes", "RLBRIDGE_HIDDEN": None}


def test_a_closure_naming_a_function_of_a_file_loaded_by_path_finds_it_in_the_worker(sandbox, tmp_path):
    source = tmp_path / "path_tools.py"
    source.write_text(
        "import os\n\n\ndef double(x):\n    return 2 * x\n\n\n"
        "def make_tool(offset):\n    return lambda x: {'value': double(x) + offset, 'pid': os.getpid()}\n"
    )
    seen = _call(sandbox, load_file(source).make_tool(1), x=20)  # `double` crosses by its module's name
    assert seen["value"] == 41 and seen["pid"] != os.getpid()


def test_a_function_that_cannot_be_pickled_is_refused_in_one_line_and_never_run(sandbox):
    lock = threading.Lock()

    def holds_a_lock() -> bool:
        return lock.locked()

    with pytest.raises(ToolConfigError) as refused:
        check_function("locked", holds_a_lock)
    assert "function tool 'locked'" in str(refused.value) and "_thread.lock" in str(refused.value)
    assert "\n" not in str(refused.value)
    with pytest.raises(ToolConfigError):
        _call(sandbox, holds_a_lock)
    assert sandbox._idle == {}  # no worker started for it, and it ran nowhere


def test_the_worker_sees_only_the_allowed_environment(sandbox, monkeypatch):
    monkeypatch.setenv("RLBRIDGE_ALLOWED", "yes")
    monkeypatch.setenv("RLBRIDGE_HIDDEN", "secret")
    seen = _call(sandbox, sandbox_code_tools.read_allowed_env)
    assert seen == {"RLBRIDGE_ALLOWED": "yes", "RLBRIDGE_HIDDEN": None}


def test_the_start_up_line_names_the_isolation_mode_once(sandbox, caplog):
    _call(sandbox, sandbox_tools.add, a=1, b=1)
    _call(sandbox, sandbox_tools.async_echo, text="x")
    lines = [r.getMessage() for r in caplog.records if "tool sandbox: isolation" in r.getMessage()]
    assert len(lines) == 1 and "not covered" in lines[0]


def _code_tool(**config) -> sandbox_code_tools.CodeRunningTool:
    schema = {
        "type": "function",
        "function": {"name": "run", "description": "test", "parameters": {"type": "object", "properties": {}}},
    }
    return sandbox_code_tools.CodeRunningTool(
        config={"flavour": "x", "sandbox_env": ["RLBRIDGE_ALLOWED"], **config}, tool_schema=schema
    )


def test_a_base_tool_that_runs_code_executes_in_the_sandbox(monkeypatch):
    monkeypatch.setenv("RLBRIDGE_ALLOWED", "yes")
    monkeypatch.setenv("RLBRIDGE_HIDDEN", "secret")
    sandbox_for(SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0))
    try:
        text, reward, metrics = asyncio.run(_code_tool().execute("trajectory-1", {}))
    finally:
        sandbox_for(SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0)).close()
    assert f"pid={os.getpid()}" not in text and "network=refused" in text
    assert "'RLBRIDGE_ALLOWED': 'yes'" in text and "'RLBRIDGE_HIDDEN': None" in text
    assert (reward, metrics) == (0.5, {"config": "x"})


def test_a_base_tool_that_runs_code_runs_here_when_the_run_disables_the_sandbox():
    sandbox_for(SandboxLimits(enable=False))
    try:
        text, _, _ = asyncio.run(_code_tool().execute("trajectory-1", {}))
    finally:
        sandbox_for(SandboxLimits())
    assert f"pid={os.getpid()}" in text


def test_the_sessions_timeout_kills_a_base_tool_call_in_the_sandbox():
    limits = SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0)
    box = sandbox_for(limits)
    tool = _code_tool()
    session = ToolSession({"run": tool}, ToolLimits(timeout_s=1.0), sandbox=box)
    try:
        asyncio.run(box.execute_tool(tool, "warm-up", {}, {}))  # the worker's start is not the call's
        started = time.monotonic()
        [result] = asyncio.run(session.run_calls([FunctionCall(name="run", arguments='{"sleep": 30}')]))
        assert result.status == "timeout" and time.monotonic() - started < 10
        assert [w for pool in box._idle.values() for w in pool] == []  # killed, not handed out again
    finally:
        box.close()


def test_an_answer_forged_to_run_code_on_unpickling_runs_nowhere(sandbox, tmp_path):
    marker = tmp_path / "unpickled"
    os.chmod(tmp_path, 0o777)
    with pytest.raises(SandboxFailure) as failure:
        _call(sandbox, sandbox_tools.forge_answers, marker=str(marker))
    assert "plain data" in str(failure.value) and not marker.exists()
    assert _call(sandbox, sandbox_tools.add, a=1, b=2)["sum"] == 3


def test_runs_code_also_sandboxes_an_inherited_execute():
    schema = {
        "type": "function",
        "function": {"name": "pid", "description": "test", "parameters": {"type": "object", "properties": {}}},
    }
    box = sandbox_for(SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0))
    try:
        here, _, _ = asyncio.run(sandbox_code_tools.PidTool(tool_schema=schema).execute("t", {}))
        there, _, _ = asyncio.run(sandbox_code_tools.SandboxedPidTool(tool_schema=schema).execute("t", {}))
    finally:
        box.close()
    assert here == str(os.getpid()) and there != here


def test_a_function_tools_execute_runs_in_the_sandbox_outside_the_session_too():
    box = sandbox_for(SandboxLimits(workers=1, memory_mb=256, cpu_s=2.0))
    try:
        response, _, _ = asyncio.run(_tool(sandbox_tools.add).execute("t", {"a": 1, "b": 2}))
    finally:
        box.close()
    assert '"sum": 3' in response.text and f'"pid": {os.getpid()},' not in response.text
