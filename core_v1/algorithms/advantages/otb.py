"""Optimal token baselines: verl's `optimal_token_baseline` and `tir_optimal_token_baseline`.

Every response position gets its own baseline, shared by the responses to one prompt:

    B_t = sum_i G_it W_it / (sum_i W_it + epsilon),        A_it = G_it - B_t

G_it is row i's return-to-go from t (its rewards from t on) and W_it = sum_{j<=t} w_ij the weight
its path has gathered so far, with w = 1 - 2 pi(y_j) + sum_v pi(v)^2: the squared norm of the
gradient of log pi(y_j) with respect to the logits. Rows whose gradient will be large weigh
more in the baseline, which is what makes it the variance-minimising baseline per token.
pi(y_j) is exp(`old_log_probs`); sum_v pi(v)^2 is `sum_pi_squared`, which the actor's old-log-prob
pass computes under `actor_rollout_ref.actor.calculate_sum_pi_squared=true`. With rollout
importance weights rho on the batch (`algorithm.rollout_correction.rollout_is`), w becomes
rho^2 * w, as verl weights it.

The two estimators differ in what "position t" is. `optimal_token_baseline` compares rows at the
same response column; `tir_optimal_token_baseline` (tool-integrated reasoning) at the same count
of trained tokens, so that tool outputs spliced into a multi-turn response (`response_mask` 0)
do not shift one row against another. For right-padded single-turn responses they agree.

Two details follow verl: a group of one has baseline 0 (its advantage is its return), and with
`handle_zero_tail` (verl's default) the single longest response of a group has baseline 0 past
the length of the second longest, where it has no one to be compared with (its own return would
otherwise be its baseline, and its advantage 0). Returns are G.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.advantages._inputs import check_per_token, group_ids, group_sizes, require
from core_v1.algorithms.advantages.registry import register_adv_estimator
from core_v1.algorithms.errors import AlgorithmConfigError

OTB_ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline")
_SUM_PI_SQUARED = (
    "the sum over the vocabulary of the squared token probabilities per response token, [B, R]; "
    "set actor_rollout_ref.actor.calculate_sum_pi_squared=true"
)


@register_adv_estimator("optimal_token_baseline")
@torch.no_grad()
def compute_optimal_token_baseline_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column optimal baselines within each prompt group (see the module docstring)."""
    returns, path_weights, mask, ids, num_groups = _otb_inputs(
        "optimal_token_baseline",
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights,
    )
    baselines = _token_baselines(returns, path_weights, mask, ids, num_groups, epsilon, handle_zero_tail)
    return (returns - baselines) * mask, returns


