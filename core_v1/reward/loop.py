"""Scoring one finished trajectory: the configured reward function on the decoded response.

The function is `reward.custom_reward_function.{path,name}` when set, else the built-in scorer
registered for the row's `data_source`. It keeps verl's signature
`compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> float | dict`
(sync or async); a dict must hold `score`; its other numbers become metrics, and they and its text
are kept with the trajectory (`reward_extra_values`). With
`reward.reward_manager.name=batch` it is verl's batch function instead, called once with lists for
the responses that finish together (`core_v1.utils.aio.TurnBatcher`; `core_v1.reward.managers` says what that batch is).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import numpy as np

from core_v1.errors import UserError
from core_v1.reward.managers import reward_manager_policy
from core_v1.reward.reward_model import rule_function_for
from core_v1.utils.aio import TurnBatcher, run_in_daemon_thread, settle
from core_v1.utils.loading import load_object

logger = logging.getLogger(__name__)

SCORED_ZERO_ON_FAILURE = "scored_zero_on_failure"  # prime's per-sample flag (reward/scored_zero_on_failure/mean)


def reward_function_name(fn: Any) -> str:
    """How messages name a reward function: `path/to/file.py:name` for one loaded from a file (the
    loader, core_v1.utils.loading, names such modules `_rlbridge_user_<stem>_<sha1>`: the path says
    more), else `module:name`."""
    qualname = getattr(fn, "__qualname__", None) or type(fn).__name__
    module = getattr(fn, "__module__", None) or "?"
    code = getattr(fn, "__code__", None)
    if code is not None and module.startswith("_rlbridge_user_"):
        return f"{code.co_filename}:{qualname}"
    return f"{module}:{qualname}"


class RewardFunctionError(UserError, ValueError):
    """The configured reward function cannot be loaded; the message says why and what to set."""


class RewardFunctionRaised(RuntimeError):
    """The reward function raised on one sample; the message names the function (path:name or
    module:name) and its exception, so a run whose every sample fails says which function failed."""


class RewardTimeoutError(TimeoutError):
    """One sample's reward took longer than `reward.timeout_s`; that sample is marked failed."""


def load_custom_reward_function(path: Optional[str], name: str = "compute_score") -> Optional[Callable[..., Any]]:
    if not path:
        return None
    fn = load_object(
        f"{Path(path).expanduser().resolve()}:{name or 'compute_score'}",
        key="reward.custom_reward_function.{path,name}",
        error=RewardFunctionError,
    )
    if not callable(fn):
        raise RewardFunctionError(f"{path}: {name!r} is not a function (reward.custom_reward_function.name)")
    return fn


