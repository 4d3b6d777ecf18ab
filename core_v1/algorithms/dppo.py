"""DPPO, Divergence PPO (arXiv 2602.04879): `actor_rollout_ref.actor.policy_loss.loss_mode=dppo_tv`
or `dppo_kl`, as verl runs them (since v0.7.1).

PPO's trust region is a band on the ratio pi / pi_old, which barely constrains rare tokens (a
probability going from 1e-4 to 1e-3 is a ratio of 10 but hardly any change of the distribution)
and over-constrains common ones. DPPO bounds a divergence between the two Bernoulli distributions
"this token / any other token" instead. A token is kept when its update stays inside the bound in
the direction its advantage pushes:

- `dppo_tv` (total variation): p - p_old <= clip_ratio_high where A > 0, and
  p - p_old >= -clip_ratio_low elsewhere;
- `dppo_kl` (binary KL): KL = p_old log(p_old / p) + (1 - p_old) log((1 - p_old) / (1 - p)) (each
  1 - p with 1e-8 added, as verl writes it); where A > 0 kept when KL <= clip_ratio_high or p has not
  risen (p <= p_old), elsewhere when KL <= clip_ratio_low or p has not fallen (p >= p_old).

Here `clip_ratio_low/high` (default `clip_ratio`) are divergence thresholds, not ratio bounds;
verl's DPPO example uses 0.15 for TV and 0.05 for KL. A kept token's loss is
-A * sg[min(r, clip_ratio_c)] * log pi: the policy gradient weighted by the ratio truncated at
`actor.clip_ratio_c` (truncated IS in place of dual clip; verl's default 3.0, its DPPO example sets
10000 to switch truncation off). A dropped token contributes 0 but still counts in the loss's
denominator. `actor/pg_clipfrac` is the fraction of dropped tokens, `actor/pg_clipfrac_lower`
the fraction of kept tokens whose ratio was truncated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import _LOG_RATIO_BOUND, _aggregate, _clip_bounds, register_policy_loss

# verl's guard inside the binary KL's log((1 - p_old) / (1 - p)).
_BINARY_KL_EPS = 1e-8


def dppo_tv_keep(
    prob: torch.Tensor, old_prob: torch.Tensor, advantages: torch.Tensor, low: float, high: float
) -> torch.Tensor:
    """Tokens whose total-variation change stays within the bound on the side A pushes (bool)."""
    change = prob - old_prob
    return torch.where(advantages > 0, change <= high, change >= -low)


def dppo_kl_keep(
    prob: torch.Tensor,
    old_prob: torch.Tensor,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    low: float,
    high: float,
) -> torch.Tensor:
    """Tokens whose binary KL stays within the bound, or that moved against A's push (bool)."""
    binary_kl = old_prob * (old_log_prob - log_prob) + (1 - old_prob) * torch.log(
        (1.0 - old_prob + _BINARY_KL_EPS) / (1.0 - prob + _BINARY_KL_EPS)
    )
    return torch.where(
        advantages > 0, (binary_kl <= high) | (prob <= old_prob), (binary_kl <= low) | (prob >= old_prob)
    )


@register_policy_loss("dppo_tv")
def compute_policy_loss_dppo_tv(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor, **options
):
    """DPPO with the total-variation bound (see the module docstring)."""
    return _dppo_loss("tv", old_log_prob, log_prob, advantages, response_mask, **options)


@register_policy_loss("dppo_kl")
def compute_policy_loss_dppo_kl(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor, **options
):
    """DPPO with the binary-KL bound (see the module docstring)."""
    return _dppo_loss("kl", old_log_prob, log_prob, advantages, response_mask, **options)


def _dppo_loss(
    divergence: str,
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    low, high = _clip_bounds(
        clip_ratio,
        clip_ratio_low,
        clip_ratio_high,
        low_below_one=False,
        what="DPPO's divergence thresholds (actor clip_ratio_low/high)",
    )
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)
    with torch.no_grad():
        prob, old_prob = torch.exp(log_prob), torch.exp(old_log_prob)
        keep = (
            dppo_tv_keep(prob, old_prob, advantages, low, high)
            if divergence == "tv"
            else dppo_kl_keep(prob, old_prob, log_prob, old_log_prob, advantages, low, high)
        )
        keep = keep.to(log_prob.dtype)
    truncated_ratio = torch.clamp(ratio, max=clip_ratio_c).detach()
    pg_losses = -advantages * truncated_ratio * log_prob * keep
    metrics = {
        "actor/pg_clipfrac": masked_mean(1.0 - keep, response_mask).detach(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": masked_mean(
            (ratio > clip_ratio_c).to(log_prob.dtype) * keep, response_mask
        ).detach(),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics
