"""V0 reward managers: score a whole generated `DataProto` with a `compute_score` function.

`reward_model.reward_manager` chooses one of verl's managers: `naive` (the default), `dapo`
(naive plus DAPO's overlong punishment), `batch` (one call scores the whole batch), `prime`
(per-sample scores in parallel processes with a time limit) and `gdpo` (naive, with the run's
`trainer.experiment_name` in `extra_info`); `@register_reward_manager("name")` adds your own. `NaiveRewardManager` is verl's: for each row it decodes the response's real tokens, calls
`compute_score(data_source=..., solution_str=..., ground_truth=..., extra_info=..., **reward_kwargs)`
and puts the score on the row's last response token (a `[B, R]` reward tensor). A dict result
must hold `score`; its other entries are returned as per-row extra information.

The function is the one V1 uses for the same config: `reward.custom_reward_function.{path,name}`
loaded by `core_v1.reward.load_custom_reward_function`, else the built-in scorer registered for
the row's `data_source` (`core_v1.reward.scorers.default_compute_score`). Old configs name these
`custom_reward_function.{path,name}` and `reward_model.reward_manager`; `load_reward_manager`
reads those V0 keys where a config still has them and the V1 homes otherwise.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import multiprocessing
import os
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from core_v1.reward import RewardFunctionError, load_custom_reward_function
from core_v1.reward.reward_model import rule_function_for
from core_v1.reward.scorers import default_compute_score
from core_v1.batch.layout import scores_on_last_token
from core_v1.utils.registry import Registry
from legacy_v0 import warn_deprecated
from legacy_v0.protocol import DataProto

warn_deprecated(stacklevel=3)

REWARD_MANAGERS: Registry[type] = Registry(
    "V0 reward manager", base=object, config_key="reward_model.reward_manager (V1: reward.reward_manager.name)"
)


def register_reward_manager(name: str):
    """Class decorator: make a reward manager selectable by `reward_model.reward_manager=name`."""
    return REWARD_MANAGERS.register(name)


class RewardResultError(RewardFunctionError):
    """A reward function returned something that is not a number or a dict with `score`."""


@register_reward_manager("naive")
class NaiveRewardManager:
    """Score each row of a generated batch with `compute_score` on its decoded response.

    Args:
        tokenizer: decodes responses (special tokens skipped, as V1's reward loop does).
        num_examine: how many decoded samples per data source to print per call (0 = none).
        compute_score: verl's signature; default: the built-in scorer for the row's data source.
        reward_fn_key: the column that names a row's data source.
        **reward_kwargs: passed to every `compute_score` call.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Optional[Callable[..., Any]] = None,
        reward_fn_key: str = "data_source",
        **reward_kwargs: Any,
    ):
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = reward_kwargs

    def __call__(self, data: DataProto, return_dict: bool = False):
        """The `[B, R]` reward tensor; with `return_dict`, `{"reward_tensor", "reward_extra_info",
        "failed_rows"}` where `reward_extra_info` maps each extra key of dict results to one value
        per row (None where a row lacks it) and `failed_rows` maps each row whose `compute_score`
        raised to the error (its reward is 0; the trainer does not train on it, as V1 does not)."""
        if "rm_scores" in data.batch.keys():  # a reward model already scored this batch
            scores = data.batch["rm_scores"]
            return {"reward_tensor": scores, "reward_extra_info": {}, "failed_rows": {}} if return_dict else scores
        texts, lengths = self._decode_responses(data)
        results = self._score_all(data, texts)
        reward_tensor = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        row_extras: list[dict[str, Any]] = []
        for row, result in enumerate(results):
            if isinstance(result, ScoreFailed):
                row_extras.append({})
                continue
            score, extras = self._row_reward(result, lengths[row])
            # An empty response has no last token; V1 puts its score on position 0, and so do we.
            reward_tensor[row, max(lengths[row] - 1, 0)] = score
            row_extras.append(extras)
        self._print_examples(data, texts, results)
        if return_dict:
            keys = dict.fromkeys(key for extras in row_extras for key in extras)
            return {
                "reward_tensor": reward_tensor,
                "reward_extra_info": {key: [extras.get(key) for extras in row_extras] for key in keys},
                "failed_rows": {row: r.error for row, r in enumerate(results) if isinstance(r, ScoreFailed)},
            }
        return reward_tensor

    def _row_reward(self, result: Any, response_length: int) -> tuple[float, dict[str, Any]]:
        """One row's reward and extra information from its `compute_score` result."""
        return _split_result(result)

    def _extra_info(self, row_extra_info: Any) -> Any:
        """The `extra_info` `compute_score` gets for a row: the row's own."""
        return row_extra_info

    def _decode_responses(self, data: DataProto) -> tuple[list[str], list[int]]:
        """Each row's decoded response and its length in tokens."""
        prompt_width = data.batch["prompts"].shape[-1]
        lengths = data.batch["attention_mask"][:, prompt_width:].sum(-1).tolist()
        texts = [
            self.tokenizer.decode(ids[:length].tolist(), skip_special_tokens=True)
            for ids, length in zip(data.batch["responses"], lengths)
        ]
        return texts, [int(length) for length in lengths]

    def _score_all(self, data: DataProto, texts: list[str]) -> list[Any]:
        """Each row's `compute_score` result, or `ScoreFailed` where the call raised."""
        columns = data.non_tensor_batch
        results = []
        for row, text in enumerate(texts):
            reward_model = columns["reward_model"][row] if "reward_model" in columns else None
            results.append(
                _guarded(
                    functools.partial(
                        self.compute_score,
                        data_source=columns[self.reward_fn_key][row] if self.reward_fn_key in columns else None,
                        solution_str=text,
                        ground_truth=(reward_model or {}).get("ground_truth"),
                        extra_info=self._extra_info(_with_turns(columns, row)),
                        **self.reward_kwargs,
                    )
                )
            )
        pending = [row for row, result in enumerate(results) if inspect.isawaitable(result)]
        if pending:  # an async compute_score (allowed in V1 too): await them together
            awaited = asyncio.run(_gather([results[row] for row in pending], return_exceptions=True))
            for row, result in zip(pending, awaited):
                results[row] = ScoreFailed.of(result) if isinstance(result, Exception) else result
        return results

    def _print_examples(self, data: DataProto, texts: list[str], results: list[Any]) -> None:
        if self.num_examine <= 0:
            return
        printed: dict[Any, int] = defaultdict(int)
        sources = data.non_tensor_batch.get(self.reward_fn_key, [None] * len(texts))
        for source, text, result in zip(sources, texts, results):
            if printed[source] < self.num_examine:
                printed[source] += 1
                print(f"[{source}] response: {text!r} score: {result!r}")


