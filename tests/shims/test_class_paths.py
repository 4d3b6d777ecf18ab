"""verl class paths in tool and interaction YAMLs, and verl imports in the reward file, are judged at
start-up by the rename table's Python rows: a name rlbridge has loads as rlbridge's (one line each,
tests/shims/test_verl_names_served.py); one it lacks is one error line naming what is missing, on V1
and V0; rlbridge's own classes and files the loader reports itself pass through untouched."""

from __future__ import annotations

import pytest

from core_v1.main_ppo import main

PRESET = "quickstart"
TOOLS = "actor_rollout_ref.rollout.multi_turn.tool_config_path"
INTERACTIONS = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


def errors_of(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_verls_own_tool_and_interaction_classes_are_one_line_naming_what_is_missing(tmp_path, use_v1, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        'tools:\n  - class_name: "verl.tools.mcp_base_tool.MCPBaseTool"\n'
        "    config: {type: native}\n"
        # A tool a fork of verl added under verl's package: a module rlbridge has no row for.
        "  - class_name: verl.tools.chart_reader_tool.ChartReaderTool\n"
        "  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n"
        "  - class_name: verl.tools.geo3k_tool.Geo3kTool\n"
        "  - class_name: verl.tools.search_tool.SearchTool\n"
        "  - class_name: verl.tools.image_zoom_in_tool.ImageZoomInTool\n"
    )
    interactions = tmp_path / "interactions.yaml"
    interactions.write_text(
        "interaction:\n  - name: gsm8k\n"
        "    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
        "  - name: weather\n"
        "    class_name: verl.interactions.weather_interaction.WeatherInteraction\n"
    )
    code = main(
        [
            f"--config-name={PRESET}",
            f"{TOOLS}={tools}",
            f"{INTERACTIONS}={interactions}",
            "trainer.dry_run=true",
            f"trainer.use_v1={use_v1}",
        ]
    )
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1
    assert "tools[0]: verl's class_name verl.tools.mcp_base_tool.MCPBaseTool is not in rlbridge" in errors[0]
    assert "write the tool for the tool_agent loop (core_v1.agent_loop.tools)" in errors[0]
    assert "tools[1]: verl's class_name verl.tools.chart_reader_tool.ChartReaderTool" in errors[0]
    assert "no equivalent of this one" in errors[0]
    assert "interaction[1]: verl's class_name verl.interactions.weather_interaction.WeatherInteraction" in errors[0]
    assert "subclass core_v1.agent_loop.interaction.BaseInteraction" in errors[0]
    # The GSM8K, Geometry3K, search and image zoom-in tools and the GSM8K interaction of verl's examples are
    # carried under rlbridge's names: they would load as those, so the refusal does not name them, and
    # nothing is served when the run stops.
    carried_tools = (
        "tools[2]",
        "tools[3]",
        "tools[4]",
        "tools[5]",
        "Gsm8kTool",
        "Geo3kTool",
        "SearchTool",
        "ImageZoom",
    )
    for carried in (*carried_tools, "interaction[0]"):
        assert carried not in errors[0]
    assert "legacy class path" not in err


def test_the_paths_named_for_verls_carried_classes_pass_the_dry_run(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        "tools:\n  - class_name: core_v1.agent_loop.tools.gsm8k.Gsm8kTool\n    config: {type: native}\n"
        "  - class_name: core_v1.agent_loop.tools.geo3k.Geo3kTool\n    config: {type: native}\n"
        "  - class_name: core_v1.agent_loop.tools.search.SearchTool\n"
        "    config: {type: native, retrieval_service_url: 'http://127.0.0.1:8000/retrieve'}\n"
    )
    interactions = tmp_path / "interactions.yaml"
    interactions.write_text(
        "interaction:\n  - name: gsm8k\n    class_name: core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction\n"
    )
    assert (
        main(
            [
                f"--config-name={PRESET}",
                f"{TOOLS}={tools}",
                f"{INTERACTIONS}={interactions}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                "trainer.dry_run=true",
            ]
        )
        == 0
    )


def test_verls_carried_classes_load_as_rlbridges_with_one_line_each(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text(
        "tools:\n  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n    config: {type: native}\n"
        "  - class_name: verl.tools.geo3k_tool.Geo3kTool\n    config: {type: native}\n"
    )
    interactions = tmp_path / "interactions.yaml"
    interactions.write_text(
        "interaction:\n  - name: gsm8k\n    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
    )
    assert (
        main(
            [
                f"--config-name={PRESET}",
                f"{TOOLS}={tools}",
                f"{INTERACTIONS}={interactions}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                "trainer.dry_run=true",
            ]
        )
        == 0
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("legacy class path")]
    assert lines == [
        f"legacy class path verl.tools.gsm8k_tool.Gsm8kTool -> core_v1.agent_loop.tools.gsm8k.Gsm8kTool in {tools}: "
        f"tools[0] (python -m codemods.migrate {tools} rewrites it)",
        f"legacy class path verl.tools.geo3k_tool.Geo3kTool -> core_v1.agent_loop.tools.geo3k.Geo3kTool in {tools}: "
        f"tools[1] (python -m codemods.migrate {tools} rewrites it)",
        "legacy class path verl.interactions.gsm8k_interaction.Gsm8kInteraction -> "
        f"core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction in {interactions}: interaction[0] "
        f"(python -m codemods.migrate {interactions} rewrites it)",
    ]


def test_rlbridge_classes_and_missing_files_are_left_to_the_loader(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: core_v1.agent_loop.tools.CalculatorTool\n")
    assert main([f"--config-name={PRESET}", f"{TOOLS}={tools}", "trainer.dry_run=true"]) == 0
    code = main([f"--config-name={PRESET}", f"{TOOLS}={tmp_path / 'missing.yaml'}", "trainer.dry_run=true"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1 and "does not exist" in errors[0] and "verl's class_name" not in errors[0]


@pytest.mark.parametrize("key", ["custom_reward_function.path", "reward.custom_reward_function.path"])
def test_a_reward_file_importing_a_verl_name_rlbridge_lacks_is_refused_naming_it(tmp_path, key, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text(
        "import math\nfrom verl.utils.reward_score import gsm8k\n"
        "from verl.utils.reward_score.rlla import compute_score as run_tests\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return gsm8k.compute_score(solution_str, ground_truth)\n"
    )
    code = main([f"--config-name={PRESET}", f"{key}={reward}", "trainer.dry_run=true"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1
    assert (
        f"{reward} (reward.custom_reward_function.path) imports verl, which is not installed here and which "
        "rlbridge does not ship: line 3: verl.utils.reward_score.rlla.compute_score has no rlbridge "
        "equivalent"
    ) in errors[0]
    assert "gsm8k" not in errors[0]  # rlbridge has verl's gsm8k scorer: only the missing name is listed
    reward.write_text(
        "from core_v1.reward.scorers import gsm8k\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return gsm8k.compute_score(solution_str, ground_truth)\n"
    )
    assert main([f"--config-name={PRESET}", f"{key}={reward}", "trainer.dry_run=true"]) == 0  # as migrated
    assert "legacy imports" not in capsys.readouterr().err