@register_adv_estimator("tir_optimal_token_baseline")
@torch.no_grad()
def compute_multi_turn_optimal_token_baseline_advantage(
    *,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index=None,
    old_log_probs: torch.Tensor | None = None,
    sum_pi_squared: torch.Tensor | None = None,
    rollout_is_weights: torch.Tensor | None = None,
    handle_zero_tail: bool = True,
    epsilon: float = 1e-8,
    **_,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Optimal baselines indexed by the count of trained tokens, not the column (see the module docstring)."""
    returns, path_weights, mask, ids, num_groups = _otb_inputs(
        "tir_optimal_token_baseline",
        token_level_rewards,
        response_mask,
        index,
        old_log_probs,
        sum_pi_squared,
        rollout_is_weights,
    )
    # Each row's trained tokens moved to its front, in order (a stable sort of the mask puts them first).
    order = torch.sort((mask == 0).to(torch.int8), dim=-1, stable=True).indices
    lengths = mask.sum(dim=-1, keepdim=True)
    packed_mask = (torch.arange(mask.shape[-1], device=mask.device) < lengths).to(mask.dtype)
    packed = _token_baselines(
        returns.gather(-1, order) * packed_mask,
        path_weights.gather(-1, order) * packed_mask,
        packed_mask,
        ids,
        num_groups,
        epsilon,
        handle_zero_tail,
    )
    baselines = torch.zeros_like(packed).scatter_(-1, order, packed)
    return (returns - baselines) * mask, returns


def require_sum_pi_squared(adv_estimator: str, calculate_sum_pi_squared: bool, bypass_mode: bool) -> None:
    """Refuse, before a run, an optimal-token-baseline estimator whose input will never be computed."""
    if adv_estimator not in OTB_ESTIMATORS:
        return
    if not calculate_sum_pi_squared:
        raise AlgorithmConfigError(
            f"algorithm.adv_estimator={adv_estimator} needs the sum of squared token "
            "probabilities from the old-log-prob pass: set "
            "actor_rollout_ref.actor.calculate_sum_pi_squared=true"
        )
    if bypass_mode:
        raise AlgorithmConfigError(
            f"algorithm.adv_estimator={adv_estimator} needs the old-log-prob pass, which "
            "algorithm.rollout_correction.bypass_mode=true skips; set bypass_mode=false"
        )


def _otb_inputs(
    estimator: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index,
    old_log_probs,
    sum_pi_squared,
    rollout_is_weights,
):
    """(returns-to-go G, cumulated path weights W, float mask, group ids, group count), all [B, R] but the ids."""
    index = require(index, "index", estimator, "the per-row prompt-group uid")
    old_log_probs = require(old_log_probs, "old_log_probs", estimator, "the old policy's log-probs, [B, R]")
    sum_pi_squared = require(sum_pi_squared, "sum_pi_squared", estimator, _SUM_PI_SQUARED)
    check_per_token(
        estimator,
        response_mask,
        token_level_rewards=token_level_rewards,
        old_log_probs=old_log_probs,
        sum_pi_squared=sum_pi_squared,
        rollout_is_weights=rollout_is_weights,
    )
    mask = response_mask.to(token_level_rewards.dtype)
    returns = (token_level_rewards * mask).flip(dims=[-1]).cumsum(dim=-1).flip(dims=[-1])
    weights = 1 - 2 * torch.exp(old_log_probs) + sum_pi_squared
    if rollout_is_weights is not None:
        weights = weights * rollout_is_weights**2
    path_weights = (weights.to(mask.dtype) * mask).cumsum(dim=-1)
    ids, num_groups = group_ids(index, mask.shape[0], estimator, mask.device)
    return returns, path_weights, mask, ids, num_groups


def _token_baselines(
    returns: torch.Tensor,
    path_weights: torch.Tensor,
    mask: torch.Tensor,
    ids: torch.Tensor,
    num_groups: int,
    epsilon: float,
    handle_zero_tail: bool,
) -> torch.Tensor:
    """B [B, R]: each group's W-weighted mean return per column, 0 for groups of one (and lone tails)."""
    weighted = path_weights * mask
    totals = returns.new_zeros(num_groups, returns.shape[-1])
    numerator = totals.clone().index_add_(0, ids, returns * weighted)
    denominator = totals.index_add_(0, ids, weighted) + epsilon
    baselines = (numerator / denominator)[ids]
    sizes = group_sizes(ids, num_groups, returns.dtype)[ids]
    baselines = baselines.masked_fill((sizes == 1)[:, None], 0.0)
    if handle_zero_tail:
        baselines = baselines.masked_fill(_lone_tails(mask, ids, num_groups, sizes), 0.0)
    return baselines


def _lone_tails(mask: torch.Tensor, ids: torch.Tensor, num_groups: int, sizes: torch.Tensor) -> torch.Tensor:
    """[B, R] True on the columns of a group's unique longest row from the second longest's length on."""
    lengths = mask.sum(dim=-1).long()
    unset = torch.full((num_groups,), -1, dtype=torch.long, device=mask.device)
    longest = unset.clone().scatter_reduce_(0, ids, lengths, reduce="amax")
    is_longest = lengths == longest[ids]
    count_longest = torch.bincount(ids[is_longest], minlength=num_groups)
    runner_up = unset.scatter_reduce_(0, ids, lengths.masked_fill(is_longest, -1), reduce="amax")
    lone = is_longest & (count_longest[ids] == 1) & (sizes >= 2)
    columns = torch.arange(mask.shape[-1], device=mask.device)
    return lone[:, None] & (columns[None, :] >= runner_up[ids][:, None])
