"""Correcting for the gap between the policy that generated the data and the one being trained.

The rollout engine samples with pi_rollout (another numeric path, often older weights in async
modes); training computes pi_train. With the per-token log-ratio log r = log pi_train - log pi_rollout,
verl's `algorithm.rollout_correction.*` offers two orthogonal tools and two operating modes:

- Importance sampling (`rollout_is`: null | token | sequence): weights r (per token) or prod r
  (per sequence), bounded to exp(+-20), multiplied into the per-token policy loss.
  `rollout_is_threshold`: a number U truncates weights at U (TIS); a "L_U" string such as
  "0.5_5.0" zeroes weights outside [L, U] instead (IcePop). `rollout_is_batch_normalize` rescales
  the weights to mean 1 over the batch (over sequences for `sequence`).
- Rejection sampling (`rollout_rs`): a comma-separated list of criteria, all of which a token (or
  its whole sequence) must pass, else it leaves `response_mask`. Each criterion is a statistic of
  a per-token divergence: k1 = -log r, k2 = (log r)^2 / 2, k3 = exp(log r) - 1 - log r, taken per
  token (`token_k*`) or summed, averaged or maxed over the sequence (`seq_sum_k*`, `seq_mean_k*`,
  `seq_max_k2|3`). `rollout_rs_threshold` gives one bound per criterion (one value applies to
  all): k2/k3 criteria take an upper bound U on the statistic; k1 criteria take ratio bounds "L_U"
  (a single U means "1/U_U") and keep log L <= statistic <= log U, exactly as verl computes it.
  `seq_mean_k1` with "0.999_1.001" is the geometric-mean filter.
- Decoupled mode (`bypass_mode=false`): the trainer recomputes old log-probs with the training
  engine, calls `compute_rollout_correction(old_log_probs, rollout_log_probs, ...)`, passes the
  weights to the policy loss as `rollout_is_weights` and trains on the returned mask.
- Bypass mode (`bypass_mode=true`): no recomputation; the rollout log-probs serve as old
  log-probs, and the policy loss `bypass_mode` corrects against the current policy inside the
  loss: `loss_type=ppo_clip` clips the ratio pi_theta / pi_rollout (no extra weights),
  `loss_type=reinforce` uses REINFORCE with explicit IS weights pi_theta / pi_rollout. The actor
  trains with that loss when `policy_loss.loss_mode` is the default `vanilla`, as verl does
  (`RolloutCorrectionConfig.training_loss_mode`).

All returned weights are detached and zero on padding; metrics are floats named `rollout_corr/*`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from core_v1.algorithms.errors import AlgorithmConfigError, AlgorithmInputError
from core_v1.algorithms.masked import masked_mean, masked_sum
from core_v1.utils.collectives import sum_over_ranks

ROLLOUT_IS_LEVELS = ("token", "sequence")
ROLLOUT_RS_OPTIONS = (
    "token_k1",
    "token_k2",
    "token_k3",
    "seq_sum_k1",
    "seq_sum_k2",
    "seq_sum_k3",
    "seq_mean_k1",
    "seq_mean_k2",
    "seq_mean_k3",
    "seq_max_k2",
    "seq_max_k3",
)
LOSS_TYPES = ("ppo_clip", "reinforce")

# Log-ratios are clamped to +-20 before exp(): exp(20) ~ 5e8 is already an outlier.
_SAFETY_BOUND = 20.0

# Criterion names of earlier verl releases and what they became.
_RENAMED_RS_OPTIONS = {"token": "token_k1", "sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}

# Keys verl dropped; a config that still sets them gets the replacement named.
_REMOVED_KEYS = {
    "use_policy_gradient": "loss_type (ppo_clip | reinforce)",
    "rollout_rs_threshold_lower": "a 'lower_upper' rollout_rs_threshold such as '0.5_2.0'",
    "rollout_token_veto_threshold": "rollout_rs=token_k1 with rollout_rs_threshold",
}


@dataclasses.dataclass(frozen=True)
class RsCriterion:
    """One parsed rejection criterion: statistic name and the bounds it must stay within."""

    option: str
    lower: float | None  # a bound on the statistic itself (already in log space for k1)
    upper: float


@dataclasses.dataclass(frozen=True)
class RolloutCorrectionConfig:
    """`algorithm.rollout_correction` (verl names and defaults); validated on construction."""

    rollout_is: str | None = None
    rollout_is_threshold: float | str = 2.0
    rollout_is_batch_normalize: bool = False
    rollout_rs: str | None = None
    rollout_rs_threshold: float | str | None = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"
    center_group_advantages: bool = True  # rlbridge's own (center_group_advantages)

    def __post_init__(self):
        if self.rollout_is is not None and self.rollout_is not in ROLLOUT_IS_LEVELS:
            raise AlgorithmConfigError(
                f"algorithm.rollout_correction.rollout_is={self.rollout_is!r} is unknown; "
                f"choose null or one of: {', '.join(ROLLOUT_IS_LEVELS)}"
            )
        if self.loss_type not in LOSS_TYPES:
            raise AlgorithmConfigError(
                f"algorithm.rollout_correction.loss_type={self.loss_type!r} is unknown; "
                f"choose one of: {', '.join(LOSS_TYPES)}"
            )
        # Parse the thresholds now, so a bad one fails at start-up rather than at the first batch. Without IS
        # weights the IS threshold is read by nothing (verl's scripts then write rollout_is_threshold=null).
        _ = self.rs_criteria
        if self.rollout_is is not None:
            _ = self.is_bounds

    @classmethod
    def from_dict(cls, section: Mapping[str, Any] | None) -> "RolloutCorrectionConfig":
        """Build from a config mapping; unknown or removed keys are errors that say what to use."""
        section = dict(section or {})
        for key, replacement in _REMOVED_KEYS.items():
            if key in section:
                raise AlgorithmConfigError(f"algorithm.rollout_correction.{key} was removed; use {replacement}")
        if section.pop("debug_rollout_actor_probs", False):
            raise AlgorithmConfigError(
                "algorithm.rollout_correction.debug_rollout_actor_probs=true is not "
                "supported; compare rollout_corr/* metrics instead"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(section) - known)
        if unknown:
            raise AlgorithmConfigError(f"unknown algorithm.rollout_correction keys {unknown}; known: {sorted(known)}")
        return cls(**section)

    @property
    def enabled(self) -> bool:
        """Whether any correction (weights, rejection or bypass) is configured."""
        return self.rollout_is is not None or self.rollout_rs is not None or self.bypass_mode

    @property
    def is_bounds(self) -> tuple[float, float | None]:
        """(upper, lower) of `rollout_is_threshold`; lower is None for plain truncation (TIS)."""
        return _parse_bounds(self.rollout_is_threshold, "algorithm.rollout_correction.rollout_is_threshold")

    @property
    def rs_criteria(self) -> list[RsCriterion]:
        """The parsed `rollout_rs` criteria with their bounds; empty without rejection sampling."""
        return [] if self.rollout_rs is None else _parse_rs_criteria(self.rollout_rs, self.rollout_rs_threshold)

    def training_loss_mode(self, loss_mode: str) -> str:
        """The policy loss the actor trains with, given `policy_loss.loss_mode`.

        In bypass mode verl (0.7 on) trains with the loss `bypass_mode`, which reads `loss_type` and
        rejects (`rollout_rs`) against the current policy; so does rlbridge when the configured loss
        is verl's default, `vanilla`. Another loss (DPPO, GSPO, ...) keeps its own objective,
        anchored on the rollout's log-probs; `loss_type=reinforce` and `rollout_rs` only exist in the
        bypass loss, so asking for them with another loss is an error, not a silent no-op.
        """
        if not self.bypass_mode or loss_mode == "bypass_mode":
            return loss_mode
        if loss_mode == "vanilla":
            return "bypass_mode"
        asked = [
            name
            for name, on in (
                ("loss_type=reinforce", self.loss_type == "reinforce"),
                (f"rollout_rs={self.rollout_rs}", self.rollout_rs is not None),
            )
            if on
        ]
        if asked:
            raise AlgorithmConfigError(
                f"algorithm.rollout_correction.bypass_mode=true with {' and '.join(asked)} needs the bypass loss, but "
                f"actor_rollout_ref.actor.policy_loss.loss_mode={loss_mode}: set loss_mode to vanilla (or bypass_mode), "
                f"or drop {' and '.join(asked)} to train {loss_mode} against the rollout's log-probs"
            )
        return loss_mode


@dataclasses.dataclass(frozen=True)
class RolloutCorrection:
    """Result of `compute_rollout_correction`.

    rollout_is_weights: [B, R] detached weights for the policy loss, or None without `rollout_is`.
    response_mask: [B, R] the input mask with rejected tokens set to 0.
    metrics: `rollout_corr/*` floats.
    """

    rollout_is_weights: torch.Tensor | None
    response_mask: torch.Tensor
    metrics: dict[str, float]


def compute_rollout_correction(
    training_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    config: RolloutCorrectionConfig,
) -> RolloutCorrection:
    """IS weights, rejection mask and off-policy diagnostics for log r = training - rollout log-probs."""
    if training_log_prob.shape != rollout_log_prob.shape or training_log_prob.shape != response_mask.shape:
        raise AlgorithmInputError(
            f"training log-probs {tuple(training_log_prob.shape)}, rollout log-probs "
            f"{tuple(rollout_log_prob.shape)} and response_mask {tuple(response_mask.shape)} "
            "must all be [B, R]; did the rollout return log-probs (calculate_log_probs)?"
        )
    with torch.no_grad():
        log_ratio = training_log_prob.detach() - rollout_log_prob.detach()
        metrics = compute_offpolicy_metrics(training_log_prob.detach(), rollout_log_prob.detach(), response_mask)
        weights = None
        if config.rollout_is is not None:
            upper, lower = config.is_bounds
            weights, is_metrics = compute_rollout_is_weights(
                log_ratio, response_mask, config.rollout_is, upper, lower, config.rollout_is_batch_normalize
            )
            metrics.update(is_metrics)
        mask = response_mask
        if config.rollout_rs is not None:
            mask, rs_metrics = compute_rollout_rejection_mask(log_ratio, response_mask, config.rs_criteria)
            metrics.update(rs_metrics)
    return RolloutCorrection(weights, mask, {f"rollout_corr/{k}": v for k, v in metrics.items()})


def compute_rollout_is_weights(
    log_ratio: torch.Tensor,
    response_mask: torch.Tensor,
    level: str,
    upper: float,
    lower: float | None = None,
    batch_normalize: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance weights exp(log r) per token or exp(sum log r) per sequence, truncated at `upper`
    (or zeroed outside [lower, upper] when `lower` is given), zero on padding, detached."""
    mask = response_mask.to(log_ratio.dtype)
    if level == "token":
        raw = torch.exp(log_ratio.clamp(-_SAFETY_BOUND, _SAFETY_BOUND))
        judged, judged_mask = raw, mask
    elif level == "sequence":
        sequence_weight = torch.exp(masked_sum(log_ratio, mask, dim=-1).clamp(-_SAFETY_BOUND, _SAFETY_BOUND))
        raw = sequence_weight.unsqueeze(-1).expand_as(log_ratio)
        judged, judged_mask = sequence_weight, (mask.sum(dim=-1) > 0).to(mask.dtype)
    else:
        raise AlgorithmConfigError(f"unknown rollout_is level {level!r}; choose one of: {', '.join(ROLLOUT_IS_LEVELS)}")
    raw = torch.where(mask != 0, raw, torch.zeros_like(raw))  # padding may hold NaN log-probs
    if lower is None:
        weights = raw.clamp(max=upper)
    else:
        weights = torch.where((raw >= lower) & (raw <= upper), raw, torch.zeros_like(raw))
    lower_for_metrics = lower if lower is not None else 1.0 / upper
    changed = judged > upper if lower is None else (judged > upper) | (judged < lower)
    metrics = {
        # Fractions are over tokens for `token` and over sequences for `sequence`.
        "rollout_is_ratio_fraction_high": masked_mean((judged > upper).to(mask.dtype), judged_mask).item(),
        "rollout_is_ratio_fraction_low": masked_mean((judged < lower_for_metrics).to(mask.dtype), judged_mask).item(),
        # What the bounds changed: truncated to U (TIS), or zeroed outside [L, U] (IcePop).
        "rollout_is_clipped_fraction": masked_mean(changed.to(mask.dtype), judged_mask).item(),
        **_weight_metrics(weights, mask),
    }
    if batch_normalize:
        weights, metrics["rollout_is_batch_norm_factor"] = _normalize_to_mean_one(weights, mask, level)
    return weights.detach(), metrics


def center_group_advantages(
    advantages: torch.Tensor, weights: torch.Tensor, response_mask: torch.Tensor, groups: Sequence[Any]
) -> tuple[torch.Tensor, dict[str, float]]:
    """Shift each group's advantages so that their mean under the loss's importance weights is zero.

    A group baseline (GRPO, RLOO, ...) makes a prompt group's advantages sum to zero: on-policy the
    update only moves probability between the group's samples. Multiplied by importance weights w
    (a batch sampled by an older policy), they no longer do: sum_i w_i A_i has the sign of the
    policy's improvement since the batch was sampled, and that excess pushes up every sampled
    answer, most of all those the policy is already moving toward (w > 1): a positive feedback that
    sharpens each prompt onto whatever answer dominates its group, right or wrong. Subtracting the
    w-weighted mean (a per-group constant, as the group mean already is) restores the zero sum.

    A row's weight is its share of the loss: the mean of its token weights over `response_mask`
    (its sequence weight under `sequence`). `advantages` [B, R] hold one value per row on its
    response tokens (outcome estimators); `groups` gives each row's group (its prompt uid).
    Returns the shifted advantages (zero stays on padding) and `rollout_is_advantage_shift`, the
    mean |shift| per group: how far the weights had tilted the groups' sums.
    """
    mask = response_mask.to(advantages.dtype)
    row_weight = masked_mean(weights.to(advantages.dtype), mask, dim=-1)
    row_advantage = masked_mean(advantages, mask, dim=-1)
    index = {group: position for position, group in enumerate(dict.fromkeys(groups))}
    group_of_row = torch.tensor([index[group] for group in groups], dtype=torch.long)
    weighted_sum = torch.zeros(len(index), dtype=advantages.dtype).index_add_(
        0, group_of_row, row_weight * row_advantage
    )
    weight_sum = torch.zeros(len(index), dtype=advantages.dtype).index_add_(0, group_of_row, row_weight)
    shift = torch.where(weight_sum > 0, weighted_sum / weight_sum.clamp(min=1e-12), torch.zeros_like(weight_sum))
    centered = (advantages - shift[group_of_row].unsqueeze(-1)) * mask
    return centered, {"rollout_is_advantage_shift": shift.abs().mean().item()}


