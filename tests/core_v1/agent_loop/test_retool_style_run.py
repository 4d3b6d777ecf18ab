"""A user's ReTool-style file, unchanged, trains: its `SandboxFusionTool` subclass (own `execute`
under `@rollout_trace_op`, through `execution_pool`) runs code in a stand-in Sandbox Fusion
service, and its `RLHFDataset` subclass (own `_read_files_and_tokenize` building `self.dataframe`
with `datasets`) gives the prompts, each sent to `tool_agent`; every name comes from `verl.*`,
served by the import shim, in a real V1 run (Ray agent-loop workers) and a V0 run.

The tiny model cannot write a tool call, so a plug-in registers a tool-call format that reads each
model turn as one call of the code tool; the loop, the tool, the HTTP calls and the trainer are real.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from core_v1.main_ppo import main
from shims import verl_imports
from tests.conftest import quickstart_overrides
from tests.core_v1.agent_loop.sandbox_service import SandboxService

USER_FILE = textwrap.dedent("""\
    import re
    from typing import Any

    import datasets

    from verl.tools.base_tool import OpenAIFunctionToolSchema
    from verl.tools.sandbox_fusion_tools import SandboxFusionTool
    from verl.utils.dataset import RLHFDataset
    from verl.utils.rollout_trace import rollout_trace_op

    BOXED = " Put the answer in a box."


    class CustomSandboxFusionTool(SandboxFusionTool):
        def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema):
            super().__init__(config, tool_schema)
            self.code_pattern = re.compile(r"```python(.*?)```", re.DOTALL)

        @rollout_trace_op
        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs) -> tuple[str, float, dict]:
            blocks = self.code_pattern.findall(parameters["code"])
            code = blocks[0].strip() if blocks else parameters["code"]
            *body, last = code.split("\\n")
            code = "\\n".join([*body, last if last.startswith("print") else f"print({last})"])
            timeout = parameters.get("timeout", self.default_timeout)
            language = parameters.get("language", self.default_language)
            result = await self.execution_pool.execute.remote(self.execute_code, instance_id, code, timeout, language)
            return result, None, None


    class CustomRLHFDataset(RLHFDataset):
        def _read_files_and_tokenize(self):
            frames = []
            for path in self.data_files:
                frame = datasets.load_dataset("parquet", data_files=path)["train"]
                frames.append(frame.map(self.map_fn))
            self.dataframe = datasets.concatenate_datasets(frames)

        def map_fn(self, row: dict):
            row["prompt"][0]["content"] = row["prompt"][0]["content"] + BOXED
            row["agent_name"] = "tool_agent"
            return row


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        with open(__file__.replace(".py", ".turns"), "a") as out:  # read by the test: what the run passed
            out.write(f"{extra_info['num_turns']}\\n")
        return float(ground_truth in solution_str) - 0.1 * (extra_info["num_turns"] - 2) / 2
""")

FORMAT_PLUGIN = textwrap.dedent("""\
    import json

    from core_v1.agent_loop.tool_parser import TOOL_PARSERS, FunctionCall, ToolParser  # noqa: F401

    CODE = "```python\\nx = 6\\nx * 7\\n```"


    @TOOL_PARSERS.register("every_turn_runs_code_for_test", override=True)  # the V1 and V0 runs load it in one process
    class EveryTurnRunsCode(ToolParser):
        async def extract_tool_calls(self, responses_ids):
            text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
            return text, [FunctionCall(name="code_interpreter", arguments=json.dumps({"code": CODE}))]
""")


@pytest.fixture()
def service():
    sandbox = SandboxService()
    yield sandbox
    sandbox.close()


@pytest.fixture(autouse=True)
def no_hook_before_or_after(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))  # datasets.load_dataset caches there
    verl_imports.uninstall()
    yield
    verl_imports.uninstall()


def retool_style_launch(tmp_path, service_url: str) -> list[str]:
    (tmp_path / "my_retool.py").write_text(USER_FILE)
    (tmp_path / "code_format.py").write_text(FORMAT_PLUGIN)
    (tmp_path / "tools.yaml").write_text(
        "tools:\n  - class_name: my_retool.CustomSandboxFusionTool\n    config:\n"
        f"      sandbox_fusion_url: {service_url}\n      num_workers: 4\n      enable_global_rate_limit: true\n"
        "      rate_limit: 4\n      default_timeout: 10\n      default_language: python\n      memory_limit_mb: 512\n"
        "      type: native\n    tool_schema:\n      type: function\n      function:\n        name: code_interpreter\n"
        "        description: A tool for executing code.\n        parameters:\n          type: object\n"
        "          properties:\n            code: {type: string, description: The code to execute.}\n"
        "          required: [code]\n"
    )
    user_file = tmp_path / "my_retool.py"
    return [
        f"data.custom_cls.path={user_file}",
        "data.custom_cls.name=CustomRLHFDataset",
        f"custom_reward_function.path={user_file}",
        "custom_reward_function.name=compute_score",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'tools.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.format=every_turn_runs_code_for_test",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "data.max_response_length=48",
        # The tool schemas go into the prompt (30 tokens here): verl's retool launches raise this too,
        # and data.truncation=error (verl's default) now refuses a prompt over it.
        "data.max_prompt_length=64",
        f"trainer.v1.plugins=['{tmp_path / 'code_format.py'}']",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        "data.train_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    ]


def check_run(code: int, err: str, tmp_path, service: SandboxService, steps: int) -> list[dict]:
    assert code == 0, err
    assert (
        "legacy imports in" in err
        and "verl.tools.sandbox_fusion_tools -> core_v1.agent_loop.tools.sandbox_fusion" in err
        and "verl.utils.dataset.RLHFDataset -> core_v1.data.rlhf_dataset.RLHFDataset" in err
    )
    # The subclass's execute ran: it took the code out of the block and printed the last expression.
    assert service.requests and {r["code"] for r in service.requests} == {"x = 6\nprint(x * 7)"}
    assert {r["memory_limit_MB"] for r in service.requests} == {512}
    # The reward function read the trajectory's num_turns from extra_info, as ReTool's does.
    turns = [int(n) for n in (tmp_path / "my_retool.turns").read_text().split()]
    assert set(turns) <= {2, 4} and 4 in turns
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == steps and all(row["actor/pg_loss"] == row["actor/pg_loss"] for row in rows)  # not NaN
    return rows


@pytest.mark.slow
def test_a_retool_style_file_trains_on_v1(tiny_assets, ray_runtime, tmp_path, service, capsys):
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(
                tiny_assets, tmp_path, 2, *retool_style_launch(tmp_path, service.url), placement="ray"
            ),
        ]
    )
    rows = check_run(code, capsys.readouterr().err, tmp_path, service, steps=2)
    assert rows[0]["num_turns/max"] == 4  # user, model, tool, model: one round of code
    assert rows[0]["agent/code_interpreter/api_errors/mean"] == 0.0 and rows[0]["rollout/failed_samples"] == 0


@pytest.mark.slow
def test_a_retool_style_file_trains_on_v0(tiny_assets, tmp_path, service, capsys):
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(
                tiny_assets, tmp_path, 1, *retool_style_launch(tmp_path, service.url), "trainer.use_v1=false"
            ),
        ]
    )
    check_run(code, capsys.readouterr().err, tmp_path, service, steps=1)
