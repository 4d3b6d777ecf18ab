"""verl's experimental one-step-off and fully async launches, migrated, run as separate_async with
their own rollout.* / async_training.* keys moved to rlbridge's homes (shims/async_trainers.py)."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from core_v1.config import ConfigError, compose_config
from shims.config import LegacyConfigShim
from shims.rename_table import resolve_entrypoint

PRESET = "quickstart"


def composed(*tokens: str):
    """The config of a launch of `module`, as the migrated script gives it to core_v1.main_ppo."""
    shim = LegacyConfigShim()
    return compose_config(PRESET, shim.migrate_overrides(list(tokens)), migrate=shim.migrate_config)


def entry_tokens(module: str) -> list[str]:
    return [f"{key}={value}" for key, value in resolve_entrypoint(module).also_set]


def test_fully_async_settings_become_the_sync_interval_batch_staleness_and_pool(capsys):
    cfg = composed(
        *entry_tokens("verl.experimental.fully_async_policy.fully_async_main"),
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "data.train_batch_size=0",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=4",
        "rollout.total_rollout_steps=5120",
        "async_training.staleness_threshold=0.5",
        "async_training.trigger_parameter_sync_step=4",
        "async_training.require_batches=2",
        "async_training.partial_rollout=False",
    )
    separate = cfg.trainer.v1.separate_async
    assert cfg.trainer.v1.trainer_mode == "separate_async"
    assert separate.parameter_sync_step == 4 * 2 and cfg.data.train_batch_size == 4 * 2 * 8
    assert separate.num_warmup_batches == 1 and cfg.trainer.v1.sampler.max_off_policy_threshold == math.ceil(1.5) + 1
    assert separate.reproducible is True  # no partial rollout: a request finishes on the weights it began with
    assert cfg.trainer.total_training_steps == 5120 // 64
    assert (cfg.actor_rollout_ref.rollout.nnodes, cfg.actor_rollout_ref.rollout.n_gpus_per_node) == (1, 4)
    assert cfg.actor_rollout_ref.rollout.checkpoint_engine.backend == "nccl"
    assert cfg.algorithm.rollout_correction.bypass_mode is True
    assert "rollout" not in cfg and "async_training" not in cfg
    lines = [line for line in capsys.readouterr().err.splitlines() if "separate_async mode" in line]
    assert len(lines) == 8 and any("-> trainer.v1.separate_async.parameter_sync_step=8" in line for line in lines)


def test_fully_async_without_its_keys_takes_verls_own_defaults():
    # The migrated launch names the fully async trainer by one of its keys (verl's default), so a launch
    # that sets none of them is not taken for one step off (its train_batch_size=0 is verl's "unused").
    cfg = composed(
        *entry_tokens("verl.experimental.fully_async_policy.fully_async_main"),
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "data.train_batch_size=0",
    )
    # verl's fully_async_ppo_trainer.yaml: trigger_parameter_sync_step 4, require_batches 1, staleness 0.1.
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 4 and cfg.data.train_batch_size == 16
    assert cfg.trainer.v1.sampler.max_off_policy_threshold == 3 and cfg.trainer.v1.separate_async.reproducible is False


def test_the_old_fully_async_rollouters_epochs_and_validation_move_to_the_trainer():
    # verl 0.6's recipe.fully_async_policy: the rollouter's passes over the data and validation every
    # N weight syncs (one rlbridge step is one sync window).
    tokens = [
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "trainer.total_epochs=15",
        "trainer.test_freq=3",
        "rollout.total_epochs=10",
        "rollout.test_freq=5",
    ]
    cfg = composed(*tokens, "async_training.require_batches=1")
    assert (cfg.trainer.total_epochs, cfg.trainer.test_freq) == (10, 5)
    with pytest.raises(ConfigError, match="rollout.total_epochs"):  # not a key of the one-step-off trainer
        composed(*tokens, "data.train_batch_size=8")


def test_one_step_off_sends_the_weights_after_every_step():
    cfg = composed(
        *entry_tokens("verl.experimental.one_step_off_policy.main_ppo"),
        "data.train_batch_size=24",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "rollout.nnodes=1",
        "rollout.n_gpus_per_node=2",
    )
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 6 and cfg.data.train_batch_size == 24
    assert OmegaConf.select(cfg, "trainer.v1.sampler.max_off_policy_threshold") == 8  # rlbridge's own, untouched
    with pytest.raises(ConfigError, match="not a multiple of"):
        composed("data.train_batch_size=10", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "rollout.nnodes=1")


@pytest.mark.parametrize(
    "token, named",
    [
        ("async_training.use_dynamic_resource_scheduling=True", "dynamic resource scheduling"),
        ("async_training.use_trainer_do_validate=True", "validating on the training pool"),
        ("async_training.some_new_switch=1", "no equivalent"),
    ],
)
def test_a_setting_with_no_equivalent_is_one_refusal_line(token, named):
    with pytest.raises(ConfigError) as refused:
        composed("actor_rollout_ref.actor.ppo_mini_batch_size=4", token)
    message = str(refused.value)
    assert message.startswith("not supported on rlbridge: ") and named in message and "\n" not in message


def test_values_that_ask_for_nothing_pass_quietly():
    cfg = composed(
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "async_training.use_dynamic_resource_scheduling=False",
        "async_training.use_trainer_do_validate=False",
        "rollout.n=4",
        "async_training.concurrent_samples_per_replica=16",
    )
    assert cfg.trainer.v1.separate_async.parameter_sync_step == 4
