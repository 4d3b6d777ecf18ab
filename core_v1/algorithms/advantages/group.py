"""Critic-free outcome estimators that compare each response with the other responses to its prompt.

Each row's score is the sum of its token-level rewards (an outcome reward lives on the last
token); rows that share an `index` (the prompt's uid) form a group. The scalar advantage is
spread over the row's valid tokens, and returns equal advantages.

Groups of one follow verl: GRPO and REINFORCE++-baseline use mean 0 and std 1 (the advantage is
the raw score, over 1 + epsilon for GRPO), RLOO keeps the raw score, and GRPO pass@k refuses them.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import (check_per_token, group_ids, group_mean_std, group_sizes,
                                                   group_sums, require)
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.errors import AlgorithmInputError
from core_v1.algorithms.masked import masked_whiten

_INDEX_MEANING = "the per-row prompt-group uid"


@register_adv_estimator("grpo")
@torch.no_grad()
def compute_grpo_outcome_advantage(*, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index=None, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6,
                                   **_) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): (score - group mean) / (group std + epsilon).

    With `norm_adv_by_std_in_grpo=False` the division is skipped (Dr. GRPO, arXiv 2503.20783).
    """
    scores, ids, num_groups = _scores_and_groups("grpo", token_level_rewards, response_mask, index)
    mean, std = group_mean_std(scores, ids, num_groups)
    advantage = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_estimator("rloo")
@torch.no_grad()
def compute_rloo_outcome_advantage(*, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                   index=None, **_) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024): score minus the mean score of the *other* responses of the group.

    Written as n/(n-1) * (score - group mean), which is the same quantity.
    """
    scores, ids, num_groups = _scores_and_groups("rloo", token_level_rewards, response_mask, index)
    sizes = group_sizes(ids, num_groups, scores.dtype)[ids]
    mean = group_sums(scores, ids, num_groups)[ids] / sizes
    leave_one_out = scores * sizes / (sizes - 1).clamp(min=1) - mean * sizes / (sizes - 1).clamp(min=1)
    advantage = torch.where(sizes > 1, leave_one_out, scores)
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_estimator("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
        *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None,
        **_) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline (arXiv 2501.03262): subtract the group mean, then whiten
    over all valid tokens of the batch."""
    scores, ids, num_groups = _scores_and_groups("reinforce_plus_plus_baseline", token_level_rewards,
                                                 response_mask, index)
    mean, _std = group_mean_std(scores, ids, num_groups)
    centered = (scores - mean).unsqueeze(-1) * response_mask
    advantages = masked_whiten(centered, response_mask) * response_mask
    return advantages, advantages


@register_adv_estimator("grpo_passk")
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(*, token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                         index=None, norm_adv_by_std_in_grpo: bool = True, epsilon: float = 1e-6,
                                         **_) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (arXiv 2503.19595): only the best response of each group is credited, with
    (best - second best) score, divided by the group std + epsilon when normalising; others get 0."""
    scores, ids, num_groups = _scores_and_groups("grpo_passk", token_level_rewards, response_mask, index)
    sizes = torch.bincount(ids, minlength=num_groups)
    if bool((sizes < 2).any()):
        raise AlgorithmInputError("grpo_passk needs at least 2 responses per prompt group; set "
                                  "actor_rollout_ref.rollout.n >= 2")
    advantage = torch.zeros_like(scores)
    _mean, std = group_mean_std(scores, ids, num_groups)
    for group in range(num_groups):
        rows = torch.nonzero(ids == group).squeeze(-1)
        top_two = torch.topk(scores[rows], 2)
        gap = top_two.values[0] - top_two.values[1]
        best_row = rows[top_two.indices[0]]
        advantage[best_row] = gap / (std[best_row] + epsilon) if norm_adv_by_std_in_grpo else gap
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


def _scores_and_groups(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index):
    check_per_token(estimator, response_mask, token_level_rewards=token_level_rewards)
    index = require(index, "index", estimator, _INDEX_MEANING)
    scores = token_level_rewards.sum(dim=-1)
    ids, num_groups = group_ids(index, scores.shape[0], estimator, scores.device)
    return scores, ids, num_groups