def _with_turns(columns: dict, row: int) -> Any:
    """A row's `extra_info` for its reward function: with the trajectory's `num_turns` where the
    rollout reports it, as verl's naive manager adds it (ReTool's `compute_score` reads it)."""
    extra_info = columns["extra_info"][row] if "extra_info" in columns else None
    if "num_turns" not in columns:
        return extra_info
    return {**dict(extra_info or {}), "num_turns": int(columns["num_turns"][row])}


def _columns(data: DataProto, reward_fn_key: str) -> tuple[list, list, list]:
    """Per row: data source, ground truth, extra info (verl's columns; None where absent)."""
    columns, rows = data.non_tensor_batch, len(data)
    sources = list(columns[reward_fn_key]) if reward_fn_key in columns else [None] * rows
    truths = (
        [(rm or {}).get("ground_truth") for rm in columns["reward_model"]]
        if "reward_model" in columns
        else [None] * rows
    )
    extras = list(columns["extra_info"]) if "extra_info" in columns else [None] * rows
    return sources, truths, extras


@register_reward_manager("dapo")
class DAPORewardManager(NaiveRewardManager):
    """verl's DAPO reward manager: the naive per-sample score plus DAPO's soft overlong punishment.

    With `overlong_buffer_cfg.enable`, a response longer than `max_resp_len - len` tokens loses
    `(length - (max_resp_len - len)) / len * penalty_factor` (never a bonus); with `log`, each
    row's `overlong_reward` and `overlong` flag are reported. A plain-number score is also
    reported as `acc`, as verl does.

    Args: those of `NaiveRewardManager`, plus `max_resp_len` (default: `data.max_response_length`)
    and `overlong_buffer_cfg` (`reward_model.overlong_buffer`, or verl's
    `reward_model.reward_kwargs.overlong_buffer_cfg`: a dict or an `OverlongBufferConfig`).
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Optional[Callable[..., Any]] = None,
        reward_fn_key: str = "data_source",
        max_resp_len: Optional[int] = None,
        overlong_buffer_cfg: Any = None,
        **reward_kwargs: Any,
    ):
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs)
        self.overlong = overlong_config(overlong_buffer_cfg)
        self.max_resp_len = max_resp_len
        if self.overlong.enable:
            if max_resp_len is None:
                raise RewardFunctionError(
                    "the dapo reward manager's overlong buffer needs max_resp_len (data.max_response_length)"
                )
            if max_resp_len < self.overlong.len:
                raise RewardFunctionError(
                    f"reward_model.overlong_buffer.len ({self.overlong.len}) must not exceed "
                    f"the maximum response length ({max_resp_len})"
                )

    def _row_reward(self, result: Any, response_length: int) -> tuple[float, dict[str, Any]]:
        score, extras = _split_result(result)
        if not isinstance(result, dict):
            extras["acc"] = score
        if self.overlong.enable:
            expected = self.max_resp_len - self.overlong.len
            penalty = min(-(response_length - expected) / self.overlong.len * self.overlong.penalty_factor, 0.0)
            score += penalty
            if self.overlong.log:
                extras["overlong_reward"] = penalty
                extras["overlong"] = penalty < 0
        return score, extras


@register_reward_manager("gdpo")
class GDPORewardManager(NaiveRewardManager):
    """verl's GDPO reward manager (verl 0.7.1, for `algorithm.adv_estimator=gdpo`): the naive
    per-sample score, with `experiment_name` (the run's `trainer.experiment_name`) added to each
    row's `extra_info`, as verl adds it; the dict's other entries become the reward components
    GDPO normalises, as with every manager."""

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Optional[Callable[..., Any]] = None,
        reward_fn_key: str = "data_source",
        experiment_name: str = "",
        **reward_kwargs: Any,
    ):
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs)
        self.experiment_name = experiment_name

    def _extra_info(self, row_extra_info: Any) -> Any:
        return {**dict(row_extra_info or {}), "experiment_name": self.experiment_name}


def overlong_config(value: Any):
    from legacy_v0.config import OverlongBufferConfig

    if value is None or isinstance(value, OverlongBufferConfig):
        return value or OverlongBufferConfig()
    fields = OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value)
    try:
        return OverlongBufferConfig(**fields)
    except TypeError as error:
        raise RewardFunctionError(f"overlong_buffer_cfg: {error} (keys: enable, len, penalty_factor, log)") from None


@register_reward_manager("batch")
class BatchRewardManager(NaiveRewardManager):
    """verl's batch reward manager: one call scores the whole batch.

    The function is called as `compute_score(data_sources=[...], solution_strs=[...],
    ground_truths=[...], extra_infos=[...], **reward_kwargs)` and returns one score (a number or a
    dict with `score`) per row, in order. It must be given (`custom_reward_function.path`): the
    built-in scorers score one sample at a time.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Optional[Callable[..., Any]] = None,
        reward_fn_key: str = "data_source",
        **reward_kwargs: Any,
    ):
        # The built-in scorers, also when called with the Sandbox Fusion settings (`__wrapped__`).
        if compute_score is None or getattr(compute_score, "__wrapped__", compute_score) is default_compute_score:
            raise RewardFunctionError(BATCH_NEEDS_A_FUNCTION)
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs)

    def _score_all(self, data: DataProto, texts: list[str]) -> list[Any]:
        sources, truths, extras = _columns(data, self.reward_fn_key)
        results = self.compute_score(
            data_sources=sources, solution_strs=texts, ground_truths=truths, extra_infos=extras, **self.reward_kwargs
        )
        if inspect.isawaitable(results):
            results = asyncio.run(_gather([results]))[0]
        results = list(results)
        if len(results) != len(texts):
            raise RewardResultError(
                f"the batch reward function returned {len(results)} scores for {len(texts)} "
                "responses; return one per response, in order"
            )
        return results


BATCH_NEEDS_A_FUNCTION = (
    "reward_model.reward_manager=batch calls a function that scores whole lists; set "
    "custom_reward_function.path (and .name) to one"
)


@register_reward_manager("prime")
class PrimeRewardManager(NaiveRewardManager):
    """verl's PRIME reward manager: per-sample scores computed in parallel worker processes, each
    with a time limit (a verifier that hangs on one answer scores 0 instead of stalling the step).

    `compute_score(data_source, solution_str, ground_truth, extra_info)` runs in a pool of
    `num_processes` processes (default: the CPU count, at most 64); a call that takes longer than
    `timeout_s` seconds (default 300, verl's) or raises scores 0.0 and is reported on stdout.
    The function must be importable by the worker processes (a module-level function).
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Optional[Callable[..., Any]] = None,
        reward_fn_key: str = "data_source",
        num_processes: Optional[int] = None,
        timeout_s: float = 300.0,
        **reward_kwargs: Any,
    ):
        super().__init__(tokenizer, num_examine, compute_score, reward_fn_key, **reward_kwargs)
        self.num_processes = num_processes or min(64, os.cpu_count() or 1)
        self.timeout_s = timeout_s

    def _score_all(self, data: DataProto, texts: list[str]) -> list[Any]:
        sources, truths, extras = _columns(data, self.reward_fn_key)
        context = multiprocessing.get_context("fork")  # the children see the loaded reward function
        pool = ProcessPoolExecutor(max_workers=min(self.num_processes, max(len(texts), 1)), mp_context=context)
        try:
            futures = [
                pool.submit(self.compute_score, source, text, truth, extra, **self.reward_kwargs)
                for source, text, truth, extra in zip(sources, texts, truths, extras)
            ]
            return [self._result(future, row) for row, future in enumerate(futures)]
        finally:
            _stop_pool(pool)

    def _result(self, future, row: int) -> Any:
        try:
            return future.result(timeout=self.timeout_s)
        except FutureTimeout:
            print(f"[prime reward] row {row}: scoring took longer than {self.timeout_s}s; score 0.0")
        except Exception as error:  # noqa: BLE001 - verl's prime scores a failing verifier 0
            print(f"[prime reward] row {row}: {type(error).__name__}: {error}; score 0.0")
        return 0.0


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Shut the pool down without waiting for calls that hang (their processes are killed)."""
    processes = list(getattr(pool, "_processes", {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.kill()


async def _gather(awaitables: list, return_exceptions: bool = False) -> list:
    return list(await asyncio.gather(*awaitables, return_exceptions=return_exceptions))


@dataclass(frozen=True)
class ScoreFailed:
    """A `compute_score` call that raised: that sample is failed (counted in `rollout/failed_samples`
    and not trained on), as a reward function that raises marks its sample failed on V1."""

    error: str

    @classmethod
    def of(cls, error: BaseException) -> "ScoreFailed":
        return cls(f"{type(error).__name__}: {error}")


def _guarded(call: Callable[[], Any]) -> Any:
    """The call's result (an awaitable for an async function), or `ScoreFailed` if it raised."""
    try:
        return call()
    except Exception as error:  # noqa: BLE001 - a user's grader may raise anything; that sample fails
        return ScoreFailed.of(error)


def _split_result(result: Any) -> tuple[float, dict[str, Any]]:
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardResultError(
                f"the reward function returned a dict without 'score' (keys: {sorted(result)}); "
                "return a number or a dict with 'score'"
            )
        return float(result["score"]), {k: v for k, v in result.items() if k != "score"}
    try:
        return float(result), {}
    except (TypeError, ValueError):
        raise RewardResultError(
            f"the reward function returned {type(result).__name__} {result!r:.60}; "
            "return a number or a dict with 'score'"
        ) from None


# ----------------------------------------------------------------------------- from a config
def _lookup(config: Any, dotted: str) -> Any:
    """`config.<dotted>` for a DictConfig, a dict or a dataclass tree; None where a key is absent."""
    if isinstance(config, DictConfig):
        return OmegaConf.select(config, dotted, default=None)
    node = config
    for part in dotted.split("."):
        node = node.get(part) if isinstance(node, dict) else getattr(node, part, None)
        if node is None:
            return None
    return node


def _first_set(config: Any, v0_key: str, v1_key: str) -> Any:
    return next((v for v in (_lookup(config, v0_key), _lookup(config, v1_key)) if v is not None), None)


def reward_function(config: Any) -> Callable[..., Any]:
    """The configured `compute_score`: `custom_reward_function.{path,name}` (V0 keys) or
    `reward.custom_reward_function.{path,name}` (V1), else the built-in scorer by data source."""
    path = _first_set(config, "custom_reward_function.path", "reward.custom_reward_function.path")
    name = _first_set(config, "custom_reward_function.name", "reward.custom_reward_function.name") or "compute_score"
    # With a served reward model that replaces the score, rows without a rule scorer get NaN.
    return rule_function_for(_lookup(config, "reward"), load_custom_reward_function(path, name))


def reward_kwargs(config: Any) -> dict:
    """Keyword arguments for every `compute_score` call, merged as V1's reward loop merges them."""
    merged: dict = {}
    for key in (
        "reward.reward_kwargs",
        "reward_model.reward_kwargs",
        "reward.custom_reward_function.reward_kwargs",
        "custom_reward_function.reward_kwargs",
    ):
        value = _lookup(config, key)
        if value:
            merged.update(OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value))
    return merged


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int = 0, settings: Any = None, **kwargs: Any):
    """Build the reward manager `reward_model.reward_manager` names (V1: `reward.reward_manager.name`).

    `settings` (`legacy_v0.config.V0Settings`) carries V0's own reward keys as the V0 config
    read them: the manager's name, `reward_model.reward_kwargs` and DAPO's overlong buffer.
    """
    name, merged = reward_manager_arguments(config, settings, **kwargs)
    reward_fn_key = _lookup(config, "data.reward_fn_key") or "data_source"
    manager_cls = REWARD_MANAGERS.get(name)
    if issubclass(manager_cls, GDPORewardManager):  # the run's name, not an argument of compute_score
        merged.setdefault("experiment_name", _lookup(config, "trainer.experiment_name") or "")
    return manager_cls(
        tokenizer, num_examine=num_examine, compute_score=reward_function(config), reward_fn_key=reward_fn_key, **merged
    )


def reward_manager_arguments(config: Any, settings: Any = None, **kwargs: Any) -> tuple[str, dict]:
    """The reward manager's registered name and the keyword arguments it is built with (besides
    the tokenizer, the function and `reward_fn_key`), as `load_reward_manager` reads them."""
    name = (
        (settings.reward_manager if settings is not None and settings.reward_manager != "naive" else None)
        or _first_set(config, "reward_model.reward_manager", "reward.reward_manager.name")
        or "naive"
    )
    merged = {**reward_kwargs(config), **(dict(settings.reward_kwargs) if settings is not None else {}), **kwargs}
    if _is_dapo(name):
        merged.setdefault("max_resp_len", _lookup(config, "data.max_response_length"))
        if settings is not None and settings.overlong_buffer.enable:
            merged.setdefault("overlong_buffer_cfg", settings.overlong_buffer)
    return name, merged


def _is_dapo(name: str) -> bool:
    """Whether `name` is DAPO's manager or one built on it; an unknown name is not (building it,
    and the start-up check, say that it is unknown)."""
    return name in REWARD_MANAGERS and issubclass(REWARD_MANAGERS.get(name), DAPORewardManager)


def compute_reward(data: DataProto, reward_fn: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, list]]:
    """`(reward_tensor [B, R], reward_extra_info)` from a reward manager, whichever form it returns (verl's)."""
    reward_tensor, extra_info, _ = score_batch(data, reward_fn)
    return reward_tensor, extra_info


