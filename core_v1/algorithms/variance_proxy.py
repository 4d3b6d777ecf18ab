"""verl's variance-proxy metrics: how much of a step's policy gradient is signal and how much noise,
from numbers the old-log-prob pass already has.

One trajectory's policy-gradient estimate is g_i = A_i * sum_t grad log pi(y_t). Its norm would need
a backward pass per trajectory; but with respect to the logits z at a position, the gradient of
log pi(y_t) is e_y - pi, whose squared norm is w_t = 1 - 2 pi(y_t) + sum_v pi(v)^2 (the weight the
optimal token baseline uses, `advantages/otb.py`). So W_i = sum_t w_t over row i's trained tokens
stands for its score's squared norm (cross-token terms left out), A_i^2 W_i for ||g_i||^2, with A_i
the row's mean advantage. Over the N rows of the batch, every step (`variance_proxy/*`):

- `proxy1_signal_strength`: ||g_bar||^2, the squared norm of the batch gradient, read as the step's
  `actor/grad_norm` squared; 0 when there is none (the actor did not update: `critic_warmup`, or
  every optimizer step was skipped on a non-finite norm).
- `proxy2_total_power`: E[A^2 W], the mean squared per-trajectory norm (signal plus noise).
- `proxy3_pure_noise`: (proxy2 - proxy1) / (N - 1), floored at 0: the variance of the mean of N
  samples, since E||g_i||^2 = ||g||^2 + tr Cov. 0 without proxy1, or when N is 1.
- `expected_a_squared`: E[A^2]; `expected_w`: E[W].

proxy1 is a norm over the parameters of the clipped, aggregated loss, proxy2 one over the logits
of A times the score, so proxy3 is a trend to watch rather than a calibrated variance.

With rollout importance weights rho (`rollout_is_weights`), `expected_w` averages W with each token
weighted by rho_t^2 (as the optimal token baseline weighs it), and proxy2 becomes
E[rho_bar^2 A^2 W], rho_bar the row's mean weight, W unweighted. Following verl, which divides the
weighted w by max(rho^2, 1e-10) to unweight it, a token whose rho is below 1e-5 (IcePop zeroes
weights outside its band) counts in W in proportion to rho^2 / 1e-10 rather than in full: a zeroed
token adds nothing. W is floored at 0 in proxy2 (it is a squared norm; rounding can take it just
below); `expected_w` is not.
"""

from __future__ import annotations

from typing import Optional

import torch

from core_v1.algorithms.masked import masked_mean, masked_sum

PREFIX = "variance_proxy"
# verl's floor on rho^2 when it divides the weights back out of w.
_RHO_SQUARED_FLOOR = 1e-10


@torch.no_grad()
def variance_proxy_metrics(
    *,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    old_log_probs: torch.Tensor,
    sum_pi_squared: torch.Tensor,
    rollout_is_weights: Optional[torch.Tensor] = None,
    grad_norm: Optional[float] = None,
) -> dict[str, float]:
    """The five `variance_proxy/*` metrics (see the module docstring) of a batch of [B, R] tensors;
    `grad_norm` is the step's `actor/grad_norm`, or None when the actor did not update."""
    mask = response_mask.float()
    token_w = 1 - 2 * torch.exp(old_log_probs.float()) + sum_pi_squared.float()
    row_a = masked_mean(advantages.float(), mask, dim=-1)
    if rollout_is_weights is None:
        row_w = masked_sum(token_w, mask, dim=-1)
        total_power = (row_a**2 * row_w.clamp(min=0)).mean()
    else:
        rho_squared = rollout_is_weights.float() ** 2
        row_w = masked_sum(token_w * rho_squared, mask, dim=-1)
        unweighted = token_w * (rho_squared / _RHO_SQUARED_FLOOR).clamp(max=1)
        row_rho = masked_mean(rollout_is_weights.float(), mask, dim=-1)
        total_power = (row_rho**2 * row_a**2 * masked_sum(unweighted, mask, dim=-1).clamp(min=0)).mean()
    total_power = total_power.item()
    rows = row_a.shape[0]
    signal = None if grad_norm is None else float(grad_norm) ** 2
    noise = 0.0 if signal is None or rows < 2 else max(0.0, (total_power - signal) / (rows - 1))
    return {
        f"{PREFIX}/proxy1_signal_strength": 0.0 if signal is None else signal,
        f"{PREFIX}/proxy2_total_power": total_power,
        f"{PREFIX}/proxy3_pure_noise": noise,
        f"{PREFIX}/expected_a_squared": (row_a**2).mean().item(),
        f"{PREFIX}/expected_w": row_w.mean().item(),
    }
