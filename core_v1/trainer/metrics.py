"""Step metrics computed from a trained batch (verl's metric names) and a named stage timer."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Optional

import torch
from tensordict import TensorDict

from core_v1.algorithms import masked_mean, variance_proxy_metrics
from core_v1.trainer.batch import column


@contextmanager
def timed(metrics: dict, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics[f"timing_s/{name}"] = metrics.get(f"timing_s/{name}", 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict[str, float]:
    values = values.float()
    return {f"{prefix}/mean": values.mean().item(), f"{prefix}/max": values.max().item(),
            f"{prefix}/min": values.min().item()}


def compute_data_metrics(batch: TensorDict, max_response_length: int) -> dict[str, float]:
    response_mask = batch["response_mask"].bool()
    prompt_length = batch["attention_mask"][:, : batch["prompts"].shape[1]].sum(-1).float()
    response_length = batch["attention_mask"][:, batch["prompts"].shape[1]:].sum(-1).float()
    metrics = {}
    metrics.update(_stats("critic/score", batch["token_level_scores"].sum(-1)))
    if "token_level_rewards" in batch.keys():
        metrics.update(_stats("critic/rewards", batch["token_level_rewards"].sum(-1)))
    for field, prefix in (("advantages", "critic/advantages"), ("returns", "critic/returns"), ("values", "critic/values")):
        if field in batch.keys() and response_mask.any():
            metrics.update(_stats(prefix, batch[field][response_mask]))
    metrics.update(_stats("response_length", response_length))
    metrics["response_length/clip_ratio"] = response_length.ge(max_response_length).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_length))
    if "reward_extra" in batch.keys():
        metrics.update(_dict_means("reward", batch["reward_extra"].tolist()))
    if "agent_metrics" in batch.keys():
        metrics.update(_dict_means("agent", batch["agent_metrics"].tolist()))
    if "agent_name" in batch.keys():
        metrics.update(_shares("rollout/agent_loop", batch["agent_name"].tolist()))
    if "num_turns" in batch.keys():
        metrics.update(_stats("num_turns", torch.tensor(batch["num_turns"].tolist(), dtype=torch.float32)))
    if "entropys" in batch.keys():
        metrics["actor/entropy"] = masked_mean(batch["entropys"], batch["response_mask"]).item()
    if "uid" in batch.keys():
        metrics["critic/score/zero_variance_group_fraction"] = zero_variance_group_fraction(
            batch["token_level_scores"].sum(-1), [str(uid) for uid in column(batch, "uid")])
    return metrics


def compute_variance_proxy_metrics(batch: TensorDict, grad_norm: Optional[float]) -> dict[str, float]:
    """verl's `variance_proxy/*` (`core_v1.algorithms.variance_proxy`) of the trained batch, with the
    step's `actor/grad_norm`; none unless the old-log-prob pass wrote `sum_pi_squared`
    (`actor.calculate_sum_pi_squared`, and not in bypass mode, which skips that pass)."""
    if not {"sum_pi_squared", "old_log_probs", "advantages"} <= set(batch.keys()):
        return {}
    return variance_proxy_metrics(advantages=batch["advantages"], response_mask=batch["response_mask"],
                                  old_log_probs=batch["old_log_probs"], sum_pi_squared=batch["sum_pi_squared"],
                                  rollout_is_weights=batch.get("rollout_is_weights", None), grad_norm=grad_norm)


def zero_variance_group_fraction(scores: torch.Tensor, uids: list[str]) -> float:
    """The share of prompt groups whose samples all scored the same: GRPO gives them zero advantage,
    so they teach nothing. Near 1 the policy has stopped learning -- the signature of an entropy
    collapse onto one answer per prompt (right or wrong) -- whatever the score."""
    by_group: dict[str, list[float]] = {}
    for uid, score in zip(uids, scores.tolist()):
        by_group.setdefault(uid, []).append(score)
    return sum(1 for group in by_group.values() if max(group) == min(group)) / max(len(by_group), 1)


def compute_throughput_metrics(batch: TensorDict, step_seconds: float) -> dict[str, float]:
    tokens = int(batch["attention_mask"].sum().item())
    return {"perf/total_num_tokens": tokens, "perf/throughput": tokens / max(step_seconds, 1e-9)}


def _shares(prefix: str, names: list) -> dict[str, float]:
    """`{prefix}/{name}/share`: the fraction of the batch's rows that carry each name."""
    names = [str(name) for name in names]
    return {f"{prefix}/{name}/share": names.count(name) / len(names) for name in sorted(set(names))}


def _dict_means(prefix: str, extras: list[dict]) -> dict[str, float]:
    """`{prefix}/{key}/mean` over rows of per-row number dicts: the extra numbers reward functions
    return beside `score` (e.g. `exact`), or an agent loop's per-trajectory metrics."""
    sums: dict[str, list[float]] = {}
    for extra in extras:
        for key, value in (extra or {}).items():
            if isinstance(value, (int, float)):
                sums.setdefault(key, []).append(float(value))
    return {f"{prefix}/{key}/mean": sum(values) / len(values) for key, values in sums.items()}