class RewardScorer:
    """Turns (row, decoded response) into `(score, extra metrics)`; exceptions propagate to the caller,
    which marks that one sample failed and counts it."""

    def __init__(
        self,
        reward_config: Any,
        max_response_length: Optional[int] = None,
        experiment_name: Optional[str] = None,
        source_key: str = "data_source",
    ):
        custom = reward_config.custom_reward_function
        self._source_key = source_key  # the row column passed as data_source (verl's data.reward_fn_key)
        # With a reward model that replaces the score, a row whose data source has no scorer gets NaN.
        self._fn = rule_function_for(reward_config, load_custom_reward_function(custom.path, custom.name))
        self._name = (
            f"{custom.path}:{custom.name or 'compute_score'}" if custom.path else reward_function_name(self._fn)
        )
        # The reward manager (reward.reward_manager.name, core_v1.reward.managers) keeps its own
        # kwargs (DAPO's overlong buffer) and adjusts each score; the rest go to compute_score.
        self._manager = reward_manager_policy(reward_config, max_response_length, experiment_name)
        self._kwargs = self._manager.score_kwargs
        self._timeout_s = float(reward_config.timeout_s)
        self._batch = TurnBatcher(self._score_batch_into) if self._manager.batched else None
        self._warned_zero = False

    async def score(
        self, row: dict, solution_str: str, response_length: Optional[int] = None, num_turns: Optional[int] = None
    ) -> tuple[float, dict[str, float | str]]:
        """`(score, extra)` for one response; `response_length` (tokens) is what DAPO's overlong
        punishment reads; `num_turns` (the agent loop's) reaches a per-sample `compute_score` as
        `extra_info["num_turns"]`, as verl's naive manager passes it (ReTool's reward reads it)."""
        if self._batch is not None:
            score, extra = _score_of(await self._batch.submit((row, solution_str)))
            return self._manager.adjust(score, extra, response_length), extra
        if num_turns is not None:
            row = {**row, "extra_info": {**dict(row.get("extra_info") or {}), "num_turns": num_turns}}
        if self._manager.zero_on_failure:
            score, extra = await self._score_or_zero(row, solution_str)
        else:
            score, extra = await self._score(row, solution_str)
        return self._manager.adjust(score, extra, response_length), extra

    async def _score_or_zero(self, row: dict, solution_str: str) -> tuple[float, dict[str, float | str]]:
        """verl's prime rule: a call that raises or times out scores 0.0 and its sample trains;
        every sample reports whether that happened, so the metric's mean is the share it happened to."""
        try:
            score, extra = await self._score(row, solution_str)
        except (RewardFunctionRaised, RewardTimeoutError) as error:
            if not self._warned_zero:
                self._warned_zero = True
                logger.warning(
                    "%s; scored 0.0, as verl's prime reward manager scores a failed call (counted in "
                    "reward/scored_zero_on_failure; further ones are not logged)",
                    error,
                )
            return 0.0, {SCORED_ZERO_ON_FAILURE: 1.0}
        return score, {**extra, SCORED_ZERO_ON_FAILURE: 0.0}

    async def _score(self, row: dict, solution_str: str) -> tuple[float, dict[str, float | str]]:
        call = functools.partial(
            self._fn,
            data_source=row.get(self._source_key),
            solution_str=solution_str,
            ground_truth=_ground_truth(row),
            extra_info=self._manager.extra_info_for(row.get("extra_info")),
            **self._kwargs,
        )
        return _score_of(await self._call(call))

    async def _score_batch_into(self, requests: list[tuple[dict, str]], futures: list[asyncio.Future]) -> None:
        """verl's batch call for the responses that finished together (`TurnBatcher`): one result
        per response, in order, each to its own future (ValueError naming the function otherwise)."""
        rows = [row for row, _ in requests]
        call = functools.partial(
            self._fn,
            data_sources=[row.get(self._source_key) for row in rows],
            solution_strs=[text for _, text in requests],
            ground_truths=[_ground_truth(row) for row in rows],
            extra_infos=[self._manager.extra_info_for(row.get("extra_info")) for row in rows],
            **self._kwargs,
        )
        results = await self._call(call)
        if isinstance(results, (dict, str, bytes)) or not hasattr(results, "__len__"):
            raise ValueError(
                f"batch reward function {self._name} returned {type(results).__name__}, not a list "
                f"of {len(rows)} scores (one per response, in order)"
            )
        if len(results) != len(rows):
            raise ValueError(
                f"batch reward function {self._name} returned {len(results)} scores for {len(rows)} "
                "responses; return one per response, in order"
            )
        for future, result in zip(futures, results):
            settle(future, result)

    async def _call(self, call: functools.partial) -> Any:
        """The user's function under `reward.timeout_s`, its failures named after it."""
        try:
            return await asyncio.wait_for(self._off_the_loop(call), timeout=self._timeout_s)
        except asyncio.TimeoutError:
            raise RewardTimeoutError(
                f"reward function {self._name} did not return within {self._timeout_s:g} s (reward.timeout_s)"
            ) from None
        except Exception as error:  # keep the user's frames: the failed sample records where it raised
            raise RewardFunctionRaised(
                f"reward function {self._name} raised {type(error).__name__}: {error}"
            ).with_traceback(error.__traceback__) from None

    @staticmethod
    async def _off_the_loop(call: functools.partial) -> Any:
        """Async functions are awaited; sync ones run on a daemon thread, so a slow grader stalls no
        other session and a hung one is abandoned at the timeout (a thread cannot be killed)."""
        if inspect.iscoroutinefunction(call.func):
            return await call()
        result = await run_in_daemon_thread(call)
        return await result if inspect.isawaitable(result) else result


def _ground_truth(row: dict) -> Any:
    return (row.get("reward_model") or {}).get("ground_truth")


def _score_of(result: Any) -> tuple[float, dict[str, float | str]]:
    """`(score, extras)` of one result: a number, or a dict with `score`."""
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"reward function returned a dict without 'score': {sorted(result)}")
        return float(result["score"]), reward_extra_values(result)
    return float(result), {}


def reward_extra_values(result: Mapping[str, Any]) -> dict[str, float | str]:
    """What a trajectory keeps of a reward function's dict besides `score` (its `reward_extra`
    column, V1 and V0 alike): numbers as floats (metrics `reward/<key>/mean`, GDPO's components)
    and text as it is (verl's `pred`, written to the generation dumps); other values are dropped."""
    return {
        key: value if isinstance(value, str) else float(value)
        for key, value in result.items()
        if key != "score" and isinstance(value, (int, float, bool, np.number, str))
    }
