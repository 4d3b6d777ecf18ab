"""GDPO, Group reward-Decoupled normalization Policy Optimization (arXiv 2601.05242):
`algorithm.adv_estimator=gdpo`, as verl runs it (since v0.7.1).

With several rewards (say accuracy and format), GRPO normalises their sum, so the component with
the widest spread decides the ranking inside a group and a weaker signal disappears. GDPO
normalises each component within its group first, then adds them up and whitens the sum:

    A_k = GRPO(r_k)           per component k, within each prompt group (std division as configured)
    A   = whiten(sum_k w_k A_k)   over all valid tokens of the batch

The components are the reward function's own: `compute_score` returns a dict, and
`algorithm.gdpo_reward_keys` names its entries to use (the row's `reward_extra`, which keeps the
dict's numbers and text besides `score`; a component must be a number). `algorithm.gdpo_reward_weights`
gives w (default all 1).
As in verl, `score` itself, the reward model and any in-reward KL penalty do not enter GDPO's
advantage: only the named components do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from core_v1.algorithms.advantages._inputs import check_per_token, group_ids, group_mean_std, require
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.errors import AlgorithmInputError
from core_v1.algorithms.masked import masked_whiten

_KEYS = "algorithm.gdpo_reward_keys"


@register_adv_estimator("gdpo")
@torch.no_grad()
def compute_gdpo_outcome_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    reward_extra: Sequence[Mapping[str, float]] | np.ndarray | None = None,
    gdpo_reward_keys: Sequence[str] | None = None,
    gdpo_reward_weights: Sequence[float] | None = None,
    norm_adv_by_std_in_grpo: bool = True,
    epsilon: float = 1e-6,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    check_per_token("gdpo", response_mask, token_level_rewards=token_level_rewards)
    index = require(index, "index", "gdpo", "the per-row prompt-group uid")
    if not gdpo_reward_keys:
        raise AlgorithmInputError(
            f"advantage estimator 'gdpo' needs {_KEYS}: the entries of the reward "
            "function's dict result to normalise one by one, e.g. "
            "algorithm.gdpo_reward_keys='[accuracy_reward,format_reward]'"
        )
    reward_extra = require(reward_extra, "reward_extra", "gdpo", "each row's numbers from the reward function's dict")
    weights = [1.0] * len(gdpo_reward_keys) if gdpo_reward_weights is None else list(gdpo_reward_weights)
    if len(weights) != len(gdpo_reward_keys):
        raise AlgorithmInputError(
            f"algorithm.gdpo_reward_weights has {len(weights)} weights for "
            f"{len(gdpo_reward_keys)} keys in {_KEYS}; give one weight per key"
        )
    components = reward_components(reward_extra, gdpo_reward_keys, response_mask.shape[0], response_mask.device)
    ids, num_groups = group_ids(index, response_mask.shape[0], "gdpo", response_mask.device)
    weight = torch.tensor(weights, dtype=torch.float32, device=response_mask.device)
    combined = torch.zeros(response_mask.shape, dtype=torch.float32, device=response_mask.device)
    for k, scores in enumerate(components):
        mean, std = group_mean_std(scores, ids, num_groups)
        advantage = (scores - mean) / (std + epsilon) if norm_adv_by_std_in_grpo else scores - mean
        combined = combined + weight[k] * (advantage.unsqueeze(-1) * response_mask)
    advantages = masked_whiten(combined, response_mask) * response_mask
    return advantages, advantages


def reward_components(
    reward_extra: Sequence[Mapping[str, float]] | np.ndarray,
    keys: Sequence[str],
    rows: int,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """[K, B] float32: each key's number on each row, read from the rows' reward-function extras."""
    extras = list(reward_extra)
    if len(extras) != rows:
        raise AlgorithmInputError(f"gdpo: reward_extra has {len(extras)} rows for a batch of {rows}")
    values = []
    for key in keys:
        missing = [row for row, extra in enumerate(extras) if not _has_number(extra, key)]
        if missing:
            found = sorted(extras[missing[0]]) if isinstance(extras[missing[0]], Mapping) else []
            raise AlgorithmInputError(
                f"gdpo: reward component {key!r} ({_KEYS}) is missing on {len(missing)} of {rows} rows: the reward "
                f"function must return a dict holding it as a number (row {missing[0]} has {found}; an agent loop "
                "that sets reward_score itself returns no components)"
            )
        values.append([float(extra[key]) for extra in extras])
    return torch.tensor(values, dtype=torch.float32, device=device).reshape(len(keys), rows)


def gdpo_reward_metrics(
    reward_extra: Sequence[Mapping[str, float]] | np.ndarray, keys: Sequence[str]
) -> dict[str, float]:
    """verl's `gdpo/<key>/{mean,std,max,min}` over the batch (std over the batch, not unbiased)."""
    extras = [extra for extra in reward_extra if isinstance(extra, Mapping)]
    metrics = {}
    for key in keys:
        values = np.asarray([extra[key] for extra in extras if _has_number(extra, key)], dtype=np.float32)
        if values.size:
            metrics.update(
                {
                    f"gdpo/{key}/mean": float(values.mean()),
                    f"gdpo/{key}/std": float(values.std()),
                    f"gdpo/{key}/max": float(values.max()),
                    f"gdpo/{key}/min": float(values.min()),
                }
            )
    return metrics


def _has_number(extra: object, key: str) -> bool:
    """Whether a row's extras hold `key` as a number (text, such as verl's `pred`, is kept there too)."""
    return isinstance(extra, Mapping) and isinstance(extra.get(key), (int, float, np.number, np.bool_))
