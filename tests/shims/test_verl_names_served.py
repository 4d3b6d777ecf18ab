"""verl names rlbridge has are legacy names, not errors: an unchanged verl tool YAML and a reward file
importing verl's scorers load as rlbridge's classes and modules, with one line each, on V1 and V0,
in the driver, in a fresh process handed the composed config (as an agent-loop worker is), and in
the agent-loop workers of a real V1 run; a verl name with no equivalent is still one error line;
where verl is installed, its own modules load."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core_v1.agent_loop.tools.gsm8k import Gsm8kTool
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config
from core_v1.config import to_config
from core_v1.main_ppo import compose_v1, main
from shims import verl_imports
from tests.conftest import quickstart_overrides

ROOT = Path(__file__).resolve().parents[2]
PRESET = "quickstart"
TOOLS = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
VERL_TOOL_YAML = "tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: native}\n"
VERL_REWARD_FILE = textwrap.dedent("""\
    from verl.utils.reward_score.math import last_boxed_only_string, remove_boxed
    from verl.utils.ray_utils import get_event_loop


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        assert get_event_loop() is not None
        return float(remove_boxed(last_boxed_only_string(solution_str)) == ground_truth)
""")


@pytest.fixture(autouse=True)
def no_hook_before_or_after():
    verl_imports.uninstall()
    yield
    verl_imports.uninstall()


def served_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith(("legacy class path ", "legacy imports in "))]


def errors_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_an_unchanged_verl_tool_yaml_starts_with_one_line(tmp_path, use_v1, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text(VERL_TOOL_YAML)
    code = main(
        [
            f"--config-name={PRESET}",
            f"{TOOLS}={tools}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
            "trainer.dry_run=true",
            f"trainer.use_v1={use_v1}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and not errors_of(err)  # V0's rollout runs V1's tool agent, with the served class
    assert served_lines(err) == [
        f"legacy class path verl.tools.gsm8k_tool.Gsm8kTool -> "
        f"core_v1.agent_loop.tools.gsm8k.Gsm8kTool in {tools}: tools[0] "
        f"(python -m codemods.migrate {tools} rewrites it)"
    ]


def test_v1s_tool_loader_builds_rlbridges_tool_from_the_verl_path(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text(VERL_TOOL_YAML)
    with pytest.raises(Exception, match="No module named 'verl'"):  # core_v1 alone knows nothing of verl
        initialize_tools_from_config(tools)
    raw, _ = compose_v1(PRESET, None, [f"{TOOLS}={tools}"])
    assert verl_imports.PLUGIN in to_config(raw).trainer.v1.plugins
    [tool] = initialize_tools_from_config(tools)
    assert type(tool) is Gsm8kTool and tool.name == "calc_gsm8k_reward"
    assert len(served_lines(capsys.readouterr().err)) == 1


@pytest.mark.parametrize("key", ["custom_reward_function.path", "reward.custom_reward_function.path"])
@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_a_reward_file_importing_verls_scorers_starts_with_one_line(tmp_path, key, use_v1, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text(VERL_REWARD_FILE)
    code = main([f"--config-name={PRESET}", f"{key}={reward}", "trainer.dry_run=true", f"trainer.use_v1={use_v1}"])
    err = capsys.readouterr().err
    assert code == 0 and not errors_of(err)
    assert served_lines(err) == [
        f"legacy imports in {reward} (reward.custom_reward_function.path): verl.utils.reward_score.math -> "
        "core_v1.reward.scorers.math, verl.utils.ray_utils.get_event_loop -> core_v1.reward.event_loop.get_event_loop "
        f"(python -m codemods.migrate {reward} rewrites them)"
    ]


def test_the_reward_scores_and_the_tool_loads_in_a_fresh_process_given_the_config(tmp_path, capsys):
    """An agent-loop worker gets the composed config and nothing else: the plug-in the shim added to
    `trainer.v1.plugins` is what makes verl's names import there."""
    tools, reward = tmp_path / "tools.yaml", tmp_path / "reward.py"
    tools.write_text(VERL_TOOL_YAML)
    reward.write_text(VERL_REWARD_FILE)
    raw, _ = compose_v1(PRESET, None, [f"{TOOLS}={tools}", f"custom_reward_function.path={reward}"])
    (tmp_path / "config.pkl").write_bytes(pickle.dumps(to_config(raw)))
    worker = textwrap.dedent(f"""\
        import asyncio, importlib.util, pickle
        from core_v1.agent_loop.tool_agent import configured_tools
        from core_v1.reward import RewardScorer
        from core_v1.utils.plugins import import_plugins

        config = pickle.loads(open({str(tmp_path / "config.pkl")!r}, "rb").read())
        assert importlib.util.find_spec("verl") is None  # a fresh process: no hook yet
        import_plugins(config.trainer.v1.plugins)  # as AgentLoopWorker.__init__ does, first
        scorer = RewardScorer(config.reward, config.data.max_response_length)
        row = {{"data_source": "mine", "reward_model": {{"ground_truth": "12"}}}}
        right = asyncio.run(scorer.score(row, "so \\\\boxed{{12}}"))
        wrong = asyncio.run(scorer.score(row, "so \\\\boxed{{13}}"))
        [tool] = configured_tools(config.actor_rollout_ref.rollout.multi_turn.tool_config_path, None)
        print(right[0], wrong[0], type(tool).__module__, type(tool).__name__)
    """)
    done = subprocess.run([sys.executable, "-c", worker], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1.0", "0.0", "core_v1.agent_loop.tools.gsm8k", "Gsm8kTool"]
    assert not served_lines(done.stderr)  # the lines are the driver's, once


def test_a_reward_file_importing_a_verl_name_without_equivalent_is_refused_naming_only_that(tmp_path, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "from verl.utils.reward_score.math import remove_boxed\n"
        "from verl.utils.reward_score.rlla import compute_score as run_tests\n"
        "from verl.utils.fs import copy_to_local\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return run_tests(solution_str, ground_truth)\n"
    )
    for use_v1 in ("true", "false"):
        code = main(
            [
                f"--config-name={PRESET}",
                f"custom_reward_function.path={reward}",
                "trainer.dry_run=true",
                f"trainer.use_v1={use_v1}",
            ]
        )
        err = capsys.readouterr().err
        [error] = errors_of(err)
        assert code == 2 and not served_lines(err)
        assert (
            f"{reward} (reward.custom_reward_function.path) imports verl, which is not installed here and "
            "which rlbridge does not ship: line 2: verl.utils.reward_score.rlla.compute_score has no "
            "rlbridge equivalent; line 3: verl.utils.fs.copy_to_local has no rlbridge equivalent"
        ) in error
        assert "reward_score.math" not in error
    assert not any(isinstance(finder, verl_imports.VerlAliasFinder) for finder in sys.meta_path)


def test_the_hook_serves_only_targets_that_exist():
    assert verl_imports.install()
    from verl.tools.base_tool import OpenAIFunctionToolSchema
    from verl.utils.reward_score import math_dapo

    from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema as ours
    from core_v1.reward.scorers import math_dapo as our_dapo

    assert OpenAIFunctionToolSchema is ours and math_dapo is our_dapo
    with pytest.raises(ModuleNotFoundError):
        import verl.tools.mcp_search_tool  # noqa: F401 - removed: no equivalent
    with pytest.raises(ImportError):
        from verl.utils.ray_utils import parallel_put  # noqa: F401 - a name the table lacks
    assert not verl_imports.verl_installed()


def test_where_verl_is_installed_its_own_modules_load_and_nothing_is_said(tmp_path, monkeypatch, capsys):
    package = tmp_path / "site" / "verl" / "tools"
    package.mkdir(parents=True)
    (package.parent / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "gsm8k_tool.py").write_text(
        "from core_v1.agent_loop.tools.gsm8k import Gsm8kTool as _Ours\n\nclass Gsm8kTool(_Ours):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    tools = tmp_path / "tools.yaml"
    tools.write_text(VERL_TOOL_YAML)
    try:
        assert verl_imports.verl_installed() and not verl_imports.install()
        raw, _ = compose_v1(PRESET, None, [f"{TOOLS}={tools}"])
        assert verl_imports.PLUGIN not in to_config(raw).trainer.v1.plugins
        [tool] = initialize_tools_from_config(tools)
        assert type(tool).__module__ == "verl.tools.gsm8k_tool"  # verl's own class
        assert not served_lines(capsys.readouterr().err)
    finally:
        for name in [name for name in sys.modules if name == "verl" or name.startswith("verl.")]:
            del sys.modules[name]


@pytest.mark.slow
def test_a_v1_run_scores_with_the_unchanged_verl_reward_file_in_its_workers(tiny_assets, ray_runtime, tmp_path, capsys):
    """The reward is computed in the agent-loop workers (Ray actors): the file's verl imports must
    resolve there, from the plug-in the start-up check put in the config."""
    calls = tmp_path / "calls.txt"
    reward = tmp_path / "reward.py"
    reward.write_text(
        textwrap.dedent(f"""\
        import os

        from verl.utils.reward_score import gsm8k
        from verl.utils.reward_score.math import last_boxed_only_string


        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            with open({str(calls)!r}, "a") as out:
                out.write(f"{{os.getpid()}}\\n")
            return gsm8k.compute_score(solution_str, ground_truth) + 0.0 * bool(last_boxed_only_string(solution_str))
    """)
    )
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 1, "trainer.test_freq=-1", placement="ray"),
            f"custom_reward_function.path={reward}",
        ]
    )
    assert code == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["rollout/failed_samples"] == 0
    pids = {int(pid) for pid in calls.read_text().split()}
    assert pids and pids != {os.getpid()}  # scored in the workers (the driver only loads it)


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_a_dataset_class_file_importing_verls_dataset_starts_with_one_line(tmp_path, use_v1, capsys):
    dataset = tmp_path / "my_dataset.py"
    dataset.write_text("from verl.utils.dataset import RLHFDataset\n\n\nclass MyDataset(RLHFDataset):\n    pass\n")
    code = main(
        [
            f"--config-name={PRESET}",
            f"data.custom_cls.path={dataset}",
            "data.custom_cls.name=MyDataset",
            "trainer.dry_run=true",
            f"trainer.use_v1={use_v1}",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0 and not errors_of(err)
    assert served_lines(err) == [
        f"legacy imports in {dataset} (data.custom_cls.path): verl.utils.dataset.RLHFDataset "
        f"-> core_v1.data.rlhf_dataset.RLHFDataset (python -m codemods.migrate {dataset} "
        "rewrites them)"
    ]
