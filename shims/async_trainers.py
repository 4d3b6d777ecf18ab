"""verl's experimental asynchronous trainers, as rlbridge's `separate_async` mode runs them.

verl's one-step-off-policy trainer (`verl.experimental.one_step_off_policy.main_ppo`) and its fully
asynchronous trainer (`verl.experimental.fully_async_policy.fully_async_main`) generate on a rollout
pool of their own while the trainer trains, which is what `trainer.v1.trainer_mode=separate_async`
does. Their launches name two sections of their own configs, which `translate` moves to their homes
in a composed config (one line each, as a legacy key's):

- `rollout.nnodes`, `rollout.n_gpus_per_node`: the rollout pool, `actor_rollout_ref.rollout.*`.
- `async_training.*` (fully async only): verl's trainer updates on `require_batches` mini-batches per
  step and sends the weights every `trigger_parameter_sync_step` steps, so the weights change every
  P x R mini-batch updates: `trainer.v1.separate_async.parameter_sync_step` = P x R, and one rlbridge
  step is the prompts between two syncs, `data.train_batch_size` = P x R x ppo_mini_batch_size
  (verl's fully async trainer ignores its own train_batch_size; its scripts set 0).
  `rollout.total_rollout_steps` counts prompts: it becomes `trainer.total_training_steps` = total /
  (P x R x ppo_mini_batch_size). `staleness_threshold` s lets verl's rollout run up to (1 + s) sync
  windows ahead: `num_warmup_batches` = floor(1 + s) whole batches run ahead, and
  `trainer.v1.sampler.max_off_policy_threshold` = ceil(1 + s) + 1 keeps the samples verl would keep.
  `partial_rollout=true` (an update cuts requests, which resume on the new weights) is rlbridge's
  `reproducible=false`; false (each request finishes on the weights it started with) is `true`.
- `rollout.total_epochs`, `rollout.test_freq` (verl 0.6's fully async recipe's rollouter): the
  passes over the data, `trainer.total_epochs` (the smaller of the two), and validation every N
  weight syncs, `trainer.test_freq` = N (a step is one sync window).
- Without `async_training` (one step off): the weights are sent after every step, so
  `parameter_sync_step` = train_batch_size / ppo_mini_batch_size.

A key with no equivalent stops the run with one line (`not supported on rlbridge: ...`), unless its
value asks for nothing. The entrypoint rows of `shims.rename_table` set the mode and what verl's own
configs of these trainers set (rollout log-probs as the old policy's, an NCCL weight sync).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from core_v1.config import ConfigError
from shims.refusals import RefusedKey, RefusedKeysError

SECTIONS = ("rollout", "async_training")
MESSAGE = "verl's experimental async trainers run as rlbridge's separate_async mode (shims/async_trainers.py)"
# verl's fully_async_ppo_trainer.yaml defaults (v0.6-main), for the keys a launch leaves out.
VERL_DEFAULTS = {
    "trigger_parameter_sync_step": 4,
    "require_batches": 1,
    "staleness_threshold": 0.1,
    "partial_rollout": True,
}
# verl 0.6's fully async rollouter's own schedule (`_rollouter_schedule`).
ROLLOUTER_SCHEDULE = ("rollout.total_epochs", "rollout.test_freq")
POOL = {"nnodes": "actor_rollout_ref.rollout.nnodes", "n_gpus_per_node": "actor_rollout_ref.rollout.n_gpus_per_node"}
# Keys that ask for nothing rlbridge lacks at these values (no line is owed beyond the summary).
QUIET = {
    "rollout.n": (None, "verl's async trainers do not read it; samples per prompt are actor_rollout_ref.rollout.n"),
    "async_training.use_trainer_do_validate": (
        {False},
        "validating on the training pool is not supported: rlbridge validates on the rollout replicas",
    ),
    "async_training.use_dynamic_resource_scheduling": (
        {False},
        "dynamic resource scheduling between the pools is not supported: the pools are fixed at start-up",
    ),
    "async_training.dynamic_schedule_policy": (None, "read only with use_dynamic_resource_scheduling"),
    "async_training.dynamic_schedule_deactivate_ratio": (None, "read only with use_dynamic_resource_scheduling"),
    "async_training.dynamic_schedule_enable_rebalance": (None, "read only with use_dynamic_resource_scheduling"),
    "async_training.concurrent_samples_per_replica": (
        None,
        "rlbridge's replicas batch up to actor_rollout_ref.rollout.max_num_seqs requests each",
    ),
    "async_training.compute_prox_log_prob": (
        {False},
        "recomputing the old policy's log-probs on the trainer is not done in this mode: the rollout's "
        "log-probs are the old policy's (algorithm.rollout_correction.bypass_mode)",
    ),
    "async_training.use_rollout_log_probs": (
        {True},
        "the rollout's log-probs are always the old policy's in this mode (bypass_mode)",
    ),
}


@dataclass(frozen=True)
class Moved:
    """One line of the translation: what verl's keys became."""

    old: str
    new: str

    def describe(self) -> str:
        return f"{self.old} -> {self.new}"


