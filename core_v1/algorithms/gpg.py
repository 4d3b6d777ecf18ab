"""GPG, Group Policy Gradient (Chu et al. 2025, arXiv 2504.02546): `algorithm.adv_estimator=gpg`
with `actor_rollout_ref.actor.policy_loss.loss_mode=gpg`, as verl runs it.

The advantage is the score minus its prompt group's mean, scaled by alpha = B / (number of rows
with a nonzero score), which corrects for groups whose responses all scored 0 (they carry no
gradient); a group of one uses mean 0. The loss is the plain policy gradient -A * log pi (no
ratio, no clipping), times the rollout importance weights when given.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import group_mean_std
from core_v1.algorithms.advantages.group import _scores_and_groups
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.policy_loss import compute_policy_loss_reinforce, register_policy_loss


@register_adv_estimator("gpg")
@torch.no_grad()
def compute_gpg_outcome_advantage(
    *, token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index=None, f_norm: float = 1.0, **_
) -> tuple[torch.Tensor, torch.Tensor]:
    scores, ids, num_groups = _scores_and_groups("gpg", token_level_rewards, response_mask, index)
    mean, _ = group_mean_std(scores, ids, num_groups)
    alpha = scores.shape[0] / torch.count_nonzero(scores).clamp(min=1)
    advantages = (alpha * (scores - mean) / f_norm).unsqueeze(-1) * response_mask
    return advantages, advantages


# GPG's loss is REINFORCE's (-A * log pi, no ratio, no clipping, times the IS weights when given).
register_policy_loss("gpg")(compute_policy_loss_reinforce)
