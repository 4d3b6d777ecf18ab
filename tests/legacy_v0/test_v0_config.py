"""The V0 config: verl's V0 keys read as V0 read them, verl's config names, backend verdicts, errors."""

from __future__ import annotations

import pytest

from core_v1.main_ppo import main
from legacy_v0.config import compose_v0
from shims.v0_keys import KeyTableOnV0


@pytest.fixture
def paths(tiny_assets) -> list[str]:
    return [f"actor_rollout_ref.model.path={tiny_assets['model']}", f"data.train_files={tiny_assets['train']}"]


def dry_run_v0(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([*argv, "trainer.use_v1=false", "trainer.dry_run=true"])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("error:")]


def test_v0_era_keys_are_v0_settings_not_legacy_keys(paths, capsys):
    code, out, err = dry_run_v0(
        capsys,
        *paths,
        "reward_model.reward_manager=prime",
        "+reward_model.reward_kwargs.timeout_s=5",
        "custom_reward_function.name=my_score",
        "reward_model.overlong_buffer.enable=false",
    )
    assert code == 0, err
    assert "legacy key" not in err and "V0 reward:   reward manager prime" in out
    v0 = compose_v0(
        overrides=[
            *paths,
            "reward_model.reward_manager=dapo",
            "reward_model.overlong_buffer.enable=true",
            "reward_model.overlong_buffer.len=8",
            "custom_reward_function.name=my_score",
        ],
        legacy_keys=KeyTableOnV0(),
    )
    assert (v0.settings.reward_manager, v0.settings.overlong_buffer.len) == ("dapo", 8)
    assert v0.ppo_config().reward.custom_reward_function.name == "my_score"  # read where the shared core reads it
    assert "reward_model" not in v0.raw  # V0's own section is taken out of the shared config


def test_verl_config_names_with_verls_relative_config_path(paths, capsys):
    code, out, err = dry_run_v0(
        capsys,
        "--config-path=config",
        "--config-name=ppo_megatron_trainer.yaml",
        *paths,
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.use_dist_checkpointing=true",
    )
    assert code == 0, err
    assert "using rlbridge's built-in 'ppo_megatron_trainer'" in err
    assert err.count("=megatron: rlbridge trains with FSDP") == 3  # actor, ref, critic: one line each
    assert "training fsdp" in out and "megatron.{tensor_model_parallel_size, use_dist_checkpointing}" in err
    assert "weights are loaded from actor_rollout_ref.model.path" in err
    code, _, err = dry_run_v0(capsys, "--config-path=config", "--config-name=my_trainer", *paths)
    assert code == 2 and "does not exist" in error_lines(err)[0]  # only verl's own names fall back


def test_a_users_yaml_can_start_from_verls_megatron_preset(paths, tmp_path, capsys):
    (tmp_path / "mine.yaml").write_text(
        "defaults:\n  - ppo_megatron_trainer\n  - _self_\ntrainer:\n  total_epochs: 3\n"
    )
    code, out, err = dry_run_v0(capsys, f"--config-path={tmp_path}", "--config-name=mine", *paths)
    assert code == 0, err
    assert err.count("=megatron: rlbridge trains with FSDP") == 3