def owns(key: str) -> bool:
    """Whether a key is in one of the sections this module translates."""
    return key.split(".", 1)[0] in SECTIONS


def present(cfg: DictConfig) -> bool:
    """Whether a composed config carries a section of verl's experimental async trainers."""
    return any(section in cfg for section in SECTIONS)


def translate(cfg: DictConfig) -> list[Moved]:
    """Move the sections (see the module doc) to their V1 homes, in place; refuse what has none."""
    rollout = _section(cfg, "rollout")
    training = _section(cfg, "async_training")
    moved, refused = [], []
    for key, value in {
        **{f"rollout.{k}": v for k, v in rollout.items()},
        **{f"async_training.{k}": v for k, v in training.items()},
    }.items():
        if key in QUIET:
            allowed, reason = QUIET[key]
            if allowed is not None and value not in allowed:
                refused.append(f"{key}={_text(value)} ({reason})")
            continue
        if (
            key.removeprefix("rollout.") in POOL
            or key == "rollout.total_rollout_steps"
            or key.removeprefix("async_training.") in VERL_DEFAULTS
            or (key in ROLLOUTER_SCHEDULE and "async_training" in cfg)
        ):
            continue
        refused.append(
            f"{key}={_text(value)} (a setting of verl's experimental async trainers with no equivalent "
            "in rlbridge's separate_async mode)"
        )
    if refused:
        keys = [RefusedKey(text.split("=", 1)[0], text, text) for text in refused]
        raise RefusedKeysError(f"not supported on rlbridge: {'; '.join(refused)}", keys)
    for name, home in POOL.items():
        if name in rollout:
            moved.append(_set(cfg, home, rollout[name], f"rollout.{name}"))
    moved.extend(_sync_schedule(cfg, training, rollout.get("total_rollout_steps"), fully_async="async_training" in cfg))
    moved.extend(_rollouter_schedule(cfg, rollout))
    with open_dict(cfg):
        for section in SECTIONS:
            cfg.pop(section, None)
    return moved


