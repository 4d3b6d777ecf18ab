"""Generalized Advantage Estimation with a critic (`algorithm.adv_estimator=gae`, the PPO default).

Schulman et al. 2015 (arXiv 1506.02438), computed right to left over the response:
    delta_t = r_t + gamma * V_next - V_t,    A_t = delta_t + gamma * lam * A_next.
Agent trajectories interleave model tokens with tool/observation tokens (response_mask 0). Those
positions are skipped: V_next and A_next carry over them unchanged, so a tool output between two
model turns neither adds a TD error nor breaks the credit chain (verl's multi-turn semantics).
Returns are A + V before whitening; the advantages are then whitened over the valid tokens.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import check_per_token, require
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.masked import masked_whiten


@register_adv_estimator("gae")
@torch.no_grad()
def compute_gae_advantage_return(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    values: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages (whitened over valid tokens) and returns (A + V, not whitened), both [B, R]."""
    values = require(values, "values", "gae", "critic values [B, R]")
    check_per_token("gae", response_mask, token_level_rewards=token_level_rewards, values=values)
    mask = response_mask.to(values.dtype)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    advantages_reversed = []
    for t in reversed(range(token_level_rewards.shape[1])):
        delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
        advantage = delta + gamma * lam * next_advantage
        # On a masked position keep what lies to its right, as if the position were not there.
        next_value = values[:, t] * mask[:, t] + (1 - mask[:, t]) * next_value
        next_advantage = advantage * mask[:, t] + (1 - mask[:, t]) * next_advantage
        advantages_reversed.append(next_advantage)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    return masked_whiten(advantages, response_mask), returns
