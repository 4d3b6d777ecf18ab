"""Input checks and group bookkeeping shared by the estimators."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from core_v1.algorithms.errors import AlgorithmInputError


def require(value, name: str, estimator: str, what: str):
    """Return `value`, or raise naming the estimator and the missing input."""
    if value is None:
        raise AlgorithmInputError(f"advantage estimator {estimator!r} needs `{name}` ({what}); it was not given")
    return value


def check_per_token(estimator: str, response_mask: torch.Tensor, **tensors: torch.Tensor | None) -> None:
    """Every given per-token tensor must share `response_mask`'s [B, R] shape."""
    if response_mask.dim() != 2:
        raise AlgorithmInputError(f"{estimator}: response_mask must be [B, R], got shape {tuple(response_mask.shape)}")
    for name, tensor in tensors.items():
        if tensor is not None and tensor.shape != response_mask.shape:
            raise AlgorithmInputError(
                f"{estimator}: {name} has shape {tuple(tensor.shape)} but response_mask "
                f"has {tuple(response_mask.shape)}; per-token inputs must all be [B, R]"
            )


def group_ids(
    index: Sequence | np.ndarray | torch.Tensor, batch_size: int, estimator: str, device: torch.device
) -> tuple[torch.Tensor, int]:
    """Map the per-row group ids (any hashable labels) to 0..G-1; returns (ids [B], G)."""
    labels = index.cpu().numpy() if isinstance(index, torch.Tensor) else np.asarray(index, dtype=object)
    if labels.ndim != 1 or len(labels) != batch_size:
        raise AlgorithmInputError(
            f"{estimator}: index must hold one group id per row ({batch_size}), got shape {labels.shape}"
        )
    # Labels compare as strings so that a mix of str and numpy str uids groups correctly.
    _, inverse = np.unique(labels.astype(str), return_inverse=True)
    ids = torch.as_tensor(inverse.reshape(-1), dtype=torch.long, device=device)
    return ids, int(ids.max().item()) + 1 if batch_size else 0


def group_sizes(ids: torch.Tensor, num_groups: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.bincount(ids, minlength=num_groups).to(dtype)


def group_sums(scores: torch.Tensor, ids: torch.Tensor, num_groups: int) -> torch.Tensor:
    return torch.zeros(num_groups, dtype=scores.dtype, device=scores.device).index_add_(0, ids, scores)


def group_mean_std(
    scores: torch.Tensor, ids: torch.Tensor, num_groups: int, variance_floor: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row mean and unbiased std of the row's group; a group of one gets mean 0 and std 1 (verl).

    The variance is raised to `variance_floor` before the square root (verl's vectorised GRPO
    floors it at its epsilon; everything else leaves it as it is).
    """
    sizes = group_sizes(ids, num_groups, scores.dtype)
    means = group_sums(scores, ids, num_groups) / sizes
    squared_deviation = group_sums((scores - means[ids]) ** 2, ids, num_groups)
    stds = torch.sqrt((squared_deviation / (sizes - 1).clamp(min=1)).clamp(min=variance_floor))
    singleton = sizes == 1
    means = torch.where(singleton, torch.zeros_like(means), means)
    stds = torch.where(singleton, torch.ones_like(stds), stds)
    return means[ids], stds[ids]