def _sync_schedule(cfg: DictConfig, training: dict, total_rollout_steps: Any, fully_async: bool) -> list[Moved]:
    mini = _int(cfg, "actor_rollout_ref.actor.ppo_mini_batch_size")
    if not fully_async:  # one step off: the weights go out after each step
        batch = _int(cfg, "data.train_batch_size")
        if batch % mini:
            raise ConfigError(
                f"data.train_batch_size={batch} is not a multiple of actor_rollout_ref.actor."
                f"ppo_mini_batch_size={mini}; separate_async sends the weights after whole mini-batches"
            )
        return [
            _set(
                cfg,
                "trainer.v1.separate_async.parameter_sync_step",
                batch // mini,
                "one-step-off-policy (weights sent after every step)",
            )
        ]
    settings = {key: training.get(key, default) for key, default in VERL_DEFAULTS.items()}
    updates = int(settings["trigger_parameter_sync_step"]) * int(settings["require_batches"])
    staleness = float(settings["staleness_threshold"])
    given = ", ".join(
        f"async_training.{k}={_text(settings[k])}" for k in ("trigger_parameter_sync_step", "require_batches")
    )
    moved = [
        _set(cfg, "trainer.v1.separate_async.parameter_sync_step", updates, given),
        _set(
            cfg,
            "data.train_batch_size",
            updates * mini,
            f"{given}, actor_rollout_ref.actor.ppo_mini_batch_size={mini} (the prompts between two syncs)",
        ),
        _set(
            cfg,
            "trainer.v1.separate_async.num_warmup_batches",
            max(1, math.floor(1 + staleness)),
            f"async_training.staleness_threshold={_text(staleness)} (whole batches ahead)",
        ),
        _set(
            cfg,
            "trainer.v1.sampler.max_off_policy_threshold",
            math.ceil(1 + staleness) + 1,
            f"async_training.staleness_threshold={_text(staleness)}",
        ),
        _set(
            cfg,
            "trainer.v1.separate_async.reproducible",
            not bool(settings["partial_rollout"]),
            f"async_training.partial_rollout={_text(settings['partial_rollout'])}",
        ),
    ]
    if total_rollout_steps is not None:
        moved.append(
            _set(
                cfg,
                "trainer.total_training_steps",
                max(1, int(total_rollout_steps) // (updates * mini)),
                f"rollout.total_rollout_steps={total_rollout_steps} (prompts; {updates * mini} per step)",
            )
        )
    return moved


def _rollouter_schedule(cfg: DictConfig, rollout: dict) -> list[Moved]:
    """verl 0.6's fully async rollouter (recipe.fully_async_policy) reads two settings of its own: it
    passes over the data `rollout.total_epochs` times, and validates every `rollout.test_freq` weight
    syncs (its trainer does not validate on trainer.test_freq). One rlbridge step is one sync window,
    so validation every N syncs is every N steps."""
    moved = []
    if "total_epochs" in rollout:
        epochs = min(int(rollout["total_epochs"]), _int(cfg, "trainer.total_epochs"))
        steps = rollout.get("total_rollout_steps")
        caveat = (
            ""
            if steps is None
            else f"; rollout.total_rollout_steps={steps} sets the steps, and verl's rollouter would also stop "
            "sooner if those passes held fewer prompts"
        )
        moved.append(
            _set(
                cfg,
                "trainer.total_epochs",
                epochs,
                f"rollout.total_epochs={rollout['total_epochs']} (the rollouter's passes over the data){caveat}",
            )
        )
    if "test_freq" in rollout:
        moved.append(
            _set(
                cfg,
                "trainer.test_freq",
                int(rollout["test_freq"]),
                f"rollout.test_freq={rollout['test_freq']} (validation every N weight syncs; a step is one sync)",
            )
        )
    return moved


def _section(cfg: DictConfig, name: str) -> dict:
    node = cfg.get(name) if name in cfg else None
    if node is None:
        return {}
    if not isinstance(node, DictConfig):
        raise ConfigError(f"{name}={_text(node)}: verl's async trainers take a {name} section (key.subkey=value)")
    return OmegaConf.to_container(node, resolve=True)


def _int(cfg: DictConfig, key: str) -> int:
    value = OmegaConf.select(cfg, key)
    if not isinstance(value, int) or value <= 0:
        raise ConfigError(
            f"{key}={value}: verl's async trainers need a positive number here to set rlbridge's "
            "separate_async sync interval"
        )
    return value


def _set(cfg: DictConfig, key: str, value: Any, source: str) -> Moved:
    with open_dict(cfg):
        OmegaConf.update(cfg, key, value, force_add=True)
    return Moved(source, f"{key}={_text(value)}")


def _text(value: Optional[Any]) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else str(value)
