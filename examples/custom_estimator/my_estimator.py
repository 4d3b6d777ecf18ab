"""A custom advantage estimator: GRPO with the group *median* as the baseline (robust to one lucky
sample), registered by name. Use it with one plug-in line and one config line:

    python -m examples.quickstart trainer.v1.plugins=[examples/custom_estimator/my_estimator.py] \
        algorithm.adv_estimator=median_baseline
"""

from collections import defaultdict

import torch

from core_v1.algorithms import register_adv_estimator


@register_adv_estimator("median_baseline")
def median_baseline_advantage(*, token_level_rewards, response_mask, index=None, **_):
    if index is None:
        raise ValueError("median_baseline needs the group ids (index) of the rows")
    scores = token_level_rewards.sum(dim=-1)
    rows_by_group = defaultdict(list)
    for row, group in enumerate(index):
        rows_by_group[group].append(row)
    advantages = torch.zeros_like(scores)
    for rows in rows_by_group.values():
        group_scores = scores[rows]
        advantages[rows] = group_scores - group_scores.median()
    advantages = advantages.unsqueeze(-1) * response_mask
    return advantages, advantages
