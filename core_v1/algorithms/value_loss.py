"""The clipped value-function loss of PPO's critic (`critic.cliprange_value`, `critic.loss_agg_mode`)."""

from __future__ import annotations

import torch

from core_v1.algorithms.aggregation import agg_loss
from core_v1.algorithms.masked import masked_mean


def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
    **agg_kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """0.5 * agg(max((V - G)^2, (clip(V, V_old - c, V_old + c) - G)^2)) and the clipped fraction.

    Args:
        vpreds: values predicted now [B, R]; values: values at rollout time [B, R];
        returns: targets G [B, R]; cliprange_value: c.
        agg_kwargs: forwarded to `agg_loss` (global counts for gradient accumulation).
    Returns:
        vf_loss (scalar, differentiable) and vf_clipfrac (detached scalar): the fraction of valid
        tokens where the clipped term was the larger one.
    """
    vpred_clipped = torch.clamp(vpreds, values - cliprange_value, values + cliprange_value)
    unclipped = (vpreds - returns) ** 2
    clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.max(unclipped, clipped), response_mask, loss_agg_mode, **agg_kwargs)
    vf_clipfrac = masked_mean(torch.gt(clipped, unclipped).to(vpreds.dtype), response_mask).detach()
    return vf_loss, vf_clipfrac
