"""The config shim: every config row of the rename table (shims/rename_table.py), on the command line and in YAML.

A legacy key on the command line must have exactly the effect of its new key (the composed
configs are compared whole) and print exactly one warning line; a manual key stops with one
line that names the replacement; unknown keys fail with a suggestion, `+`-added ones included.
"""

from __future__ import annotations

import functools
import textwrap

import pytest
from omegaconf import OmegaConf

from core_v1.config import ConfigError, compose_config, to_config, unsupported_features
from shims import rename_table
from shims.config import LegacyConfigShim, migrate_overrides
from shims.rename_table import Action
from shims.verl_keys import verdicts

PRESET = "quickstart"

# row.old -> (the old token, the tokens a V1 user writes for the same effect; () = no effect)
ROW_SAMPLES: dict[str, tuple[str, tuple[str, ...]]] = {
    "reward_model.enable": ("reward_model.enable=true", ("reward.reward_model.enable=true",)),
    "reward_model.enable_resource_pool": (
        "reward_model.enable_resource_pool=true",
        ("reward.reward_model.enable_resource_pool=true",),
    ),
    "reward_model.n_gpus_per_node": ("reward_model.n_gpus_per_node=2", ("reward.reward_model.n_gpus_per_node=2",)),
    "reward_model.nnodes": ("reward_model.nnodes=2", ("reward.reward_model.nnodes=2",)),
    "reward_model.model.path": ("reward_model.model.path=/models/rm", ("reward.reward_model.model_path=/models/rm",)),
    "reward_model.rollout.<k>": (
        "reward_model.rollout.gpu_memory_utilization=0.3",
        ("+reward.reward_model.rollout.gpu_memory_utilization=0.3",),
    ),
    "reward_model.num_workers": ("reward_model.num_workers=3", ("reward.num_workers=3",)),
    "reward_model.micro_batch_size_per_gpu": (
        "reward_model.micro_batch_size_per_gpu=4",
        ("reward.reward_model.micro_batch_size_per_gpu=4",),
    ),
    "reward_model.micro_batch_size": (
        "reward_model.micro_batch_size=4",
        ("reward.reward_model.micro_batch_size_per_gpu=4",),
    ),
    "reward_model.max_length": ("reward_model.max_length=512", ("reward.reward_model.max_length=512",)),
    "reward_model.model.input_tokenizer": (
        "reward_model.model.input_tokenizer=/models/policy",
        ("reward.reward_model.input_tokenizer=/models/policy",),
    ),
    "reward_model.model.trust_remote_code": (
        "reward_model.model.trust_remote_code=true",
        ("reward.reward_model.trust_remote_code=true",),
    ),
    "reward_model.reward_manager": ("reward_model.reward_manager=dapo", ("reward.reward_manager.name=dapo",)),
    "reward_manager.<k>": ("reward_manager.source=importlib", ("reward.reward_manager.source=importlib",)),
    "reward_model.reward_loop_source": (
        "reward_model.reward_loop_source=importlib",
        ("reward.reward_manager.source=importlib",),
    ),
    "reward_model.reward_loop_module_path": (
        "reward_model.reward_loop_module_path=/r/loop.py",
        ("reward.reward_manager.module.path=/r/loop.py",),
    ),
    "reward_model.reward_loop_class_name": (
        "reward_model.reward_loop_class_name=MyLoop",
        ("reward.reward_manager.name=MyLoop",),
    ),
    "reward_model.reward_kwargs.<k>": (
        "+reward_model.reward_kwargs.max_resp_len=64",
        ("+reward.reward_kwargs.max_resp_len=64",),
    ),
    "reward_model.overlong_buffer.<k>": (
        "reward_model.overlong_buffer.len=64",
        ("+reward.reward_kwargs.overlong_buffer_cfg.len=64",),
    ),
    "reward_model.sandbox_fusion.<k>": (
        "reward_model.sandbox_fusion.url=http://sandbox:8080",
        ("reward.sandbox_fusion.url=http://sandbox:8080",),
    ),
    "sandbox_fusion.<k>": ("sandbox_fusion.max_concurrent=8", ("reward.sandbox_fusion.max_concurrent=8",)),
    "custom_reward_function.<k>": (
        "custom_reward_function.path=/r/score.py",
        ("reward.custom_reward_function.path=/r/score.py",),
    ),
    "reward_model.use_reward_loop": ("reward_model.use_reward_loop=true", ()),
    "trainer.use_legacy_worker_impl": ("trainer.use_legacy_worker_impl=auto", ()),
    # How verl's reward-model worker ran its forward passes: deleted, no score depends on it.
    "reward_model.use_dynamic_bsz": ("reward_model.use_dynamic_bsz=true", ()),
    "reward_model.forward_max_token_len_per_gpu": ("reward_model.forward_max_token_len_per_gpu=4096", ()),
    "reward_model.param_offload": ("reward_model.param_offload=true", ()),
    "reward_model.model.use_remove_padding": ("reward_model.model.use_remove_padding=true", ()),
    "reward_model.model.use_fused_kernels": ("reward_model.model.use_fused_kernels=true", ()),
    "reward_model.model.use_shm": ("reward_model.model.use_shm=true", ()),
    "reward_model.model.fsdp_config.<k>": ("reward_model.model.fsdp_config.param_offload=true", ()),
    "critic.model.fsdp_config.<k>": (
        "critic.model.fsdp_config.param_offload=true",
        ("critic.fsdp.param_offload=true",),
    ),
    "actor_rollout_ref.rollout.mode": ("actor_rollout_ref.rollout.mode=sync", ()),
    "actor_rollout_ref.rollout.update_weights_bucket_megabytes": (
        "actor_rollout_ref.rollout.update_weights_bucket_megabytes=256",
        ("actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=256",),
    ),
    "actor_rollout_ref.rollout.multi_turn.enable": (
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        (
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        ),
    ),
    "actor_rollout_ref.rollout.skip_rollout": (
        "actor_rollout_ref.rollout.skip_rollout=true",
        ("skip.rollout.enable=true",),
    ),
    "actor_rollout_ref.rollout.skip_dump_dir": (
        "actor_rollout_ref.rollout.skip_dump_dir=/dumps",
        ("skip.rollout.dump_dir=/dumps",),
    ),
    "trainer.profile_steps": ("trainer.profile_steps=[1,3]", ("global_profiler.steps=[1,3]",)),
    "trainer.controller_nsight_options.<k>": (
        "trainer.controller_nsight_options.trace=cuda",
        ("+global_profiler.global_tool_config.nsys.controller_nsight_options.trace=cuda",),
    ),
    "trainer.worker_nsight_options.<k>": (
        "trainer.worker_nsight_options.capture-range=cudaProfilerApi",
        ("+global_profiler.global_tool_config.nsys.worker_nsight_options.capture-range=cudaProfilerApi",),
    ),
    "trainer.npu_profile.<k>": (
        "trainer.npu_profile.options.level=level1",
        ("+global_profiler.global_tool_config.npu.options.level=level1",),
    ),
    "ray_init.num_cpus": ("ray_init.num_cpus=4", ("ray_kwargs.ray_init.num_cpus=4",)),
    "ray_init.timeline_json_file": (
        "ray_init.timeline_json_file=/tmp/t.json",
        ("ray_kwargs.timeline_json_file=/tmp/t.json",),
    ),
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size": (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
        ("actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size=2",),
    ),
    "actor_rollout_ref.actor.use_torch_compile": (
        "actor_rollout_ref.actor.use_torch_compile=true",
        ("actor_rollout_ref.actor.fsdp_config.use_torch_compile=true",),
    ),
    "actor_rollout_ref.ref.use_torch_compile": (
        "actor_rollout_ref.ref.use_torch_compile=true",
        ("actor_rollout_ref.ref.fsdp_config.use_torch_compile=true",),
    ),
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size": (
        "actor_rollout_ref.ref.ulysses_sequence_parallel_size=2",
        ("actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size=2",),
    ),
    "critic.ulysses_sequence_parallel_size": (
        "critic.ulysses_sequence_parallel_size=2",
        ("critic.fsdp.ulysses_sequence_parallel_size=2",),
    ),
    "actor_rollout_ref.ref.param_offload": (
        "actor_rollout_ref.ref.param_offload=true",
        ("actor_rollout_ref.ref.fsdp_config.param_offload=true",),
    ),
    "data.tool_config_path": (
        "data.tool_config_path=/t/tools.yaml",
        ("actor_rollout_ref.rollout.multi_turn.tool_config_path=/t/tools.yaml",),
    ),
    "data.function_tool_path": (
        "data.function_tool_path=/t/tools.py",
        ("actor_rollout_ref.rollout.multi_turn.function_tool_path=/t/tools.py",),
    ),
    "actor_rollout_ref.actor.checkpoint.contents": (
        "actor_rollout_ref.actor.checkpoint.contents=[model]",
        ("actor_rollout_ref.actor.checkpoint.save_contents=[model]",),
    ),
    "critic.checkpoint.contents": ("critic.checkpoint.contents=[model]", ("critic.checkpoint.save_contents=[model]",)),
    "actor_rollout_ref.rollout.multi_turn.max_turns": (
        "actor_rollout_ref.rollout.multi_turn.max_turns=3",
        ("actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",),
    ),
    "trainer.val_generations_to_log_to_wandb": (
        "trainer.val_generations_to_log_to_wandb=5",
        ("trainer.log_val_generations=5",),
    ),
    # Rows that rewrite the value too.
    "data.sampler.class_path": (
        "data.sampler.class_path=pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu",
        ("data.sampler.class_path=pkg://core_v1.data.random_curriculum",),
        ("data.sampler.class_name=RandomCurriculumSampler",),
    ),  # on both sides
    "algorithm.rollout_correction.use_policy_gradient": (
        "algorithm.rollout_correction.use_policy_gradient=true",
        ("algorithm.rollout_correction.loss_type=reinforce",),
    ),
    "algorithm.rollout_correction.rollout_rs": (  # verl 0.6's criterion name
        "algorithm.rollout_correction.rollout_rs=geometric",
        ("algorithm.rollout_correction.rollout_rs=seq_mean_k1",),
        ("algorithm.rollout_correction.rollout_rs_threshold=1.001",),
    ),
}
# Another engine's offload flags: FSDP2's (rule engine-offload).
ROW_SAMPLES.update(
    {
        f"{section}.{engine}.{flag}": (f"{section}.{engine}.{flag}=true", (f"{home}.{flag}=true",))
        for section, home in (
            ("actor_rollout_ref.actor", "actor_rollout_ref.actor.fsdp_config"),
            ("actor_rollout_ref.ref", "actor_rollout_ref.ref.fsdp_config"),
            ("critic", "critic.fsdp"),
        )
        for engine in ("megatron", "mindspeed", "veomni", "torchtitan")
        for flag in ("param_offload", "optimizer_offload")
    }
)

