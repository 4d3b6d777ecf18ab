"""Rollout correction on a training batch: the stage-side half of `algorithm.rollout_correction`.

`core_v1.algorithms.rollout_correction` computes importance weights and rejection masks from
two [B, R] log-prob tensors; this applies them to a batch right after the old log-probs are
recomputed (decoupled mode, `bypass_mode=false`): the weights go to `rollout_is_weights`, which
the actor multiplies into the per-token policy loss, and rejected tokens leave `response_mask`.
In bypass mode there is nothing to do here: the policy loss corrects inside itself.

With decoupled PPO (`actor.use_decoupled_loss` or `policy_loss.loss_mode=decoupled`) the loss
already weights each token by pi_prox / pi_behav, the same ratio `rollout_is` would apply, so
the two are not combined (the async modes refuse that config at start-up).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tensordict import TensorDict

from core_v1.algorithms.rollout_correction import (
    RolloutCorrectionConfig,
    center_group_advantages,
    compute_rollout_correction,
)
from core_v1.config.schema import ConfigError
from core_v1.batch.layout import column


def correction_config(section: Any) -> RolloutCorrectionConfig:
    """The validated `algorithm.rollout_correction` section."""
    return RolloutCorrectionConfig.from_dict(
        dataclasses.asdict(section) if dataclasses.is_dataclass(section) else dict(section)
    )


def apply_rollout_correction(batch: TensorDict, config: RolloutCorrectionConfig, metrics: dict) -> TensorDict:
    """Add `rollout_is_weights` and mask rejected tokens, comparing `old_log_probs` (the training
    engine's) with `rollout_log_probs` (the sampler's); a no-op without `rollout_is`/`rollout_rs`."""
    if config.bypass_mode or (config.rollout_is is None and config.rollout_rs is None):
        return batch
    if "rollout_log_probs" not in batch.keys():
        raise ConfigError(
            "algorithm.rollout_correction.rollout_is/rollout_rs need the rollout's per-token "
            "log-probs; the agent loop must return response_logprobs (the built-in loops do)"
        )
    correction = compute_rollout_correction(
        batch["old_log_probs"], batch["rollout_log_probs"], batch["response_mask"], config
    )
    if correction.rollout_is_weights is not None:
        batch["rollout_is_weights"] = correction.rollout_is_weights
    batch["response_mask"] = correction.response_mask
    metrics.update(correction.metrics)
    return batch


def rollout_correction_stage(batch: TensorDict, metrics: dict, *, correction: RolloutCorrectionConfig) -> TensorDict:
    """`apply_rollout_correction` in the stage-function shape (run on a training rank by V1)."""
    return apply_rollout_correction(batch, correction, metrics)


def rollout_log_probs_as_old(batch: TensorDict, metrics: dict) -> TensorDict:
    """Bypass mode: the rollout's own log-probs are the behaviour policy's (no forward pass)."""
    batch["old_log_probs"] = batch["rollout_log_probs"].clone()
    return batch


def center_stale_advantages(batch: TensorDict, metrics: dict) -> TensorDict:
    """Keep each prompt group's advantages zero-sum under the batch's IS weights, as they are on
    policy (`center_group_advantages` says why); a no-op without `rollout_is_weights`. For group
    baselines only: a critic's advantages are not centred per group."""
    if "rollout_is_weights" not in batch.keys():
        return batch
    batch["advantages"], centering = center_group_advantages(
        batch["advantages"], batch["rollout_is_weights"], batch["response_mask"], [str(u) for u in column(batch, "uid")]
    )
    metrics.update({f"rollout_corr/{name}": value for name, value in centering.items()})
    return batch


def uses_decoupled_loss(config: Any) -> bool:
    actor = config.actor_rollout_ref.actor
    return bool(actor.use_decoupled_loss) or actor.policy_loss.loss_mode == "decoupled"
