"""The shared rename table: stdlib-only, its query API, and its agreement with the rule registry."""

from __future__ import annotations

import subprocess
import sys

import pytest

from codemods.rules import RULES, rules_used_by_table
from shims import rename_table
from shims.rename_table import Action, resolve_config_key, resolve_python_name


def test_imports_nothing_beyond_the_standard_library():
    probe = (
        "import sys; import shims.rename_table; "
        "heavy = [m for m in ('torch', 'omegaconf', 'hydra', 'ray', 'libcst', 'ruamel', 'tree_sitter') "
        "if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize(
    "key,value,action,new_key",
    [
        ("reward_model.enable", "true", Action.MECHANICAL, "reward.reward_model.enable"),
        ("reward_model.model.path", "/m", Action.MECHANICAL, "reward.reward_model.model_path"),
        (
            "reward_model.rollout.engine_kwargs.vllm.max_num_seqs",
            "8",
            Action.MECHANICAL,
            "reward.reward_model.rollout.engine_kwargs.vllm.max_num_seqs",
        ),
        ("reward_model.rollout", None, Action.MECHANICAL, "reward.reward_model.rollout"),
        ("reward_model.reward_manager", "naive", Action.MECHANICAL, "reward.reward_manager.name"),
        (
            "reward_model.reward_manager",
            "prime",
            Action.MECHANICAL,
            "reward.reward_manager.name",
        ),  # verl's 0 on failure
        ("reward_model.reward_manager", "batch", Action.MECHANICAL, "reward.reward_manager.name"),  # runs on V1
        ("reward_model.reward_manager", None, Action.MECHANICAL, "reward.reward_manager.name"),
        ("reward_model.model.use_remove_padding", "true", Action.DELETE, None),  # cannot change a score
        ("reward_model.model.fsdp_config.param_offload", "true", Action.DELETE, None),
        ("reward_model.use_dynamic_bsz", "true", Action.DELETE, None),
        ("reward_model.model.external_lib", "my_models", Action.MANUAL, None),
        ("reward_model.something_new", "1", Action.MANUAL, None),
        ("reward_model.use_reward_loop", "true", Action.DELETE, None),
        ("actor_rollout_ref.rollout.mode", "sync", Action.DELETE, None),
        ("actor_rollout_ref.rollout.mode", None, Action.MANUAL, None),
        ("critic.model.fsdp_config.param_offload", "false", Action.MECHANICAL, "critic.fsdp.param_offload"),
        ("ray_init.timeline_json_file", "/t.json", Action.MECHANICAL, "ray_kwargs.timeline_json_file"),
        ("trainer.profile_steps", "[1]", Action.CAVEAT, "global_profiler.steps"),
    ],
)
def test_resolve_config_key(key, value, action, new_key):
    answer = resolve_config_key(key, value)
    assert (answer.action, answer.new_key) == (action, new_key)
    assert answer.message


@pytest.mark.parametrize(
    "key,value",
    [
        ("algorithm.adv_estimator", "grpo"),
        ("actor_rollout_ref.rollout.mode", "async"),
        ("reward.reward_model.enable", "true"),
        ("reward_modelx.enable", "1"),
    ],
)
def test_keys_that_mean_the_same_on_v1_resolve_to_none(key, value):
    assert resolve_config_key(key, value) is None


@pytest.mark.parametrize(
    "key,value,new_key,new_value",
    [
        (
            "algorithm.rollout_correction.use_policy_gradient",
            "True",
            "algorithm.rollout_correction.loss_type",
            "reinforce",
        ),
        (
            "algorithm.rollout_correction.use_policy_gradient",
            "false",
            "algorithm.rollout_correction.loss_type",
            "ppo_clip",
        ),
        (
            "data.sampler.class_path",
            "pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu",
            "data.sampler.class_path",
            "pkg://core_v1.data.random_curriculum",
        ),
        (
            "data.sampler.class_path",
            "tests.utils.dataset.test_create_rl_sampler_on_cpu",
            "data.sampler.class_path",
            "pkg://core_v1.data.random_curriculum",
        ),
    ],
)
def test_rows_that_rewrite_the_value(key, value, new_key, new_value):
    answer = resolve_config_key(key, value)
    assert (answer.new_key, answer.new_value) == (new_key, new_value) and answer.action is not Action.MANUAL
    assert rename_table.is_value_dependent(key)


def test_a_value_rewriting_row_leaves_other_values_and_asks_about_unknown_ones():
    assert resolve_config_key("data.sampler.class_path", "pkg://my.samplers") is None
    assert resolve_config_key("data.sampler.class_name", "RandomCurriculumSampler") is None  # the same name on V1
    unknown = resolve_config_key("algorithm.rollout_correction.use_policy_gradient", None)
    assert unknown.action is Action.MANUAL and "['false', 'true']" in unknown.message


