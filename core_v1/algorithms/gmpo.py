"""GMPO, Geometric-Mean Policy Optimization (Zhao et al. 2025, arXiv 2507.20673):
`actor_rollout_ref.actor.policy_loss.loss_mode=geo_mean`, as verl runs it.

Each sequence's ratio is the geometric mean of its token ratios, with every token's log-ratio
clipped to [-clip_ratio_low, clip_ratio_high] on the side the advantage's sign makes pessimistic;
the sequence loss is -mean_token(A) * ratio. Sequences weigh equally (the sequence-mean of
verl's `torch.mean`, kept exact across micro-batches), and rollout importance weights enter as
their per-sequence geometric mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import _aggregate, _clip_bounds, register_policy_loss


@register_policy_loss("geo_mean")
def compute_policy_loss_geo_mean(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    mask = response_mask.to(log_prob.dtype)
    lengths = mask.sum(dim=-1) + 1e-8
    log_ratio = log_prob - old_log_prob
    clamped = torch.clamp(log_ratio, -low, high)
    sign = torch.sign(advantages)
    pessimistic = sign * torch.minimum(sign * log_ratio, sign * clamped)
    ratio = torch.exp((pessimistic * mask).sum(dim=-1) / lengths)
    advantage = (advantages * mask).sum(dim=-1) / lengths
    sequence_loss = -advantage * ratio
    if rollout_is_weights is not None:
        sequence_loss = sequence_loss * torch.exp(
            (torch.log(rollout_is_weights.detach() + 1e-10) * mask).sum(dim=-1) / lengths
        )
    # Every token carries its sequence's loss, so seq-mean-token-mean is the mean over sequences.
    token_losses = sequence_loss.unsqueeze(-1).expand_as(log_prob)
    clipped = torch.ne(log_ratio, clamped).to(log_prob.dtype)
    metrics = {
        "actor/pg_clipfrac": masked_mean(clipped * (advantages > 0), response_mask).detach(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": masked_mean(clipped * (advantages < 0), response_mask).detach(),
    }
    return _aggregate(token_losses, None, response_mask, "seq-mean-token-mean", global_batch_info), metrics
