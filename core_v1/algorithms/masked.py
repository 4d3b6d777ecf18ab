"""Statistics over the valid positions of a padded tensor.

Every per-token tensor in a training batch is [B, R] and comes with a 0/1 `response_mask`;
these helpers reduce over the positions where the mask is 1 and ignore the rest, even when the
padded positions hold NaN or inf (they are selected away, not multiplied by zero).

The normalisers follow verl's `torch_functional` exactly (a mean divides by `count + 1e-8`,
whitening adds 1e-8 to the variance) so that numbers match a verl run to the last digit.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.errors import AlgorithmInputError

# verl's normaliser guards; kept identical so that results agree number for number.
_MEAN_EPS = 1e-8
_WHITEN_EPS = 1e-8


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is nonzero, over `dim` (all dimensions when None).

    `mask` may be bool, int or float and must broadcast against `values`; a float mask weights
    the selected values.
    """
    mask = mask.to(values.dtype)
    selected = torch.where(mask != 0, values, torch.zeros_like(values))
    return (selected * mask).sum() if dim is None else (selected * mask).sum(dim=dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...] | None = None) -> torch.Tensor:
    """Mean of `values` over the positions where `mask` is nonzero; 0 where nothing is selected."""
    mask = mask.to(values.dtype)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(values, mask, dim) / (count + _MEAN_EPS)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the selected values over the whole tensor (a scalar).

    With `unbiased=True` (Bessel's correction) at least two positions must be selected.
    """
    mean = masked_mean(values, mask)
    variance = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        count = mask.to(values.dtype).sum()
        if count < 2:
            raise AlgorithmInputError(
                f"unbiased masked variance needs at least 2 valid positions, got {int(count.item())}; "
                "check response_mask (an all-padding batch?) or whiten a larger batch"
            )
        variance = variance * count / (count - 1)
    return variance


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Standardise `values` with the mean and unbiased variance of the selected positions.

    Padded positions are transformed too (callers multiply by the mask when they need zeros).
    With `shift_mean=False` the mean is added back, so only the scale changes.
    """
    mean = masked_mean(values, mask)
    whitened = (values - mean) * torch.rsqrt(masked_var(values, mask) + _WHITEN_EPS)
    return whitened if shift_mean else whitened + mean