ROW_SAMPLES.update(
    {
        f"actor_rollout_ref.actor.{engine}.{key}": (
            f"+actor_rollout_ref.actor.{engine}.{key}={value}",
            (f"actor_rollout_ref.actor.moe.{home}={value}",),
        )
        for engine in ("megatron.override_transformer_config", "mindspeed.mcore_kwargs")
        for key, home, value in (
            ("moe_aux_loss_coeff", "aux_loss_coeff", "0.01"),
            ("moe_z_loss_coeff", "z_loss_coeff", "0.001"),
            ("moe_router_load_balancing_type", "load_balancing_type", "none"),
        )
    }
)

AUTOMATIC_ROWS = [row for row in rename_table.CONFIG_KEY_ROWS if row.action is not Action.MANUAL]


# Rows whose V1 home the key table declares no-op or refused, or whose sample value it maps, say so
# in one line of their own (tests/shims/test_verl_keys.py walks them); the others are plain moves.
def _lands_on_a_verdict(row) -> bool:
    """The sample's V1 home has a no-op/refused row, or its value is one the key table maps."""
    key, _, value = ROW_SAMPLES[row.old][0].lstrip("+").partition("=")
    new_key = row.new_key_for(key)
    return verdicts.row_for(new_key) is not None or verdicts.value_map_for(new_key, value) is not None


MOVED_ROWS = [
    row for row in AUTOMATIC_ROWS if row.new is None or row.old not in ROW_SAMPLES or not _lands_on_a_verdict(row)
]
# A manual row under a key the key table declares no-op as written (`reward_model.megatron.<k>`) is a no-op.
MANUAL_ROWS = [
    row
    for row in rename_table.CONFIG_KEY_ROWS
    if row.action is Action.MANUAL and verdicts.row_for(row.old.replace("<k>", "some_key")) is None
]


def compose_with_shim(overrides, config_dir=None, config_name=PRESET):
    shim = LegacyConfigShim(config_dir=str(config_dir) if config_dir else None)
    cfg = compose_config(config_name, shim.migrate_overrides(list(overrides)), config_dir, migrate=shim.migrate_config)
    return cfg, shim


@functools.lru_cache(maxsize=1)
def base_config() -> str:
    return repr(as_dict(compose_config(PRESET, [])))


def as_dict(cfg):
    return OmegaConf.to_container(cfg, resolve=False)


def stderr_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


def test_every_automatic_row_has_a_sample():
    assert sorted(ROW_SAMPLES) == sorted(row.old for row in AUTOMATIC_ROWS)


@pytest.mark.parametrize("row", MOVED_ROWS, ids=lambda row: row.old)
def test_old_key_has_exactly_the_new_keys_effect_and_warns_once(row, capsys):
    old_token, new_tokens, *companions = ROW_SAMPLES[row.old]  # companions: keys the sample needs, not legacy
    companions = list(companions[0]) if companions else []
    migrated, shim = compose_with_shim([old_token, *companions])
    warnings = stderr_lines(capsys)
    expected = compose_config(PRESET, [*new_tokens, *companions])
    assert stderr_lines(capsys) == []  # the new keys are not legacy
    assert as_dict(migrated) == as_dict(expected)
    if new_tokens:  # the sample really changes something, so the comparison above means something
        assert repr(as_dict(expected)) != base_config()
    old_key = old_token.lstrip("+").split("=", 1)[0]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"legacy key {old_key} ")
    assert warnings[0].endswith("(python -m codemods.migrate <file> rewrites it)")
    if row.action is Action.DELETE:
        assert " deleted: " in warnings[0]
    else:
        assert f" -> {row.new_key_for(old_key)}" in warnings[0]
    assert [note.old_key for note in shim.notes] == [old_key]
    to_config(migrated)  # and the result is a valid typed config