def test_multi_turn_enable_also_sets_the_tool_agent_loop():
    answer = resolve_config_key("actor_rollout_ref.rollout.multi_turn.enable", "True")
    assert answer.also_set == (("actor_rollout_ref.rollout.agent.default_agent_loop", "tool_agent"),)
    assert resolve_config_key("actor_rollout_ref.rollout.multi_turn.enable", "false") is None


def test_v0_only_features_are_the_custom_checkpoint_manager_only():
    # PF-PPO runs on V1 (core_v1.algorithms.pf_ppo): a migration must not keep its scripts on V0.
    names = {feature.key for feature in rename_table.V0_ONLY_FEATURES}
    assert names == {"actor_rollout_ref.rollout.checkpoint_manager_class"}
    assert all(feature.reason for feature in rename_table.V0_ONLY_FEATURES)
    assert rename_table.v0_only_feature("algorithm.use_pf_ppo") is None
    assert rename_table.v0_only_feature("actor_rollout_ref.rollout.checkpoint_manager_class").is_on("a.B")
    assert rename_table.v0_only_feature("trainer.balance_batch") is None  # carried by V1


def test_python_names_resolve_by_longest_prefix():
    assert (
        resolve_python_name("verl.utils.reward_score.gsm8k.compute_score").new_name
        == "core_v1.reward.scorers.gsm8k.compute_score"
    )
    assert (
        resolve_python_name("verl.experimental.agent_loop.AsyncLLMServerManager").new_name
        == "core_v1.rollout.LLMServerClient"
    )
    assert (
        resolve_python_name("verl.interactions.base.BaseInteraction").new_name
        == "core_v1.agent_loop.interaction.BaseInteraction"
    )
    removed = resolve_python_name("verl.interactions.weather_interaction.WeatherInteraction")
    assert removed.new_name is None and "BaseInteraction" in removed.row.message
    assert (
        resolve_python_name("verl.interactions.gsm8k_interaction.Gsm8kInteraction").new_name
        == "core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction"
    )
    assert resolve_python_name("verl.tools.gsm8k_tool.Gsm8kTool").new_name == "core_v1.agent_loop.tools.gsm8k.Gsm8kTool"
    assert resolve_python_name("verl.utils.fs.copy_to_local") is None
    assert resolve_python_name("numpy.array") is None


def test_entrypoints():
    sync = rename_table.resolve_entrypoint("verl.trainer.main_ppo_sync")
    assert (sync.new, sync.also_set) == ("core_v1.main_ppo", (("trainer.v1.trainer_mode", "sync"),))
    generation = rename_table.resolve_entrypoint("verl.trainer.main_generation")
    assert generation.new is None and not generation.trainer_config and generation.message
    # verl's DAPO and entropy recipes run rlbridge's trainer on their own config; the others are named.
    dapo = rename_table.resolve_entrypoint("recipe.dapo.main_dapo")
    assert (dapo.new, dapo.config) == ("core_v1.main_ppo", ("config", "dapo_trainer"))
    assert rename_table.resolve_entrypoint("recipe.entropy.main_entropy").own_scorer
    transfer_queue = rename_table.resolve_entrypoint("recipe.transfer_queue.main_ppo")
    assert (transfer_queue.new, transfer_queue.config) == ("core_v1.main_ppo", ("config", "ppo_trainer"))
    prime = rename_table.resolve_entrypoint("recipe.prime.main_prime")
    assert prime.new is None and prime.trainer_config and "PRIME" in prime.message
    mine = rename_table.resolve_entrypoint("recipe.mine.main_mine")
    assert mine.new is None and mine.rule == "other-entrypoint"
    assert rename_table.resolve_entrypoint("verl.experimental.one_step_off_policy.main_ppo").trainer_config
    assert rename_table.resolve_entrypoint("my_project.train") is None
    assert rename_table.module_of_script("$HOME/verl/verl/trainer/main_ppo.py") == "verl.trainer.main_ppo"
    assert rename_table.module_of_script("recipe/dapo/main_dapo.py") == "recipe.dapo.main_dapo"
    assert rename_table.module_of_script("$HOME/verl/recipe/dapo/main_dapo.py") == "recipe.dapo.main_dapo"
    assert rename_table.module_of_script("run.sh") is None


def test_every_rule_the_table_names_is_registered():
    assert rules_used_by_table() <= set(RULES.names())


def test_the_reward_model_type_names_the_generative_model_rlbridge_lacks():
    # rlbridge's reward model is verl's discriminative kind: only a generative one (or a value the
    # script does not show) needs a person; the line says what rlbridge runs and what it does not.
    assert rename_table.resolve_config_key("reward_model.model.type", "discriminative") is None
    for value in ("generative", None):
        action = rename_table.resolve_config_key("reward_model.model.type", value)
        assert action.action is rename_table.Action.MANUAL
        assert "sequence classifier" in action.message and "generative reward model served through" in action.message