def score_batch(data: DataProto, reward_fn: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, list], dict[int, str]]:
    """`compute_reward` plus the failed rows: `{row: error}` for each sample whose score raised
    (managers that score row by row report them; others raise or have none)."""
    result = reward_fn(data, return_dict=True)
    if isinstance(result, dict):
        return (
            result["reward_tensor"],
            dict(result.get("reward_extra_info") or {}),
            dict(result.get("failed_rows") or {}),
        )
    return result, {}, {}


def score_generated(
    data: DataProto, reward_fn: Callable[..., Any]
) -> tuple[torch.Tensor, dict[str, list], dict[int, str]]:
    """`score_batch` for a batch the V0 rollout generated, scored as V1 scores its trajectories.

    A row whose agent loop raised (its `rollout_error` column) is failed and not scored; a row its
    loop scored (`loop_score`: `core_v1.agent_loop.worker.loop_score`'s score and extras) keeps that
    score on its last response token (`core_v1.batch.layout.scores_on_last_token`) and its reward
    function is not called; `reward_fn` scores the other rows, in one call. Without those columns
    (single-turn generation) this is `score_batch` itself. Extra-info lists are per row, None where
    a row has no such entry.
    """
    rows = len(data)
    columns = data.non_tensor_batch
    errors = columns.get("rollout_error", [None] * rows)
    own = columns.get("loop_score", [None] * rows)
    failed = {row: error for row, error in enumerate(errors) if error is not None}
    others = [row for row in range(rows) if row not in failed and own[row] is None]
    if len(others) == rows:
        return score_batch(data, reward_fn)
    reward_tensor = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
    extra_info: dict[str, list] = {}

    def keep_extras(row: int, extras: dict) -> None:
        for key, value in extras.items():
            extra_info.setdefault(key, [None] * rows)[row] = value

    if others:
        scored, scored_extras, scored_failed = score_batch(data.select_idxs(others), reward_fn)
        reward_tensor[others] = scored.to(torch.float32)
        failed.update({others[index]: error for index, error in scored_failed.items()})
        for index, row in enumerate(others):
            keep_extras(row, {key: values[index] for key, values in scored_extras.items()})
    self_scored = [row for row in range(rows) if own[row] is not None]
    if self_scored:
        response_attention = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :]
        reward_tensor[self_scored] = scores_on_last_token(
            [own[row][0] for row in self_scored], response_attention[self_scored]
        )
        for row in self_scored:
            keep_extras(row, own[row][1])
    return reward_tensor, extra_info, failed