def compute_rollout_rejection_mask(
    log_ratio: torch.Tensor, response_mask: torch.Tensor, criteria: list[RsCriterion]
) -> tuple[torch.Tensor, dict[str, float]]:
    """`response_mask` with every token that fails a criterion (or whose sequence fails) set to 0."""
    mask = response_mask.to(log_ratio.dtype)
    valid = mask != 0
    safe = log_ratio.clamp(-_SAFETY_BOUND, _SAFETY_BOUND)
    divergences = {"k1": -safe, "k2": 0.5 * safe**2, "k3": torch.exp(safe) - 1.0 - safe}
    keep = torch.ones_like(valid)
    metrics: dict[str, float] = {}
    for criterion in criteria:
        scope, estimator = criterion.option.rsplit("_", 1)
        statistic = _aggregate(divergences[estimator], mask, valid, scope)
        passes = statistic <= criterion.upper
        if criterion.lower is not None:
            passes &= statistic >= criterion.lower
        passes = passes.expand_as(valid)
        metrics[f"rollout_rs_{criterion.option}_masked_fraction"] = masked_mean((~passes).to(mask.dtype), mask).item()
        keep &= passes
    rejected = (~keep).to(mask.dtype)
    metrics["rollout_rs_masked_fraction"] = masked_mean(rejected, mask).item()
    metrics["rollout_rs_seq_masked_fraction"] = (rejected * mask).sum(dim=-1).gt(0).to(mask.dtype).mean().item()
    return (response_mask * keep.to(response_mask.dtype)), metrics


def compute_offpolicy_metrics(
    training_log_prob: torch.Tensor, rollout_log_prob: torch.Tensor, response_mask: torch.Tensor
) -> dict[str, float]:
    """Diagnostics of the rollout/training mismatch: KL estimates, perplexities, chi-square."""
    mask = response_mask.to(training_log_prob.dtype)
    log_ratio = training_log_prob - rollout_log_prob
    safe = log_ratio.clamp(-_SAFETY_BOUND, _SAFETY_BOUND)
    training_mean_logp = masked_mean(training_log_prob, mask, dim=-1)
    rollout_mean_logp = masked_mean(rollout_log_prob, mask, dim=-1)
    sequence_log_ratio = masked_sum(log_ratio, mask, dim=-1).clamp(-_SAFETY_BOUND, _SAFETY_BOUND)
    return {
        "kl": masked_mean(-log_ratio, mask).item(),  # k1 estimate of KL(pi_rollout || pi_train)
        "k3_kl": masked_mean(torch.exp(safe) - safe - 1, mask).item(),
        "training_ppl": torch.exp(-training_mean_logp).mean().item(),
        "rollout_ppl": torch.exp(-rollout_mean_logp).mean().item(),
        "log_ppl_diff": (rollout_mean_logp - training_mean_logp).mean().item(),
        "chi2_token": (masked_mean(torch.exp(2 * safe), mask) - 1.0).item(),
        "chi2_seq": (torch.exp(2 * sequence_log_ratio).mean() - 1.0).item(),
    }


def _aggregate(divergence: torch.Tensor, mask: torch.Tensor, valid: torch.Tensor, scope: str) -> torch.Tensor:
    if scope == "token":
        return divergence
    if scope == "seq_sum":
        return masked_sum(divergence, mask, dim=-1).unsqueeze(-1)
    if scope == "seq_mean":
        return masked_mean(divergence, mask, dim=-1).unsqueeze(-1)
    # seq_max; a sequence with no valid token has statistic 0 and is kept.
    maxed = divergence.masked_fill(~valid, float("-inf")).max(dim=-1).values
    return torch.where(torch.isinf(maxed), torch.zeros_like(maxed), maxed).unsqueeze(-1)


def _weight_metrics(weights: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    valid = mask != 0
    mean = masked_mean(weights, mask)
    normalized = weights / (mean + 1e-8)
    return {
        "rollout_is_mean": mean.item(),
        "rollout_is_max": weights.masked_fill(~valid, float("-inf")).max().item(),
        "rollout_is_min": weights.masked_fill(~valid, float("inf")).min().item(),
        "rollout_is_eff_sample_size": 1.0 / masked_mean(normalized**2, mask).item(),
    }


def _normalize_to_mean_one(weights: torch.Tensor, mask: torch.Tensor, level: str) -> tuple[torch.Tensor, float]:
    """`weights` over their mean (`rollout_is_batch_normalize`), and that mean.

    The mean is over valid tokens (`token`) or over sequences with a valid token (`sequence`). As
    in verl it spans every rank when torch.distributed is initialised: the trainer computes the
    decoupled-mode weights on the whole batch in one process, while the `bypass_mode` loss
    computes them per micro-batch on each training rank, whose micro-batches then share one mean.
    """
    if level == "token":
        total, count = masked_sum(weights, mask), mask.sum()
    else:  # every sequence counts once, whatever its length
        has_tokens = (mask.sum(dim=-1) > 0).to(mask.dtype)
        total, count = masked_sum(masked_mean(weights, mask, dim=-1), has_tokens), has_tokens.sum()
    total, count = sum_over_ranks(torch.stack([total, count.to(total.dtype)]))
    mean = total / (count + 1e-8) if level == "token" else total / count.clamp(min=1)
    if mean <= 1e-8:
        return weights, 1.0
    return weights / mean, mean.item()


def _parse_rs_criteria(rollout_rs: str, threshold_spec: float | str | None) -> list[RsCriterion]:
    options = list(dict.fromkeys(o.strip() for o in str(rollout_rs).split(",") if o.strip()))
    unknown = [o for o in options if o not in ROLLOUT_RS_OPTIONS]
    if not options or unknown:
        renamed = "".join(f" {o!r} is now {_RENAMED_RS_OPTIONS[o]!r}." for o in unknown if o in _RENAMED_RS_OPTIONS)
        raise AlgorithmConfigError(
            f"algorithm.rollout_correction.rollout_rs={rollout_rs!r} has unknown criteria "
            f"{unknown};{renamed} choose from: {', '.join(ROLLOUT_RS_OPTIONS)} (comma-separated)"
        )
    if threshold_spec is None:
        raise AlgorithmConfigError(
            "algorithm.rollout_correction.rollout_rs is set but rollout_rs_threshold is "
            "null; give one bound per criterion, e.g. rollout_rs_threshold=0.01"
        )
    specs = [s.strip() for s in str(threshold_spec).split(",")] if isinstance(threshold_spec, str) else [threshold_spec]
    if len(specs) not in (1, len(options)):
        raise AlgorithmConfigError(
            f"rollout_rs_threshold has {len(specs)} values for {len(options)} criteria; "
            "give one value, or one per criterion"
        )
    specs = specs * len(options) if len(specs) == 1 else specs
    criteria = []
    for option, spec in zip(options, specs):
        upper, lower = _parse_bounds(spec, f"rollout_rs_threshold for {option}")
        if option.endswith("k1"):
            lower = 1.0 / upper if lower is None else lower
            criteria.append(RsCriterion(option, math.log(lower), math.log(upper)))
        elif lower is not None:
            raise AlgorithmConfigError(
                f"rollout_rs_threshold for {option} must be a single upper bound (k2/k3 are >= 0), got {spec!r}"
            )
        else:
            criteria.append(RsCriterion(option, None, upper))
    return criteria


def _parse_bounds(spec: float | str, name: str) -> tuple[float, float | None]:
    """'U' or U -> (U, None); 'L_U' -> (U, L). Both must be positive and L <= U."""
    if isinstance(spec, bool) or not isinstance(spec, (int, float, str)):
        raise AlgorithmConfigError(f"{name} must be a number or a 'lower_upper' string, got {spec!r}")
    try:
        if isinstance(spec, str) and "_" in spec:
            lower_text, upper_text = spec.split("_", 1)
            lower, upper = float(lower_text), float(upper_text)
        else:
            lower, upper = None, float(spec)
    except ValueError:
        raise AlgorithmConfigError(f"{name}={spec!r} is not a number or a 'lower_upper' pair like '0.5_2.0'") from None
    if upper <= 0 or (lower is not None and not 0 < lower <= upper):
        raise AlgorithmConfigError(f"{name}={spec!r}: bounds must be positive with lower <= upper")
    return upper, lower
