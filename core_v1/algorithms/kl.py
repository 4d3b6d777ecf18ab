"""KL estimators between the policy and the reference model, and the in-reward KL penalty.

Per-token estimators of KL(pi || pi_ref) from the log-probs of the sampled tokens
(J. Schulman, "Approximating KL divergence", 2020), named as in verl's `algorithm.kl_penalty`
and `actor_rollout_ref.actor.kl_loss_type`. With d = logprob - ref_logprob:

- `kl` / `k1`: d. Unbiased, high variance, can be negative.
- `abs`: |d|.
- `mse` / `k2`: d^2 / 2. Biased value, but its gradient is the unbiased KL gradient.
- `low_var_kl` / `k3`: exp(-d) + d - 1, clamped to [-10, 10] (verl's guard). Unbiased, >= 0.

A `+` suffix (`k1+`, `k3+`, `low_var_kl+`, ...) keeps the estimator's value but takes the
gradient of k2 (straight-through), since only k2's expected gradient is the KL gradient.

The in-reward penalty (`algorithm.use_kl_in_reward=true`) subtracts `beta * kl` from the
token-level scores before advantage estimation; `beta` comes from a fixed or adaptive
controller (`algorithm.kl_ctrl.{type,kl_coef,target_kl,horizon}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch

from core_v1.algorithms.errors import AlgorithmConfigError, AlgorithmInputError
from core_v1.algorithms.masked import masked_mean

KL_ESTIMATORS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
KL_CONTROLLER_TYPES = ("fixed", "adaptive")

# exp() guard and the output clamp of the k3 estimator, as in verl.
_K3_LOG_RATIO_BOUND = 20.0
_K3_VALUE_BOUND = 10.0


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate named by `kl_penalty` (see the module docstring); same shape as the inputs."""
    straight_through = kl_penalty.endswith("+")
    estimate = _kl_value(logprob, ref_logprob, kl_penalty[:-1] if straight_through else kl_penalty)
    if not straight_through or kl_penalty in ("mse+", "k2+"):
        return estimate
    k2 = 0.5 * (logprob - ref_logprob).square()
    # Value of the chosen estimator, gradient of k2.
    return k2 - k2.detach() + estimate.detach()


# `apply_kl_penalty` takes a parameter named `kl_penalty` (verl's keyword); it calls the function by this name.
_token_kl = kl_penalty


def _kl_value(logprob: torch.Tensor, ref_logprob: torch.Tensor, name: str) -> torch.Tensor:
    if name in ("kl", "k1"):
        return logprob - ref_logprob
    if name == "abs":
        return (logprob - ref_logprob).abs()
    if name in ("mse", "k2"):
        return 0.5 * (logprob - ref_logprob).square()
    if name in ("low_var_kl", "k3"):
        log_ratio = torch.clamp(ref_logprob - logprob, min=-_K3_LOG_RATIO_BOUND, max=_K3_LOG_RATIO_BOUND)
        k3 = torch.exp(log_ratio) - log_ratio - 1
        return torch.clamp(k3, min=-_K3_VALUE_BOUND, max=_K3_VALUE_BOUND)
    if name == "full":
        raise AlgorithmConfigError(
            "kl_penalty 'full' needs the whole vocabulary distribution and is not "
            f"supported; choose one of: {', '.join(KL_ESTIMATORS)} (optionally with '+')"
        )
    raise AlgorithmConfigError(
        f"unknown kl_penalty {name!r}; choose one of: {', '.join(KL_ESTIMATORS)} (a '+' suffix takes the k2 gradient)"
    )


class KLController(Protocol):
    """Holds the in-reward KL coefficient `value` and adapts it after each batch."""

    value: float

    def update(self, current_kl: float, n_steps: int) -> None: ...


class FixedKLController:
    """A constant coefficient (`algorithm.kl_ctrl.type=fixed`)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Proportional controller of Ziegler et al. 2019 (arXiv 1909.08593), `kl_ctrl.type=adaptive`.

    After each batch the coefficient is multiplied by `1 + clip(kl/target - 1, -0.2, 0.2) * n / horizon`,
    so the measured KL drifts towards `target_kl` on a time scale of `horizon` samples.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if horizon <= 0:
            raise AlgorithmConfigError(
                f"algorithm.kl_ctrl.horizon must be > 0 for the adaptive controller, got {horizon}"
            )
        if target_kl <= 0:
            raise AlgorithmConfigError(
                f"algorithm.kl_ctrl.target_kl must be > 0 for the adaptive controller, got {target_kl}"
            )
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = horizon

    def update(self, current_kl: float, n_steps: int) -> None:
        proportional_error = float(np.clip(current_kl / self.target - 1, -0.2, 0.2))
        self.value *= 1 + proportional_error * n_steps / self.horizon


def get_kl_controller(kl_ctrl: Mapping[str, Any] | Any) -> FixedKLController | AdaptiveKLController:
    """Build the controller for an `algorithm.kl_ctrl` section (a mapping or an attribute object)."""

    def read(key: str, default=None):
        return kl_ctrl.get(key, default) if isinstance(kl_ctrl, Mapping) else getattr(kl_ctrl, key, default)

    kind = read("type", "fixed")
    if kind == "fixed":
        return FixedKLController(kl_coef=read("kl_coef", 0.001))
    if kind == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=read("kl_coef", 0.001), target_kl=read("target_kl", 0.1), horizon=read("horizon", 10000)
        )
    raise AlgorithmConfigError(
        f"unknown algorithm.kl_ctrl.type {kind!r}; choose one of: {', '.join(KL_CONTROLLER_TYPES)}"
    )


def apply_kl_penalty(
    token_level_scores: torch.Tensor,
    old_log_probs: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kl_ctrl: KLController,
    kl_penalty: str = "kl",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Subtract the in-reward KL penalty from the scores: `rewards = scores - beta * kl * mask`.

    `beta` is `kl_ctrl.value` before this call; the controller is then updated with this batch's
    KL (mean over sequences of each sequence's mean token KL) and `n_steps = B`, as verl does.
    Returns `token_level_rewards` [B, R] and the metrics `actor/reward_kl_penalty` and
    `actor/reward_kl_penalty_coeff`.
    """
    shapes = {tuple(t.shape) for t in (token_level_scores, old_log_probs, ref_log_prob, response_mask)}
    if len(shapes) != 1:
        raise AlgorithmInputError(
            "token_level_scores, old_log_probs, ref_log_prob and response_mask must all be "
            f"[B, R]; got shapes {sorted(shapes)}"
        )
    mask = response_mask.to(token_level_scores.dtype)
    token_kl = _token_kl(old_log_probs, ref_log_prob, kl_penalty) * mask
    beta = kl_ctrl.value
    token_level_rewards = token_level_scores - beta * token_kl
    current_kl = masked_mean(token_kl, mask, dim=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=token_level_scores.shape[0])
    return token_level_rewards, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}