def test_use_v1_false_in_a_users_yaml_reads_its_v0_sections(paths, tmp_path, capsys):
    (tmp_path / "old.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\ntrainer:\n  use_v1: false\n"
        "reward_model:\n  reward_manager: dapo\n  overlong_buffer:\n    enable: true\n    len: 16\n"
        "  enable: false\n  rollout:\n    name: ???\n"
    )  # verl's YAMLs leave a disabled reward model's engine open
    code = main([f"--config-path={tmp_path}", "--config-name=old", *paths, "trainer.dry_run=true"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "V0 (deprecated" in out and "reward manager dapo (overlong buffer 16 tokens" in out


def test_reward_settings_under_a_disabled_reward_model_are_still_judged(paths, capsys):
    # verl kept the sandbox scorer and the reward loop class under reward_model; they are no setting
    # of the (disabled) reward model, so V0 judges them as it judges them anywhere, not silently drops them:
    # the reward loop class is refused, the Sandbox Fusion URL is carried (the code scorer uses it).
    code, _, err = dry_run_v0(capsys, *paths, "reward_model.enable=false", "reward_model.reward_loop_source=importlib")
    assert code == 2 and "not supported on rlbridge" in error_lines(err)[0], err
    code, _, err = dry_run_v0(
        capsys, *paths, "reward_model.enable=false", "reward_model.sandbox_fusion.url=https://sandbox/run"
    )
    assert code == 0, err
    code, _, err = dry_run_v0(capsys, *paths, "reward_model.sandbox_fusion.url=null", "reward_model.num_workers=4")
    assert code == 0, err


@pytest.mark.parametrize(
    "override, message",
    [
        ("reward_model.overlong_buffer.lenn=4", "unknown config key 'reward_model.overlong_buffer.lenn'"),
        ("rewrd_model.reward_manager=dapo", "unknown config key 'rewrd_model.reward_manager'"),
        ("data.sampler.class_path=x.py", "data.sampler needs both class_path"),
        ("critic.model.lora_rank=8", "LoRA on the critic"),
        ("data.train_batch_size=[1,", "data.train_batch_size"),
    ],
)
def test_v0_mistakes_are_one_error_line(override, message, paths, capsys):
    code, _, err = dry_run_v0(capsys, *paths, override)
    assert code == 2 and len(error_lines(err)) == 1 and message in error_lines(err)[0], err
    assert "Traceback" not in err


def test_backends_rlbridge_lacks_map_with_one_warning_each(paths, capsys):
    code, out, err = dry_run_v0(
        capsys,
        *paths,
        "actor_rollout_ref.rollout.name=sglang",
        "trainer.device=npu",
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2",
    )
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 3
    assert "rollout vllm" in out
    assert any("sglang" in w for w in warnings) and any("npu" in w for w in warnings)
    assert any("ulysses_sequence_parallel_size=2" in w for w in warnings)


def test_a_reference_degree_that_reads_the_actors_old_home_follows_it(paths, tmp_path, capsys):
    # verl 0.4's ppo_trainer.yaml: the reference's Ulysses degree interpolates the actor's, and both
    # old homes move under fsdp_config on V0.
    (tmp_path / "v04.yaml").write_text(
        "defaults: [ppo_trainer, _self_]\n"
        "actor_rollout_ref:\n"
        "  actor:\n"
        "    ulysses_sequence_parallel_size: 1\n"
        "  ref:\n"
        "    ulysses_sequence_parallel_size: ${actor_rollout_ref.actor.ulysses_sequence_parallel_size}\n"
    )
    code, _, err = dry_run_v0(capsys, f"--config-path={tmp_path}", "--config-name=v04", *paths)
    assert code == 0 and not error_lines(err), err


@pytest.mark.parametrize(
    "asks",
    [
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
    ],
)
def test_the_dry_run_plans_the_multi_turn_rollout_the_v0_trainer_runs(paths, capsys, asks):
    # V0's rollout runs V1's agent loops (tests/legacy_v0/test_agent_loops.py): the plan accepts them.
    code, out, err = dry_run_v0(capsys, *paths, asks)
    assert code == 0 and not error_lines(err), err


def test_the_dry_run_refuses_an_agent_loop_the_v0_trainer_would_refuse(paths, capsys):
    # The plan must not promise what the run then refuses: a loop nobody registered, as V1 refuses it.
    code, out, err = dry_run_v0(capsys, *paths, "actor_rollout_ref.rollout.agent.default_agent_loop=no_such_agent")
    assert code == 2 and error_lines(err) == [error_lines(err)[0]]
    assert "unknown agent loop 'no_such_agent'" in error_lines(err)[0]
