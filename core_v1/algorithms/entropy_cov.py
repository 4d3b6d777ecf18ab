"""Clip-Cov and KL-Cov (The Entropy Mechanism of RL for Reasoning LMs, arXiv 2505.22617):
`actor_rollout_ref.actor.policy_loss.loss_mode=clip_cov` or `kl_cov`, as verl runs them (its entropy
recipe, and verl's own losses since v0.4).

Both keep entropy from collapsing by acting on the few tokens whose centred covariance
cov_t = (A_t - mean A) * (log pi_t - mean log pi) (means over the batch's valid tokens) is largest:
those are the confident tokens a policy-gradient step sharpens most.

- `clip_cov`: PPO's clipped loss, max(-A r, -A clip(r, 1 - low, 1 + high)), with the gradient of
  up to max(1, floor(clip_cov_ratio x valid tokens)) tokens removed: tokens drawn at random (as
  verl draws them, `torch.randperm`) among those PPO's clip has not already clipped whose cov_t
  lies strictly between clip_cov_lb and clip_cov_ub. `actor/pg_clipfrac` is the fraction removed.
- `kl_cov`: no clipping: -A r for every token, plus ppo_kl_coef x |log r| on the
  max(1, floor(kl_cov_ratio x valid tokens)) tokens of largest cov_t. `actor/ppo_kl` is the mean of
  |log r| (verl's), `actor/pg_clipfrac` is 0.

Unlike rlbridge's other losses, and as verl does for these two, the log-ratio is not clamped.
The settings are actor_rollout_ref.actor.policy_loss.*, with verl's defaults: clip_cov_ratio 0.0002,
clip_cov_lb 1.0, clip_cov_ub 5.0, kl_cov_ratio 0.0002, ppo_kl_coef 0.1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from core_v1.algorithms.errors import AlgorithmConfigError
from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import _aggregate, _clip_bounds, register_policy_loss


def centred_covariance(advantages: torch.Tensor, log_prob: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """cov_t = (A_t - mean A) * (log pi_t - mean log pi), means over the valid tokens; no gradient."""
    advantages, log_prob = advantages.detach(), log_prob.detach()
    return (advantages - masked_mean(advantages, response_mask)) * (log_prob - masked_mean(log_prob, response_mask))


def _token_budget(ratio: float, response_mask: torch.Tensor, name: str) -> int:
    if ratio <= 0:
        raise AlgorithmConfigError(f"actor_rollout_ref.actor.policy_loss.{name} must be > 0, got {ratio}")
    return max(int(ratio * response_mask.sum().item()), 1)


@register_policy_loss("clip_cov")
def compute_policy_loss_clip_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    generator: torch.Generator | None = None,
    **_,
):
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    valid = response_mask > 0
    clipped_by_ppo = (clipped > unclipped) & valid
    cov = centred_covariance(advantages, log_prob, response_mask)
    candidates = torch.nonzero(valid & ~clipped_by_ppo & (cov > clip_cov_lb) & (cov < clip_cov_ub))
    budget = _token_budget(clip_cov_ratio, response_mask, "clip_cov_ratio")
    chosen = candidates[torch.randperm(len(candidates), generator=generator)[:budget].to(candidates.device)]
    keep = torch.ones_like(advantages)
    keep[chosen[:, 0], chosen[:, 1]] = 0
    pg_losses = torch.maximum(unclipped, clipped) * keep
    metrics = {
        "actor/pg_clipfrac": masked_mean((keep == 0).to(log_prob.dtype), response_mask).detach(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics


@register_policy_loss("kl_cov")
def compute_policy_loss_kl_cov(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    kl_cov_ratio: float = 0.0002,
    ppo_kl_coef: float = 0.1,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    log_ratio = log_prob - old_log_prob
    pg_losses = -advantages * torch.exp(log_ratio)
    valid = (response_mask > 0).reshape(-1)
    cov = centred_covariance(advantages, log_prob, response_mask).reshape(-1)[valid]
    budget = min(_token_budget(kl_cov_ratio, response_mask, "kl_cov_ratio"), len(cov))
    if budget:
        chosen = torch.nonzero(valid).squeeze(1)[torch.topk(cov, budget).indices]
        penalty = torch.zeros_like(pg_losses).reshape(-1)
        penalty[chosen] = 1.0
        pg_losses = pg_losses + ppo_kl_coef * log_ratio.abs() * penalty.reshape(pg_losses.shape)
    metrics = {
        "actor/pg_clipfrac": log_prob.new_zeros(()),
        "actor/ppo_kl": masked_mean(log_ratio.abs(), response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics
