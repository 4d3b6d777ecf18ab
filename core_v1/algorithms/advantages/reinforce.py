"""Critic-free estimators that need no prompt groups: REINFORCE++ and ReMax."""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import check_per_token, require
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.errors import AlgorithmInputError
from core_v1.algorithms.masked import masked_whiten


@register_adv_estimator("reinforce_plus_plus")
@torch.no_grad()
def compute_reinforce_plus_plus_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ (arXiv 2501.03262): discounted return-to-go, whitened over the batch's valid tokens.

    The running return is reset to zero at masked positions, as verl does (for right padding
    this starts each row's sum at its last valid token). Returns are the un-whitened returns-to-go.
    """
    check_per_token("reinforce_plus_plus", response_mask, token_level_rewards=token_level_rewards)
    mask = response_mask.to(token_level_rewards.dtype)
    returns = torch.zeros_like(token_level_rewards)
    running_return = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        running_return = token_level_rewards[:, t] + gamma * running_return
        returns[:, t] = running_return
        running_return = running_return * mask[:, t]
    advantages = masked_whiten(returns, response_mask) * mask
    return advantages, returns


@register_adv_estimator("remax")
@torch.no_grad()
def compute_remax_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, reward_baselines: torch.Tensor | None = None, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """ReMax (arXiv 2310.10505): return-to-go minus the reward of a greedy response to the same prompt.

    `reward_baselines` [B] holds that greedy reward per row.
    """
    reward_baselines = require(
        reward_baselines, "reward_baselines", "remax", "the greedy-decoding reward per row, shape [B]"
    )
    check_per_token("remax", response_mask, token_level_rewards=token_level_rewards)
    if reward_baselines.shape != token_level_rewards.shape[:1]:
        raise AlgorithmInputError(
            f"remax: reward_baselines must be [B] = [{token_level_rewards.shape[0]}], "
            f"got {tuple(reward_baselines.shape)}"
        )
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    advantages = returns - reward_baselines.unsqueeze(-1).to(returns.dtype) * mask
    return advantages, returns
