"""V0 reward managers: score a whole generated `DataProto` with a `compute_score` function.

`NaiveRewardManager` is verl's: for each row it decodes the response's real tokens, calls
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
import inspect
from collections import defaultdict
from typing import Any, Callable, Optional

import torch
from omegaconf import DictConfig, OmegaConf

from core_v1.reward import RewardFunctionError, load_custom_reward_function
from core_v1.reward.scorers import default_compute_score
from core_v1.utils.registry import Registry
from legacy_v0 import warn_deprecated
from legacy_v0.protocol import DataProto

warn_deprecated(stacklevel=3)

REWARD_MANAGERS: Registry[type] = Registry("V0 reward manager", base=object,
                                           config_key="reward_model.reward_manager (V1: reward.reward_manager.name)")


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

    def __init__(self, tokenizer: Any, num_examine: int = 0, compute_score: Optional[Callable[..., Any]] = None,
                 reward_fn_key: str = "data_source", **reward_kwargs: Any):
        self.tokenizer = tokenizer
        self.num_examine = num_examine
        self.compute_score = compute_score or default_compute_score
        self.reward_fn_key = reward_fn_key
        self.reward_kwargs = reward_kwargs

    def __call__(self, data: DataProto, return_dict: bool = False):
        """The `[B, R]` reward tensor; with `return_dict`, `{"reward_tensor", "reward_extra_info"}`
        where `reward_extra_info` maps each extra key of dict results to one value per row."""
        if "rm_scores" in data.batch.keys():  # a reward model already scored this batch
            scores = data.batch["rm_scores"]
            return {"reward_tensor": scores, "reward_extra_info": {}} if return_dict else scores
        texts, last_tokens = self._decode_responses(data)
        results = self._score_all(data, texts)
        reward_tensor = torch.zeros(data.batch["responses"].shape, dtype=torch.float32)
        extra_info: dict[str, list] = defaultdict(list)
        for row, result in enumerate(results):
            score, extras = _split_result(result)
            # An empty response has no last token; V1 puts its score on position 0, and so do we.
            reward_tensor[row, last_tokens[row]] = score
            for key, value in extras.items():
                extra_info[key].append(value)
        self._print_examples(data, texts, results)
        if return_dict:
            return {"reward_tensor": reward_tensor, "reward_extra_info": dict(extra_info)}
        return reward_tensor

    def _decode_responses(self, data: DataProto) -> tuple[list[str], list[int]]:
        prompt_width = data.batch["prompts"].shape[-1]
        lengths = data.batch["attention_mask"][:, prompt_width:].sum(-1)
        texts = [self.tokenizer.decode(ids[:length].tolist(), skip_special_tokens=True)
                 for ids, length in zip(data.batch["responses"], lengths.tolist())]
        return texts, (lengths - 1).clamp(min=0).tolist()

    def _score_all(self, data: DataProto, texts: list[str]) -> list[Any]:
        columns = data.non_tensor_batch
        results = []
        for row, text in enumerate(texts):
            reward_model = columns["reward_model"][row] if "reward_model" in columns else None
            results.append(self.compute_score(
                data_source=columns[self.reward_fn_key][row] if self.reward_fn_key in columns else None,
                solution_str=text, ground_truth=(reward_model or {}).get("ground_truth"),
                extra_info=columns["extra_info"][row] if "extra_info" in columns else None, **self.reward_kwargs))
        pending = [row for row, result in enumerate(results) if inspect.isawaitable(result)]
        if pending:  # an async compute_score (allowed in V1 too): await them together
            awaited = asyncio.run(_gather([results[row] for row in pending]))
            for row, result in zip(pending, awaited):
                results[row] = result
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


async def _gather(awaitables: list) -> list:
    return list(await asyncio.gather(*awaitables))


def _split_result(result: Any) -> tuple[float, dict[str, Any]]:
    if isinstance(result, dict):
        if "score" not in result:
            raise RewardResultError(f"the reward function returned a dict without 'score' (keys: {sorted(result)}); "
                                    "return a number or a dict with 'score'")
        return float(result["score"]), {k: v for k, v in result.items() if k != "score"}
    try:
        return float(result), {}
    except (TypeError, ValueError):
        raise RewardResultError(f"the reward function returned {type(result).__name__} {result!r:.60}; "
                                "return a number or a dict with 'score'") from None


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
    return load_custom_reward_function(path, name) or default_compute_score


def reward_kwargs(config: Any) -> dict:
    """Keyword arguments for every `compute_score` call, merged as V1's reward loop merges them."""
    merged: dict = {}
    for key in ("reward.reward_kwargs", "reward_model.reward_kwargs", "reward.custom_reward_function.reward_kwargs",
                "custom_reward_function.reward_kwargs"):
        value = _lookup(config, key)
        if value:
            merged.update(OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value))
    return merged


def load_reward_manager(config: Any, tokenizer: Any, num_examine: int = 0, **kwargs: Any):
    """Build the reward manager `reward_model.reward_manager` (V1: `reward.reward_manager.name`) names."""
    name = _first_set(config, "reward_model.reward_manager", "reward.reward_manager.name") or "naive"
    manager_cls = REWARD_MANAGERS.get(name)
    reward_fn_key = _lookup(config, "data.reward_fn_key") or "data_source"
    return manager_cls(tokenizer, num_examine=num_examine, compute_score=reward_function(config),
                       reward_fn_key=reward_fn_key, **{**reward_kwargs(config), **kwargs})


def compute_reward(data: DataProto, reward_fn: Callable[..., Any]) -> tuple[torch.Tensor, dict[str, list]]:
    """`(reward_tensor [B, R], reward_extra_info)` from a reward manager, whichever form it returns."""
    result = reward_fn(data, return_dict=True)
    if isinstance(result, dict):
        return result["reward_tensor"], dict(result.get("reward_extra_info") or {})
    return result, {}
