"""Policy-gradient losses (`actor_rollout_ref.actor.policy_loss.loss_mode`), registered by name.

Every loss has one signature, so the actor calls whichever is configured the same way:

    pg_loss, metrics = get_policy_loss_fn(name)(
        old_log_prob, log_prob, advantages, response_mask,
        loss_agg_mode=..., clip_ratio=..., clip_ratio_low=..., clip_ratio_high=..., clip_ratio_c=...,
        rollout_is_weights=..., proximal_log_prob=..., global_batch_info=..., **other_options)

Inputs are [B, R]: `old_log_prob` is the behaviour policy's log-probs (recomputed by the trainer,
or the rollout's own in bypass/decoupled modes), `log_prob` the current policy's (with gradient).
`rollout_is_weights` multiply the per-token loss; `global_batch_info` is a dict of `agg_loss`
keywords (`global_num_tokens`, `global_num_seqs`, `dp_size`, `loss_scale_factor`) that make
micro-batch losses add up to the mini-batch loss. A loss ignores options it does not use.

Every loss returns a differentiable scalar and a metrics dict with at least `actor/pg_clipfrac`,
`actor/ppo_kl` and `actor/pg_clipfrac_lower`, as detached 0-dim tensors (call `float()` to log;
keeping them as tensors avoids a device sync per micro-batch). Losses without clipping report 0.

Built in: `vanilla` (PPO clip + dual clip), `decoupled` (AReaL), `gspo`, `reinforce`, `bypass_mode`;
verl's further losses register from their own modules: `gpg`, `geo_mean` (gmpo), `sapo`, `cispo`,
`dppo_tv` and `dppo_kl` (dppo), `clip_cov` and `kl_cov` (entropy_cov).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any, Callable

import torch

from core_v1.algorithms.aggregation import agg_loss
from core_v1.algorithms.errors import AlgorithmConfigError, AlgorithmInputError
from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.rollout_correction import RolloutCorrectionConfig, compute_rollout_correction
from core_v1.utils.registry import Registry

PolicyLossFn = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]

# Log-ratios are clamped before exp() (verl's guard): a ratio of exp(20) is already meaningless.
_LOG_RATIO_BOUND = 20.0
# GSPO clamps its log sequence ratio from above only (verl).
_GSPO_LOG_RATIO_MAX = 10.0


def _takes_uniform_arguments(fn: object) -> bool:
    if not callable(fn):
        raise TypeError(f"a policy loss must be a function, got {fn!r}")
    parameters = list(inspect.signature(fn).parameters.values())
    positional = [
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if positional[:4] != ["old_log_prob", "log_prob", "advantages", "response_mask"] or not any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters
    ):
        raise TypeError(
            f"policy loss {getattr(fn, '__qualname__', fn)!r} must have the signature "
            "fn(old_log_prob, log_prob, advantages, response_mask, *, ..., **_)"
        )
    return True


POLICY_LOSSES: Registry[PolicyLossFn] = Registry(
    "policy loss", check=_takes_uniform_arguments, config_key="actor_rollout_ref.actor.policy_loss.loss_mode"
)


def register_policy_loss(name: str, *, override: bool = False):
    """Decorator: register a policy loss under `name`."""
    return POLICY_LOSSES.register(name, override=override)


def get_policy_loss_fn(name: str) -> PolicyLossFn:
    """The loss registered as `name`; an unknown name raises an error listing the known ones."""
    return POLICY_LOSSES.get(name)


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    """PPO's clipped surrogate (Schulman et al. 2017) with dual clip (Ye et al. 2019, arXiv 1912.09729).

    ratio = pi / pi_old; per token: max(-A * ratio, -A * clip(ratio, 1 - low, 1 + high)), and for
    A < 0 additionally capped at -A * clip_ratio_c, so a huge ratio on a bad token cannot blow up
    the loss. `clip_ratio_low/high` default to `clip_ratio` (asymmetric clipping is DAPO's clip-higher).
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    _check_dual_clip(clip_ratio_c)
    log_ratio = torch.clamp(log_prob - old_log_prob, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    pg_losses, metrics = _dual_clip_surrogate(torch.exp(log_ratio), advantages, response_mask, low, high, clip_ratio_c)
    metrics["actor/ppo_kl"] = masked_mean(-log_ratio, response_mask).detach()
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics


@register_policy_loss("decoupled")
def compute_policy_loss_decoupled(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    proximal_log_prob: torch.Tensor | None = None,
    behav_imp_weight_cap: float | None = None,
    loss_agg_mode: str = "token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    clip_ratio_c: float = 3.0,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    """Decoupled PPO of AReaL (Fu et al. 2025, arXiv 2505.24298) for stale, off-policy data.

    Three policies: the behaviour policy that sampled the tokens (`old_log_prob`, the rollout's
    log-probs), a proximal policy recomputed by the trainer just before the update
    (`proximal_log_prob`), and the policy being trained (`log_prob`). The trust region is around
    the proximal policy (ratio pi / pi_prox, clipped and dual-clipped as in `vanilla`), and the
    behaviour -> proximal gap is corrected by the importance weight pi_prox / pi_behav. Tokens whose
    weight exceeds `behav_imp_weight_cap` (must be > 1) get weight 0, as AReaL filters them.
    """
    if proximal_log_prob is None:
        raise AlgorithmInputError(
            "policy loss 'decoupled' needs proximal_log_prob (the log-probs recomputed by "
            "the trainer before the update); old_log_prob must be the rollout's log-probs"
        )
    if behav_imp_weight_cap is not None and behav_imp_weight_cap <= 1.0:
        raise AlgorithmConfigError(f"behav_imp_weight_cap must be > 1 (or null), got {behav_imp_weight_cap}")
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    _check_dual_clip(clip_ratio_c)
    proximal_log_prob = proximal_log_prob.detach()
    log_ratio = torch.clamp(log_prob - proximal_log_prob, -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    pg_losses, metrics = _dual_clip_surrogate(torch.exp(log_ratio), advantages, response_mask, low, high, clip_ratio_c)
    behaviour_log_ratio = torch.clamp(proximal_log_prob - old_log_prob.detach(), -_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    behaviour_weight = torch.exp(behaviour_log_ratio)
    kept = (
        torch.ones_like(behaviour_weight, dtype=torch.bool)
        if behav_imp_weight_cap is None
        else behaviour_weight <= behav_imp_weight_cap
    )
    behaviour_weight = torch.where(kept, behaviour_weight, torch.zeros_like(behaviour_weight))
    metrics.update(
        {
            "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
            "actor/behav_imp_weight": masked_mean(behaviour_weight, response_mask).detach(),
            "actor/behav_kl": masked_mean(-behaviour_log_ratio, response_mask).detach(),
            "actor/behav_capped_frac": masked_mean((~kept).to(log_prob.dtype), response_mask).detach(),
        }
    )
    pg_losses = pg_losses * behaviour_weight
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics


@register_policy_loss("gspo")
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "seq-mean-token-mean",
    clip_ratio: float = 0.2,
    clip_ratio_low: float | None = None,
    clip_ratio_high: float | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    """GSPO (Zheng et al. 2025, arXiv 2507.18071): clip a sequence-level ratio.

    s = (pi(y) / pi_old(y))^(1/|y|), the geometric mean of the token ratios; each token uses
    sg[s] * pi_t / sg[pi_t], whose value is s and whose gradient flows through its own log-prob.
    GSPO's paper aggregates `seq-mean-token-mean`; the caller's `loss_agg_mode` is honoured.
    GSPO's clip ranges are much smaller than PPO's (the paper uses 3e-4 / 4e-4).
    """
    low, high = _clip_bounds(clip_ratio, clip_ratio_low, clip_ratio_high)
    log_ratio = log_prob - old_log_prob
    lengths = response_mask.to(log_prob.dtype).sum(dim=-1).clamp(min=1)
    sequence_log_ratio = (log_ratio * response_mask).sum(dim=-1) / lengths
    token_log_ratio = log_prob - log_prob.detach() + sequence_log_ratio.detach().unsqueeze(-1)
    ratio = torch.exp(torch.clamp(token_log_ratio, max=_GSPO_LOG_RATIO_MAX))
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    metrics = {
        "actor/pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).to(log_prob.dtype), response_mask).detach(),
        "actor/ppo_kl": masked_mean(-log_ratio, response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    pg_losses = torch.maximum(unclipped, clipped)
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics


@register_policy_loss("reinforce")
def compute_policy_loss_reinforce(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    loss_agg_mode: str = "token-mean",
    rollout_is_weights: torch.Tensor | None = None,
    global_batch_info: Mapping[str, Any] | None = None,
    **_,
):
    """REINFORCE: -A * log pi per token, times `rollout_is_weights` when given (no clipping).

    `old_log_prob` only feeds the `actor/ppo_kl` metric.
    """
    pg_losses = -advantages * log_prob
    metrics = {
        "actor/pg_clipfrac": log_prob.new_zeros(()),
        "actor/ppo_kl": masked_mean(old_log_prob - log_prob.detach(), response_mask).detach(),
        "actor/pg_clipfrac_lower": log_prob.new_zeros(()),
    }
    return _aggregate(pg_losses, rollout_is_weights, response_mask, loss_agg_mode, global_batch_info), metrics


@register_policy_loss("bypass_mode")
def compute_policy_loss_bypass_mode(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    rollout_correction: RolloutCorrectionConfig | Mapping[str, Any] | None = None,
    **options,
):
    """Rollout correction in bypass mode: `old_log_prob` are the rollout's log-probs, not recomputed.

    Importance weights and rejection are computed against the current policy (pi / pi_rollout)
    inside the loss, per `rollout_correction` (`algorithm.rollout_correction`). `loss_type=ppo_clip`
    runs `vanilla` with pi_rollout as the anchor (the clipped ratio already is the IS correction,
    so no extra weights); `loss_type=reinforce` runs `reinforce` with the IS weights. Rejected
    tokens leave the loss mask in both. The `rollout_corr/*` metrics are added to the result.
    """
    if rollout_correction is None:
        raise AlgorithmInputError(
            "policy loss 'bypass_mode' needs rollout_correction (the "
            "algorithm.rollout_correction section) to know the loss type and corrections"
        )
    config = (
        rollout_correction
        if isinstance(rollout_correction, RolloutCorrectionConfig)
        else RolloutCorrectionConfig.from_dict(rollout_correction)
    )
    correction = compute_rollout_correction(log_prob.detach(), old_log_prob, response_mask, config)
    options.pop("rollout_is_weights", None)  # would count the correction twice
    if config.loss_type == "reinforce":
        pg_loss, metrics = compute_policy_loss_reinforce(
            old_log_prob,
            log_prob,
            advantages,
            correction.response_mask,
            rollout_is_weights=correction.rollout_is_weights,
            **options,
        )
    else:
        pg_loss, metrics = compute_policy_loss_vanilla(
            old_log_prob, log_prob, advantages, correction.response_mask, **options
        )
    metrics.update({name: torch.tensor(value) for name, value in correction.metrics.items()})
    return pg_loss, metrics


def _dual_clip_surrogate(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    low: float,
    high: float,
    clip_ratio_c: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1 - low, 1 + high)
    clipped_max = torch.maximum(unclipped, clipped)
    dual_clip = -advantages * clip_ratio_c
    negative = advantages < 0
    pg_losses = torch.where(negative, torch.minimum(dual_clip, clipped_max), clipped_max)
    dtype = ratio.dtype
    metrics = {
        "actor/pg_clipfrac": masked_mean(torch.gt(clipped, unclipped).to(dtype), response_mask).detach(),
        "actor/pg_clipfrac_lower": masked_mean(
            (torch.gt(clipped_max, dual_clip) & negative).to(dtype), response_mask
        ).detach(),
    }
    return pg_losses, metrics


def _aggregate(
    pg_losses: torch.Tensor,
    rollout_is_weights: torch.Tensor | None,
    response_mask: torch.Tensor,
    loss_agg_mode: str,
    global_batch_info: Mapping[str, Any] | None,
) -> torch.Tensor:
    if rollout_is_weights is not None:
        if rollout_is_weights.shape != pg_losses.shape:
            raise AlgorithmInputError(
                f"rollout_is_weights {tuple(rollout_is_weights.shape)} must match the "
                f"per-token loss {tuple(pg_losses.shape)}"
            )
        pg_losses = pg_losses * rollout_is_weights.detach()
    return agg_loss(pg_losses, response_mask, loss_agg_mode, **dict(global_batch_info or {}))


def _clip_bounds(
    clip_ratio: float,
    clip_ratio_low: float | None,
    clip_ratio_high: float | None,
    *,
    what: str = "clip ratios",
    low_below_one: bool = True,
) -> tuple[float, float]:
    """(low, high): each side defaults to `clip_ratio`. Both must be >= 0; a ratio's lower bound
    1 - low must stay positive unless the loss reads them otherwise (`low_below_one=False`: CISPO's
    bound may go below 0, DPPO's are divergence thresholds)."""
    low = clip_ratio if clip_ratio_low is None else clip_ratio_low
    high = clip_ratio if clip_ratio_high is None else clip_ratio_high
    if low < 0 or high < 0 or (low_below_one and low >= 1):
        rule = "0 <= clip_ratio_low < 1 and clip_ratio_high >= 0" if low_below_one else "clip_ratio_low/high >= 0"
        raise AlgorithmConfigError(f"{what} must satisfy {rule}, got low={low}, high={high}")
    return low, high


def _check_dual_clip(clip_ratio_c: float) -> None:
    if clip_ratio_c <= 1.0:
        raise AlgorithmConfigError(
            f"actor_rollout_ref.actor.clip_ratio_c must be > 1 for dual-clip PPO, got {clip_ratio_c}"
        )