@pytest.mark.parametrize("row", MANUAL_ROWS, ids=lambda row: row.old)
def test_manual_key_stops_with_one_line_naming_the_replacement(row):
    key = row.old.replace("<k>", "some_key")
    with pytest.raises(ConfigError) as caught:
        migrate_overrides([f"{key}=7"])  # not verl's default (a default asks for nothing: a no-op)
    message = str(caught.value)
    assert "\n" not in message and key in message and row.message in message


def test_reward_managers_prime_and_batch_move(capsys):
    assert migrate_overrides(["reward_model.reward_manager=prime"]) == ["reward.reward_manager.name=prime"]
    assert migrate_overrides(["reward_model.reward_manager=batch"]) == ["reward.reward_manager.name=batch"]


def test_value_dependent_rows_leave_other_values_alone(capsys):
    assert migrate_overrides(
        ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=false"]
    ) == ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.multi_turn.enable=false"]
    assert stderr_lines(capsys) == []


def test_also_set_does_not_override_what_the_user_chose(capsys):
    out = migrate_overrides(
        [
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            "actor_rollout_ref.rollout.agent.default_agent_loop=my_loop",
        ]
    )
    assert "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent" not in out
    assert len(stderr_lines(capsys)) == 1


def test_only_the_last_override_of_a_key_is_judged(capsys):
    # Hydra keeps the last value; an earlier refused one never reaches the run (verl's router-replay
    # example sets the key twice, the second time from a variable).
    key = "actor_rollout_ref.rollout.enable_rollout_routing_replay"
    assert migrate_overrides([f"{key}=True", f"{key}=False"]) == []  # asks for nothing: a no-op here
    with pytest.raises(ConfigError, match="router replay"):
        migrate_overrides([f"{key}=False", f"{key}=True"])


