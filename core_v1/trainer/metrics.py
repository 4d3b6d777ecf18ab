"""Step metrics computed from a trained batch (verl's metric names) and a named stage timer."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator, Optional, Sequence

from tensordict import TensorDict

from core_v1.algorithms import variance_proxy_metrics
from core_v1.batch.layout import column
from core_v1.batch.meta import BatchMeta, row_summaries, summary_columns


@contextmanager
def timed(metrics: dict, name: str) -> Iterator[None]:
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics[f"timing_s/{name}"] = metrics.get(f"timing_s/{name}", 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    values = [float(value) for value in values]
    return {f"{prefix}/mean": sum(values) / len(values), f"{prefix}/max": max(values), f"{prefix}/min": min(values)}


def compute_data_metrics(batch: BatchMeta | TensorDict, max_response_length: int) -> dict[str, float]:
    """verl's data metrics of a trained batch, from its per-row columns: V1's `BatchMeta`, or a
    padded batch (V0's view), whose columns `batch_columns` computes first."""
    meta = batch if isinstance(batch, BatchMeta) else batch_columns(batch)
    columns, rows = meta.columns, len(meta)
    metrics = {}
    metrics.update(_stats("critic/score", columns["score"]))
    if "reward" in columns:
        metrics.update(_stats("critic/rewards", columns["reward"]))
    tokens = columns["model_tokens"]
    for field, outcome, prefix in (
        ("advantages", "advantage", "critic/advantages"),
        ("returns", "return", "critic/returns"),
        ("values", None, "critic/values"),
    ):
        summary = _token_stats(meta, field, outcome)
        if summary is not None and any(tokens):
            total, high, low = summary
            metrics.update(
                {f"{prefix}/mean": sum(total) / sum(tokens), f"{prefix}/max": max(high), f"{prefix}/min": min(low)}
            )
    metrics.update(_stats("response_length", columns["response_len"]))
    metrics["response_length/clip_ratio"] = sum(int(n) >= max_response_length for n in columns["response_len"]) / rows
    metrics.update(_stats("prompt_length", columns["prompt_len"]))
    if "reward_extra" in columns:
        metrics.update(_dict_means("reward", columns["reward_extra"]))
    if "agent_metrics" in columns:
        metrics.update(_dict_means("agent", columns["agent_metrics"]))
    if "agent_name" in columns:
        metrics.update(_shares("rollout/agent_loop", columns["agent_name"]))
    if "num_turns" in columns:
        metrics.update(_stats("num_turns", columns["num_turns"]))
    if "entropys/sum" in columns:
        metrics["actor/entropy"] = sum(columns["entropys/sum"]) / max(sum(tokens), 1)
    if "uid" in columns:
        metrics["critic/score/zero_variance_group_fraction"] = zero_variance_group_fraction(
            columns["score"], [str(uid) for uid in columns["uid"]]
        )
    return metrics


def _token_stats(meta: BatchMeta, field: str, outcome: Optional[str]) -> Optional[tuple[list, list, list]]:
    """(per-row sum, max, min) of a token-level field over the rows with model tokens: from its
    summaries, or from a per-row outcome (the same number on every model token of the row)."""
    columns, tokens = meta.columns, meta.columns["model_tokens"]
    if f"{field}/sum" in columns:
        total, high, low = (columns[name] for name in summary_columns(field))
    elif outcome is not None and outcome in columns:
        total = [value * count for value, count in zip(columns[outcome], tokens)]
        high = low = columns[outcome]
    else:
        return None
    rows = [row for row, count in enumerate(tokens) if count]
    return total, [high[row] for row in rows], [low[row] for row in rows]


def batch_columns(batch: TensorDict) -> BatchMeta:
    """The per-row columns `compute_data_metrics` reads, from a padded batch (no store behind it)."""
    prompt_width = batch["prompts"].shape[1]
    columns = {
        "score": batch["token_level_scores"].sum(-1).tolist(),
        "prompt_len": batch["attention_mask"][:, :prompt_width].sum(-1).tolist(),
        "response_len": batch["attention_mask"][:, prompt_width:].sum(-1).tolist(),
    }
    if "token_level_rewards" in batch.keys():
        columns["reward"] = batch["token_level_rewards"].sum(-1).tolist()
    fields = ("advantages", "returns", "values", "entropys")
    columns.update(row_summaries({f: batch[f] for f in fields if f in batch.keys()}, batch["response_mask"]))
    for name in ("reward_extra", "agent_metrics", "agent_name", "num_turns", "uid"):
        if name in batch.keys():
            columns[name] = column(batch, name)
    return BatchMeta("", [""] * batch.batch_size[0], columns)


def compute_variance_proxy_metrics(batch: TensorDict, grad_norm: Optional[float]) -> dict[str, float]:
    """verl's `variance_proxy/*` (`core_v1.algorithms.variance_proxy`) of the trained batch, with the
    step's `actor/grad_norm`; none unless the old-log-prob pass wrote `sum_pi_squared`
    (`actor.calculate_sum_pi_squared`, and not in bypass mode, which skips that pass)."""
    if not {"sum_pi_squared", "old_log_probs", "advantages"} <= set(batch.keys()):
        return {}
    return variance_proxy_metrics(
        advantages=batch["advantages"],
        response_mask=batch["response_mask"],
        old_log_probs=batch["old_log_probs"],
        sum_pi_squared=batch["sum_pi_squared"],
        rollout_is_weights=batch.get("rollout_is_weights", None),
        grad_norm=grad_norm,
    )


def variance_proxy_stage(batch: TensorDict, metrics: dict, *, grad_norm: Optional[float]) -> TensorDict:
    """`compute_variance_proxy_metrics` in the stage-function shape (run on a training rank by V1)."""
    metrics.update(compute_variance_proxy_metrics(batch, grad_norm))
    return batch


def zero_variance_group_fraction(scores: Sequence[float], uids: list[str]) -> float:
    """The share of prompt groups whose samples all scored the same: GRPO gives them zero advantage,
    so they teach nothing. Near 1 the policy has stopped learning -- the signature of an entropy
    collapse onto one answer per prompt (right or wrong) -- whatever the score."""
    by_group: dict[str, list[float]] = {}
    for uid, score in zip(uids, scores):
        by_group.setdefault(uid, []).append(float(score))
    return sum(1 for group in by_group.values() if max(group) == min(group)) / max(len(by_group), 1)


def compute_throughput_metrics(batch: BatchMeta | TensorDict, step_seconds: float) -> dict[str, float]:
    tokens = sum(batch.total_lengths) if isinstance(batch, BatchMeta) else int(batch["attention_mask"].sum().item())
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
