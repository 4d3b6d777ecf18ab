"""SAPO, Soft Adaptive Policy Optimization (Gao et al. 2025, arXiv 2511.20347):
`actor_rollout_ref.actor.policy_loss.loss_mode=sapo`, as verl runs it (since v0.7.0).

SAPO replaces PPO's hard clip with a smooth gate on the token ratio r = pi / pi_old:

    loss_t = -A_t * f(r_t),   f(r) = sigmoid(tau * (r - 1)) * 4 / tau

with tau = `actor.tau_pos` where A > 0 and `actor.tau_neg` elsewhere. f(1) = 2 / tau and
f'(r) = 4 sigma (1 - sigma), which is 1 at r = 1 (the plain policy gradient on policy) and decays
smoothly as the ratio leaves 1, instead of dropping to 0 at a clip boundary. A larger tau_neg
damps negative updates faster (the paper's default 1.05 against 1.0). The ratio's log is clamped
to +-20 first, as in every verl loss.

The loss always aggregates `seq-mean-token-mean` (verl ignores `loss_agg_mode` for SAPO); the
rollout importance weights multiply the per-token loss. No clipping: both clip fractions are 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from core_v1.algorithms.errors import AlgorithmConfigError
from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import _LOG_RATIO_BOUND, _aggregate, register_policy_loss

# verl's SAPO aggregates this way whatever actor.loss_agg_mode says.
SAPO_LOSS_AGG_MODE = "seq-mean-token-mean"


def sapo_gate(ratio: torch.Tensor, tau: torch.Tensor) -> torch.Tensor:
    """SAPO's soft gate f(r) = sigmoid(tau * (r - 1)) * 4 / tau."""
    return torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)


@register_policy_loss("sapo")
def compute_policy_loss_sapo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    tau_pos: float = 1.0,
    tau_neg: float = 1.05,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    if tau_pos <= 0 or tau_neg <= 0:
        raise AlgorithmConfigError(
            f"SAPO's temperatures must be positive: actor_rollout_ref.actor.tau_pos={tau_pos}, tau_neg={tau_neg}"
        )
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    tau = torch.where(advantages > 0, advantages.new_tensor(tau_pos), advantages.new_tensor(tau_neg))
    pg_losses = -sapo_gate(torch.exp(log_ratio), tau) * advantages
    metrics = {
        "actor/pg_clipfrac": log_prob.new_zeros(()),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, SAPO_LOSS_AGG_MODE, global_batch_info), metrics