def test_overrides_without_legacy_keys_pass_through_silently(capsys):
    tokens = ["trainer.total_epochs=3", "+reward.reward_kwargs.x=1", "~trainer.logger", "data.train_files=[a,b]"]
    assert migrate_overrides(tokens) == tokens
    assert stderr_lines(capsys) == []


# --------------------------------------------------------------------------- YAML


def write_yaml(directory, name, body):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.yaml").write_text(textwrap.dedent(body))
    return directory


def test_legacy_sections_in_yaml_move_with_one_warning_each(tmp_path, capsys):
    old_dir = write_yaml(
        tmp_path / "old",
        "user",
        """\
        defaults:
          - ppo_trainer
          - _self_
        reward_model:
          enable: true
          model:
            path: /models/rm
          reward_kwargs:
            max_resp_len: 64
        critic:
          model:
            fsdp_config:
              param_offload: true
        actor_rollout_ref:
          ref:
            param_offload: true
          rollout:
            mode: sync
        trainer:
          use_legacy_worker_impl: auto
        """,
    )
    new_dir = write_yaml(
        tmp_path / "new",
        "user",
        """\
        defaults:
          - ppo_trainer
          - _self_
        reward:
          reward_model:
            enable: true
            model_path: /models/rm
          reward_kwargs:
            max_resp_len: 64
        critic:
          fsdp:
            param_offload: true
        actor_rollout_ref:
          ref:
            fsdp_config:
              param_offload: true
        """,
    )
    migrated, shim = compose_with_shim([], old_dir, "user")
    warnings = stderr_lines(capsys)
    expected, _ = compose_with_shim([], new_dir, "user")
    assert stderr_lines(capsys) == []
    assert as_dict(migrated) == as_dict(expected)
    assert len(warnings) == 7 and all(w.startswith("legacy key ") for w in warnings)
    assert all(w.endswith(f"(python -m codemods.migrate {old_dir} rewrites it)") for w in warnings)
    assert {note.old_key for note in shim.notes} == {
        "reward_model.enable",
        "reward_model.model.path",
        "reward_model.reward_kwargs.max_resp_len",
        "critic.model.fsdp_config.param_offload",
        "actor_rollout_ref.ref.param_offload",
        "actor_rollout_ref.rollout.mode",
        "trainer.use_legacy_worker_impl",
    }
    assert migrated.actor_rollout_ref.rollout.mode == "async"  # reset to its default, not deleted


def test_manual_key_in_yaml_stops_the_run(tmp_path):
    directory = write_yaml(
        tmp_path,
        "user",
        """\
        defaults: [ppo_trainer, _self_]
        data:
          datagen:
            path: my_generator.py
        """,
    )
    with pytest.raises(ConfigError, match=r"data\.datagen\.path: dynamic data generation \(data\.datagen\) is removed"):
        compose_with_shim([], directory, "user")


def test_yaml_multi_turn_sets_the_tool_agent_unless_chosen(tmp_path, capsys):
    directory = write_yaml(
        tmp_path,
        "user",
        """\
        defaults: [ppo_trainer, _self_]
        actor_rollout_ref:
          rollout:
            multi_turn:
              enable: true
        """,
    )
    cfg, _ = compose_with_shim([], directory, "user")
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "tool_agent"
    cfg, _ = compose_with_shim(["actor_rollout_ref.rollout.agent.default_agent_loop=mine"], directory, "user")
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "mine"
    assert sum("multi_turn.enable" in line for line in stderr_lines(capsys)) == 2  # once per start-up


def test_cli_and_yaml_name_a_key_once(tmp_path, capsys):
    directory = write_yaml(
        tmp_path,
        "user",
        """\
        defaults: [ppo_trainer, _self_]
        actor_rollout_ref:
          rollout:
            multi_turn:
              enable: true
        """,
    )
    compose_with_shim(["actor_rollout_ref.rollout.multi_turn.enable=true"], directory, "user")
    assert len(stderr_lines(capsys)) == 1


def test_a_boolean_given_to_a_number_key_is_the_number_python_compares_it_as(capsys):
    # verl 0.4-0.7's run_model_reward.sh: trainer.test_freq="${VAL_BEFORE_TRAIN}" (False): verl never validates.
    cfg, _ = compose_with_shim(["trainer.test_freq=False", "trainer.val_before_train=False"])
    assert cfg.trainer.test_freq == 0 and cfg.trainer.val_before_train is False
    assert "trainer.test_freq=false -> 0" in capsys.readouterr().err


def test_an_interpolation_of_a_moved_key_reads_its_new_home(tmp_path):
    # verl 0.4's ppo_trainer.yaml: the reference's torch.compile switch reads the actor's, and both keys
    # move under fsdp_config (the actor's from the command line in the second run, else from YAML).
    directory = write_yaml(
        tmp_path,
        "user",
        """\
        defaults: [ppo_trainer, _self_]
        actor_rollout_ref:
          actor:
            use_torch_compile: true
          ref:
            use_torch_compile: ${actor_rollout_ref.actor.use_torch_compile}
        """,
    )
    for overrides, expected in (([], True), (["actor_rollout_ref.actor.use_torch_compile=false"], False)):
        cfg, _ = compose_with_shim(overrides, directory, "user")
        assert to_config(cfg).actor_rollout_ref.ref.fsdp_config.use_torch_compile is expected


def test_a_legacy_key_the_command_line_mapped_is_not_left_in_the_yaml(tmp_path):
    # Ulysses sizes map to 1 (one line); verl's own YAML still holds the old key, which Hydra's
    # command line would override: it goes too.
    directory = write_yaml(
        tmp_path,
        "user",
        "defaults: [ppo_trainer, _self_]\nactor_rollout_ref: {actor: {ulysses_sequence_parallel_size: 1}}\n",
    )
    cfg, _ = compose_with_shim(["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"], directory, "user")
    assert to_config(cfg).actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size == 1


# --------------------------------------------------------------------------- unknown keys


def test_typo_in_yaml_fails_with_a_suggestion(tmp_path):
    directory = write_yaml(
        tmp_path,
        "user",
        """\
        defaults: [ppo_trainer, _self_]
        trainer:
          total_epoch: 3
        """,
    )
    with pytest.raises(
        ConfigError, match=r"unknown config key 'trainer.total_epoch'\. Did you mean 'trainer.total_epochs'"
    ):
        compose_with_shim([], directory, "user")


def test_yaml_not_built_on_the_schema_fails_with_one_line(tmp_path):
    # verl's recipe/r1/config/evaluation.yaml has a custom_reward_function section but no defaults.
    directory = write_yaml(
        tmp_path,
        "evaluation",
        """\
        data:
          path: /tmp/responses.parquet
        custom_reward_function:
          path: null
        """,
    )
    with pytest.raises(ConfigError, match=r"does not start from rlbridge's schema: put `defaults: \[ppo_trainer"):
        compose_with_shim([], directory, "evaluation")


@pytest.mark.parametrize(
    "token, suggestion",
    [
        ("trainer.total_epoch=3", "trainer.total_epochs"),
        ("+trainer.total_epoch=3", "trainer.total_epochs"),
        ("+actor_rollout_ref.actor.ppo_mini_batchsize=4", "actor_rollout_ref.actor.ppo_mini_batch_size"),
        ("++algorithm.adv_estimater=grpo", "algorithm.adv_estimator"),
    ],
)
def test_typo_fails_with_a_suggestion_with_or_without_plus(token, suggestion):
    with pytest.raises(ConfigError) as caught:
        compose_with_shim([token])
    assert f"Did you mean {suggestion!r}" in str(caught.value) and "\n" not in str(caught.value)


def test_plus_added_key_that_is_no_typo_is_kept_with_a_warning(capsys):
    cfg, _ = compose_with_shim(["+actor_rollout_ref.actor.my_team_flag=1", "+reward.reward_kwargs.bonus=2"])
    assert cfg.actor_rollout_ref.actor.my_team_flag == 1 and cfg.reward.reward_kwargs.bonus == 2
    warnings = stderr_lines(capsys)
    assert len(warnings) == 1 and "actor_rollout_ref.actor.my_team_flag (added with '+')" in warnings[0]


def test_plus_on_a_key_verl_lacked_but_the_schema_has(capsys):
    cfg, _ = compose_with_shim(["+actor_rollout_ref.rollout.checkpoint_manager_class=infra.Sync"])
    assert cfg.actor_rollout_ref.rollout.checkpoint_manager_class == "infra.Sync"
    assert stderr_lines(capsys) == []


def test_deleting_a_schema_key_is_refused():
    with pytest.raises(ConfigError, match="'trainer.nnodes' was deleted"):
        compose_with_shim(["~trainer.nnodes"])


def test_composed_config_is_closed_again():
    cfg, _ = compose_with_shim([])
    with pytest.raises(Exception):
        cfg.trainer.not_a_key = 1


def test_v0_only_features_are_refused_on_v1_and_kept_on_v0():
    values = {"actor_rollout_ref.rollout.checkpoint_manager_class": "infra.Sync"}
    assert set(values) <= {f.key for f in rename_table.V0_ONLY_FEATURES}
    for key, value in values.items():
        on_v1 = to_config(compose_config(PRESET, [f"{key}={value}"]))
        on_v0 = to_config(compose_config(PRESET, [f"{key}={value}", "trainer.use_v1=false"]))
        assert any(key in problem and "trainer.use_v1=false" in problem for problem in unsupported_features(on_v1))
        assert not any(key in problem for problem in unsupported_features(on_v0))


def test_pf_ppo_runs_on_v1_and_on_v0():
    for extra in ([], ["trainer.use_v1=false"]):
        cfg = to_config(compose_config(PRESET, ["algorithm.use_pf_ppo=true", *extra]))
        assert cfg.algorithm.use_pf_ppo and not any("pf_ppo" in p for p in unsupported_features(cfg))


def test_val_only_needs_validation_files():
    for extra in ([], ["trainer.use_v1=false"]):
        without = to_config(compose_config(PRESET, ["trainer.val_only=true", "data.val_files=null", *extra]))
        assert any("trainer.val_only=true" in p and "data.val_files" in p for p in unsupported_features(without))
        with_files = to_config(compose_config(PRESET, ["trainer.val_only=true", "data.val_files=v.parquet", *extra]))
        assert not any("val_only" in p for p in unsupported_features(with_files))
