"""The registry of advantage estimators (`algorithm.adv_estimator`) and their one calling convention.

Every estimator is called the same way, so a trainer never branches on the estimator's name:

    advantages, returns = get_adv_estimator_fn(name)(
        token_level_rewards=..., response_mask=..., index=..., values=..., reward_baselines=...,
        reward_extra=..., gamma=..., lam=..., norm_adv_by_std_in_grpo=..., epsilon=...,
        gdpo_reward_keys=..., gdpo_reward_weights=..., old_log_probs=..., sum_pi_squared=...,
        rollout_is_weights=...)

Inputs (B rows, R response positions):
    token_level_rewards [B, R]: rewards per token (after any in-reward KL penalty).
    response_mask [B, R]: 1 on model-generated tokens to train on.
    index: per-row prompt-group id (list or array of B uids); group estimators require it.
    values [B, R]: critic values (`gae`). reward_baselines [B]: greedy-rollout rewards (`remax`).
    reward_extra: per-row mappings of the numbers a reward function's dict result held besides
        `score` (`gdpo` reads its reward components there).
    gamma, lam: discount and GAE lambda. norm_adv_by_std_in_grpo, epsilon: group normalisation.
    gdpo_reward_keys, gdpo_reward_weights: `algorithm.gdpo_reward_*`, the components `gdpo` uses.
    old_log_probs [B, R]: the old policy's log-probs. sum_pi_squared [B, R]: sum over the vocabulary
        of the squared token probabilities (with `actor.calculate_sum_pi_squared`). rollout_is_weights
        [B, R]: rollout importance weights, when rollout correction computes them. The optimal-token-
        baseline estimators read these three; the batch passes each one it holds, else None.
An estimator takes what it needs, ignores the rest (`**_`), and raises `AlgorithmInputError`
naming a required input that is missing. Outputs are `advantages` and `returns`, both [B, R],
computed without gradient.

A new estimator is one decorated function:

    @register_adv_estimator("my_estimator")
    def my_estimator(*, token_level_rewards, response_mask, **_): ...
"""

from __future__ import annotations

import enum
import inspect
from typing import Callable

import torch

from core_v1.utils.registry import Registry

AdvantageEstimatorFn = Callable[..., tuple[torch.Tensor, torch.Tensor]]

# The keywords every estimator is called with; a registered function must accept them all.
UNIFORM_KEYWORDS = (
    "token_level_rewards",
    "response_mask",
    "index",
    "values",
    "reward_baselines",
    "reward_extra",
    "gamma",
    "lam",
    "norm_adv_by_std_in_grpo",
    "epsilon",
    "gdpo_reward_keys",
    "gdpo_reward_weights",
    "old_log_probs",
    "sum_pi_squared",
    "rollout_is_weights",
)


def _accepts_uniform_keywords(fn: object) -> bool:
    if not callable(fn):
        raise TypeError(f"an advantage estimator must be a function, got {fn!r}")
    parameters = inspect.signature(fn).parameters.values()
    takes_any_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    named = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    required = {
        p.name
        for p in parameters
        if p.default is inspect.Parameter.empty
        and p.kind is not inspect.Parameter.VAR_KEYWORD
        and p.kind is not inspect.Parameter.VAR_POSITIONAL
    }
    problems = []
    if not takes_any_keyword:
        problems.append("add `**_` so it ignores the inputs it does not use")
    unexpected_required = required - {"token_level_rewards", "response_mask"}
    if unexpected_required:
        problems.append(
            f"give defaults to {sorted(unexpected_required)} (only token_level_rewards and "
            "response_mask are always passed)"
        )
    if not takes_any_keyword and not set(UNIFORM_KEYWORDS) <= named:
        problems.append(f"accept the keywords {list(UNIFORM_KEYWORDS)}")
    if problems:
        raise TypeError(
            f"advantage estimator {getattr(fn, '__qualname__', fn)!r} does not follow the uniform "
            f"signature fn(*, token_level_rewards, response_mask, ..., **_): {'; '.join(problems)}"
        )
    return True


ADV_ESTIMATORS: Registry[AdvantageEstimatorFn] = Registry(
    "advantage estimator", check=_accepts_uniform_keywords, config_key="algorithm.adv_estimator"
)


PER_ROW_ESTIMATORS: set[str] = set()
"""Estimators whose advantage of a row is one number times its response mask, computed from the
rows' summed rewards and groups alone (not from where in the response a token lies): V1 runs them on
one score per row in the driver. Any other estimator gets the per-token fields it reads."""


def register_adv_estimator(name: str | enum.Enum, *, override: bool = False, per_row: bool = False):
    """Decorator: register an estimator under `name` (a string or a str-valued enum member);
    `per_row=True` declares it one of `PER_ROW_ESTIMATORS` (see there: a false claim changes its result)."""
    register = ADV_ESTIMATORS.register(_name(name), override=override)

    def decorate(fn: AdvantageEstimatorFn) -> AdvantageEstimatorFn:
        registered = register(fn)
        (PER_ROW_ESTIMATORS.add if per_row else PER_ROW_ESTIMATORS.discard)(_name(name))
        return registered

    return decorate


def is_per_row_estimator(name: str | enum.Enum) -> bool:
    return _name(name) in PER_ROW_ESTIMATORS


def get_adv_estimator_fn(name: str | enum.Enum) -> AdvantageEstimatorFn:
    """The estimator registered as `name`; an unknown name raises an error listing the known ones."""
    return ADV_ESTIMATORS.get(_name(name))


def _name(name: str | enum.Enum) -> str:
    return name.value if isinstance(name, enum.Enum) else name
