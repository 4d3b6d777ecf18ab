"""Critic-free outcome estimators that compare each response with the other responses to its prompt.

Each row's score is the sum of its token-level rewards (an outcome reward lives on the last
token); rows that share an `index` (the prompt's uid) form a group. The scalar advantage is
spread over the row's valid tokens, and returns equal advantages.

Groups of one follow verl: GRPO and REINFORCE++-baseline use mean 0 and std 1 (the advantage is
the raw score, over 1 + epsilon for GRPO), RLOO and OPO keep the raw score, and GRPO pass@k refuses
them.

verl's `grpo_vectorized` and `rloo_vectorized` are not just faster spellings of `grpo` and `rloo`;
each differs in one case, kept here under verl's name:

- `grpo_vectorized` floors the group variance at `epsilon` before the square root, so a group whose
  scores differ by less than about sqrt(epsilon) is divided by sqrt(epsilon), not by its own std;
- `rloo_vectorized` gives a group of one the advantage 0, where `rloo` gives it its raw score.

On every other group they compute the same numbers as `grpo` and `rloo`.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import (
    check_per_token,
    group_ids,
    group_mean_std,
    group_sizes,
    group_sums,
    require,
)
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.errors import AlgorithmInputError
from core_v1.algorithms.masked import masked_whiten

_INDEX_MEANING = "the per-row prompt-group uid"


@register_adv_estimator("grpo", per_row=True)
@torch.no_grad()
def compute_grpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO (Shao et al. 2024): (score - group mean) / (group std + epsilon).

    With `norm_adv_by_std_in_grpo=False` the division is skipped (Dr. GRPO, arXiv 2503.20783).
    """
    return _grpo("grpo", token_level_rewards, response_mask, index, norm_adv_by_std_in_grpo, epsilon)


@register_adv_estimator("grpo_vectorized", per_row=True)
@torch.no_grad()
def compute_grpo_vectorized_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO as verl's `grpo_vectorized` computes it: the group variance is floored at `epsilon`
    (see the module docstring); otherwise `grpo`."""
    return _grpo(
        "grpo_vectorized",
        token_level_rewards,
        response_mask,
        index,
        norm_adv_by_std_in_grpo,
        epsilon,
        variance_floor=epsilon,
    )


@register_adv_estimator("rloo", per_row=True)
@torch.no_grad()
def compute_rloo_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO (Ahmadian et al. 2024): score minus the mean score of the *other* responses of the group.

    Written as n/(n-1) * (score - group mean), which is the same quantity. A group of one keeps its score.
    """
    return _rloo("rloo", token_level_rewards, response_mask, index, singleton_keeps_score=True)


@register_adv_estimator("rloo_vectorized", per_row=True)
@torch.no_grad()
def compute_rloo_vectorized_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO as verl's `rloo_vectorized` computes it: a group of one gets advantage 0; otherwise `rloo`."""
    return _rloo("rloo_vectorized", token_level_rewards, response_mask, index, singleton_keeps_score=False)


@register_adv_estimator("opo")
@torch.no_grad()
def compute_opo_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """OPO (arXiv 2505.23585): score minus the group's length-weighted mean score.

    The baseline is sum_j(L_j * score_j) / sum_j(L_j) over the group, L_j the number of valid
    response tokens of row j; on-policy this is the variance-minimising constant baseline when
    the squared gradient norm grows with length. A group of one keeps its score (baseline 0).
    """
    scores, ids, num_groups = _scores_and_groups("opo", token_level_rewards, response_mask, index)
    lengths = response_mask.sum(dim=-1).to(scores.dtype)
    # A group whose rows have no valid token has nothing to weight: baseline 0, not 0/0.
    total_length = group_sums(lengths, ids, num_groups).clamp(min=1)
    baseline = group_sums(lengths * scores, ids, num_groups)[ids] / total_length[ids]
    singleton = group_sizes(ids, num_groups, scores.dtype)[ids] == 1
    advantage = scores - torch.where(singleton, torch.zeros_like(baseline), baseline)
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_adv_estimator("reinforce_plus_plus_baseline")
@torch.no_grad()
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++ with a group baseline (arXiv 2501.03262): subtract the group mean, then whiten
    over all valid tokens of the batch."""
    scores, ids, num_groups = _scores_and_groups(
        "reinforce_plus_plus_baseline", token_level_rewards, response_mask, index
    )
    mean, _std = group_mean_std(scores, ids, num_groups)
    centered = (scores - mean).unsqueeze(-1) * response_mask
    advantages = masked_whiten(centered, response_mask) * response_mask
    return advantages, advantages


@register_adv_estimator("grpo_passk", per_row=True)
@torch.no_grad()
def compute_grpo_passk_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pass@k training (arXiv 2503.19595): only the best response of each group is credited, with
    (best - second best) score, divided by the group std + epsilon when normalising; others get 0."""
    scores, ids, num_groups = _scores_and_groups("grpo_passk", token_level_rewards, response_mask, index)
    sizes = torch.bincount(ids, minlength=num_groups)
    if bool((sizes < 2).any()):
        raise AlgorithmInputError(
            "grpo_passk needs at least 2 responses per prompt group; set actor_rollout_ref.rollout.n >= 2"
        )
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


def _grpo(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    norm_adv_by_std_in_grpo: bool,
    epsilon: float,
    variance_floor: float = 0.0,
):
    scores, ids, num_groups = _scores_and_groups(estimator, token_level_rewards, response_mask, index)
    mean, std = group_mean_std(scores, ids, num_groups, variance_floor=variance_floor)
    advantage = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


def _rloo(
    estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index, singleton_keeps_score: bool
):
    scores, ids, num_groups = _scores_and_groups(estimator, token_level_rewards, response_mask, index)
    sizes = group_sizes(ids, num_groups, scores.dtype)[ids]
    mean = group_sums(scores, ids, num_groups)[ids] / sizes
    leave_one_out = scores * sizes / (sizes - 1).clamp(min=1) - mean * sizes / (sizes - 1).clamp(min=1)
    alone = scores if singleton_keeps_score else torch.zeros_like(scores)
    advantage = torch.where(sizes > 1, leave_one_out, alone)
    advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


def _scores_and_groups(estimator: str, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index):
    check_per_token(estimator, response_mask, token_level_rewards=token_level_rewards)
    index = require(index, "index", estimator, _INDEX_MEANING)
    scores = token_level_rewards.sum(dim=-1)
    ids, num_groups = group_ids(index, scores.shape[0], estimator, scores.device)
    return scores, ids, num_groups
