"""CISPO, Clipped IS-weight Policy Optimization (MiniMax-M1, arXiv 2506.13585):
`actor_rollout_ref.actor.policy_loss.loss_mode=cispo`, as verl runs it (since v0.7.0).

PPO's clip drops the gradient of every token whose ratio left the trust region; CISPO keeps every
token and clips the importance weight instead, with no gradient through it:

    loss_t = -sg[clip(r_t, 1 - clip_ratio_low, 1 + clip_ratio_high)] * A_t * log pi_t

so the gradient is REINFORCE's, scaled by a bounded ratio. The bounds default to
`actor.clip_ratio`; verl's example sets `clip_ratio_low=10` (1 - 10 < 0: no lower bound at all)
and `clip_ratio_high=0.2`, which is why the lower bound may exceed 1 here, unlike PPO's. The log
ratio is clamped to +-20 before exp(), as in every verl loss. `actor/pg_clipfrac` counts the tokens
whose ratio the bounds changed; `actor/pg_clipfrac_lower` is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import _LOG_RATIO_BOUND, _aggregate, _clip_bounds, register_policy_loss


@register_policy_loss("cispo")
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    low, high = _clip_bounds(
        clip_ratio, clip_ratio_low, clip_ratio_high, what="CISPO's clip ratios", low_below_one=False
    )
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    clipped_ratio = torch.clamp(ratio, 1 - low, 1 + high)
    pg_losses = -clipped_ratio.detach() * advantages * log_prob
    metrics = {
        "actor/pg_clipfrac": masked_mean(torch.ne(ratio, clipped_ratio).to(log_prob.dtype), response_mask).detach(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics
