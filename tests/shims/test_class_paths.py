"""verl class paths in tool and interaction YAMLs are judged at start-up by the rename table's
Python rows: one error line naming what rlbridge lacks, on V1 and V0; rlbridge's own classes and
files the loader reports itself pass through untouched."""

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
    tools.write_text('tools:\n  - class_name: "verl.tools.sandbox_fusion_tools.SandboxFusionTool"\n'
                     '    config: {type: native}\n'
                     '  - class_name: verl.tools.image_zoom_in_tool.ImageZoomInTool\n'
                     '  - class_name: verl.tools.gsm8k_tool.Gsm8kTool\n'
                     '  - class_name: verl.tools.geo3k_tool.Geo3kTool\n'
                     '  - class_name: verl.tools.search_tool.SearchTool\n')
    interactions = tmp_path / "interactions.yaml"
    interactions.write_text("interaction:\n  - name: gsm8k\n"
                            "    class_name: verl.interactions.gsm8k_interaction.Gsm8kInteraction\n"
                            "  - name: weather\n"
                            "    class_name: verl.interactions.weather_interaction.WeatherInteraction\n")
    code = main([f"--config-name={PRESET}", f"{TOOLS}={tools}", f"{INTERACTIONS}={interactions}",
                 "trainer.dry_run=true", f"trainer.use_v1={use_v1}"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1
    assert ("tools[0]: verl's class_name verl.tools.sandbox_fusion_tools.SandboxFusionTool is not in rlbridge"
            in errors[0])
    assert "write the tool for the tool_agent loop (core_v1.agent_loop.tools)" in errors[0]
    assert "tools[1]: verl's class_name verl.tools.image_zoom_in_tool.ImageZoomInTool" in errors[0]
    assert "no equivalent of this one" in errors[0]
    # The GSM8K, Geometry3K and search tools and the GSM8K interaction of verl's multi-turn examples are
    # carried under rlbridge's names.
    assert ("tools[2]: class_name verl.tools.gsm8k_tool.Gsm8kTool is core_v1.agent_loop.tools.gsm8k.Gsm8kTool "
            "in rlbridge: write that path") in errors[0]
    assert ("tools[3]: class_name verl.tools.geo3k_tool.Geo3kTool is core_v1.agent_loop.tools.geo3k.Geo3kTool "
            "in rlbridge: write that path") in errors[0]
    assert ("tools[4]: class_name verl.tools.search_tool.SearchTool is core_v1.agent_loop.tools.search.SearchTool "
            "in rlbridge: write that path") in errors[0]
    assert ("interaction[0]: class_name verl.interactions.gsm8k_interaction.Gsm8kInteraction is "
            "core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction in rlbridge") in errors[0]
    assert "interaction[1]: verl's class_name verl.interactions.weather_interaction.WeatherInteraction" in errors[0]
    assert "subclass core_v1.agent_loop.interaction.BaseInteraction" in errors[0]


def test_the_paths_named_for_verls_carried_classes_pass_the_dry_run(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: core_v1.agent_loop.tools.gsm8k.Gsm8kTool\n    config: {type: native}\n"
                     "  - class_name: core_v1.agent_loop.tools.geo3k.Geo3kTool\n    config: {type: native}\n"
                     "  - class_name: core_v1.agent_loop.tools.search.SearchTool\n"
                     "    config: {type: native, retrieval_service_url: 'http://127.0.0.1:8000/retrieve'}\n")
    interactions = tmp_path / "interactions.yaml"
    interactions.write_text("interaction:\n  - name: gsm8k\n"
                            "    class_name: core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction\n")
    assert main([f"--config-name={PRESET}", f"{TOOLS}={tools}", f"{INTERACTIONS}={interactions}",
                 "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent", "trainer.dry_run=true"]) == 0


def test_a_verl_class_rlbridge_has_under_another_name_is_named(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: verl.tools.utils.function_tool.function_tool\n")
    code = main([f"--config-name={PRESET}", f"{TOOLS}={tools}", "trainer.dry_run=true"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1
    assert "is core_v1.agent_loop.tools.function_tool.function_tool in rlbridge: write that path" in errors[0]


def test_rlbridge_classes_and_missing_files_are_left_to_the_loader(tmp_path, capsys):
    tools = tmp_path / "tools.yaml"
    tools.write_text("tools:\n  - class_name: core_v1.agent_loop.tools.CalculatorTool\n")
    assert main([f"--config-name={PRESET}", f"{TOOLS}={tools}", "trainer.dry_run=true"]) == 0
    code = main([f"--config-name={PRESET}", f"{TOOLS}={tmp_path / 'missing.yaml'}", "trainer.dry_run=true"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1 and "does not exist" in errors[0] and "verl's class_name" not in errors[0]


@pytest.mark.parametrize("key", ["custom_reward_function.path", "reward.custom_reward_function.path"])
def test_a_reward_file_importing_verl_names_each_verl_name_and_what_rlbridge_has(tmp_path, key, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text("import math\nfrom verl.utils.reward_score import gsm8k\n"
                      "from verl.utils.reward_score.sandbox_fusion import compute_score as run_tests\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return gsm8k.compute_score(solution_str, ground_truth)\n")
    code = main([f"--config-name={PRESET}", f"{key}={reward}", "trainer.dry_run=true"])
    errors = errors_of(capsys)
    assert code == 2 and len(errors) == 1
    assert f"{reward} (reward.custom_reward_function.path) imports verl, which is not installed here" in errors[0]
    assert "line 2: verl.utils.reward_score.gsm8k is core_v1.reward.scorers.gsm8k in rlbridge" in errors[0]
    assert "line 3: verl.utils.reward_score.sandbox_fusion.compute_score has no rlbridge equivalent" in errors[0]
    reward.write_text("from core_v1.reward.scorers import gsm8k\n\n"
                      "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                      "    return gsm8k.compute_score(solution_str, ground_truth)\n")
    assert main([f"--config-name={PRESET}", f"{key}={reward}", "trainer.dry_run=true"]) == 0  # as migrated
