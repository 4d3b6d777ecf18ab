"""The async replay buffer: sampling when generation runs ahead of training.

Key schema and row lifecycle are the sync buffer's (`core_v1.trainer.replay_buffer`): a group row
`{uid}` tagged `n`, `global_steps` (the step that submitted it, its *submit step*) and `order`;
trajectory rows `{uid}_{session_id}_{index}`, `finished` or `failed`. In the async modes several
batches are in flight at once, so a group may be trained some steps after it was submitted.

Staleness
    A group's *span* at step `t` is `t - submit_step + 1` (1: submitted and trained in the same
    step, as in `sync`). `trainer.v1.sampler.max_off_policy_threshold` (K) bounds the span of
    every group trained, under either `max_off_policy_strategy`:

    - `drop`: at each `sample`, every live group whose span exceeds K (finished or not) is
      evicted, reason `stale`, and as many replacement prompts are submitted (the *refill*).
      Trajectories of a dropped group that arrive later are evicted `stale` too.
    - `wait`: nothing is dropped for age. Each batch first takes the oldest groups that could
      not otherwise be trained within K at `batch_size` groups per later step (earliest deadline
      first; with K >= num_warmup_batches + 1 that is at most the groups whose span reached K)
      and waits until they are complete; the rest of the batch is the oldest complete groups.
      `admission_open` is false while a group at the threshold is still generating, so no new
      prompts crowd the replicas while the trainer waits for a straggler. (Should more groups be
      due than fit in one batch -- possible only after refills of failed groups -- the extra ones
      are dropped `stale` rather than trained late.)

Sampling (`sample(global_steps, partition_id, batch_size)`)
    Blocks without polling until `batch_size` complete groups are available and takes the
    oldest (lowest submit step, then submission order). With `in_submission_order` (set by an async
    mode's `reproducible: true`) it takes the oldest `batch_size` groups and waits until they are
    complete, so no group that happened to finish early jumps the queue. Before that, in a loop:

    - evicts stale groups (above) and orphan trajectories (their group was dropped),
    - evicts, reason `failed`, a complete group whose every session failed, and refills it
      (a group with some failed sessions trains on the rest; those rows are evicted `failed`),
    - with `algorithm.filter_groups.enable` (DAPO dynamic sampling), evicts, reason
      `filtered`, a complete group whose `filter_groups.metric` has zero variance across its
      trajectories (all right or all wrong: no learning signal), refills it and keeps sampling
      until a full batch of informative groups is in; `filter_groups.max_num_gen_batches` > 0
      bounds the refills to that many batches' worth before it raises.

    Evicted groups are reported to the generation pipeline (`pipeline.record_evicted`), which
    counts them in its group ledger and submits as many fresh prompts (the *refill*); trained
    groups are reported too (`record_trained`). Every row leaves the store once, consumed or
    evicted, so `store.stats(partition)` accounts for every submitted prompt.

Metrics
    `training/off_policy/trajectory_staleness/{mean,max}`: weight versions between the newest
    policy and the oldest that sampled a trained trajectory (0 = on-policy), as in the sync
    buffer; `training/off_policy/trajectory_spans/mean`: the span of the trained trajectories;
    `training/off_policy/evicted_samples`: prompt groups evicted during this call (any reason),
    with `.../evicted_samples/{stale,failed,filtered}` beside it.

Subclass it (and set `trainer.v1.sampler.custom_sampler.{path,name}`) to change the policy.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections import Counter, defaultdict
from typing import Any, Optional

from core_v1.batch.meta import BatchMeta
from core_v1.config.schema import ConfigError
from core_v1.trainer.replay_buffer import AllSamplesFailedError, ReplayBuffer
from core_v1.transfer_store.groups import (
    FAILED,
    FILTERED,
    STALE,
    SamplePlan,  # noqa: F401
    admission_state,  # noqa: F401
    complete_groups,  # noqa: F401
    group_span,
    plan_sample,
)
from core_v1.transfer_store import parse_key


class FilterGroupsExhaustedError(ConfigError):
    """DAPO filtering discarded more groups than `algorithm.filter_groups.max_num_gen_batches` allows."""


class ReplayBufferAsync(ReplayBuffer):
    """Oldest-first sampling with a staleness bound, eviction and refill (see the module docstring)."""

    def __init__(self, store: Any, config: Any, pad_token_id: int, wait_timeout: Optional[float] = None, **kwargs: Any):
        super().__init__(store, config, pad_token_id, wait_timeout, **kwargs)
        sampler = config.trainer.v1.sampler
        self.threshold = int(sampler.max_off_policy_threshold)
        self.strategy = sampler.max_off_policy_strategy
        self.filter_groups = config.algorithm.filter_groups
        self.in_submission_order = False  # an async mode's `reproducible` sets it

    def admission_open(self, global_steps: int, partition_id: str = "train") -> bool:
        """Whether new prompts may be submitted now: under `wait`, not while a group at the
        threshold is still generating (the next batch has to wait for it anyway)."""
        if self.strategy != "wait":
            return True
        # Answered where the rows are, from the store's group index: no scan of every live row's tags.
        predicate = functools.partial(admission_state, global_steps=global_steps, threshold=self.threshold)
        return self.store.wait_for(partition_id, predicate, timeout=self.wait_timeout)[0]

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[BatchMeta, dict]:
        started = time.perf_counter()
        evicted: Counter = Counter()
        accepted: dict[str, dict[str, dict]] = {}
        while len(accepted) < batch_size:
            predicate = functools.partial(
                plan_sample,
                need=batch_size - len(accepted),
                batch_size=batch_size,
                global_steps=global_steps,
                threshold=self.threshold,
                strategy=self.strategy,
                exclude=frozenset(accepted),
                in_order=self.in_submission_order,
            )
            plan = self.store.wait_for(partition_id, predicate, timeout=self.wait_timeout)
            if plan.evict:
                self._evict(partition_id, plan.evict, plan.evicted_groups, global_steps, evicted)
                self._stop_if_everything_fails(evicted, accepted, batch_size)
                continue
            kept, filtered = self._split_informative(partition_id, plan.take)
            accepted.update(kept)
            if filtered:
                self._evict(
                    partition_id,
                    {FILTERED: [k for g in filtered for k in [g, *plan.take[g]]]},
                    Counter({FILTERED: len(filtered)}),
                    global_steps,
                    evicted,
                )
                self._stop_if_filtering_exhausted(evicted, batch_size)
        batch, metrics = self._take(partition_id, accepted, global_steps)
        metrics["timing_s/wait_for_batch"] = time.perf_counter() - started
        metrics.update(self._eviction_metrics(evicted))
        return batch, metrics

    # ----------------------------------------------------------------------------- internals
    def _evict(
        self,
        partition_id: str,
        keys_by_reason: dict[str, list[str]],
        groups: Counter,
        global_steps: int,
        evicted: Counter,
    ) -> None:
        for reason, keys in keys_by_reason.items():
            self.store.evict(partition_id, keys, reason=reason)
        evicted.update(groups)
        self.report_evicted(partition_id, groups, global_steps)

    def _take(self, partition_id: str, groups: dict[str, dict[str, dict]], global_steps: int) -> tuple[BatchMeta, dict]:
        keys, failed, group_keys = self._split_rows(groups)
        if failed:
            self.store.evict(partition_id, failed, reason=FAILED)
        meta = self.take(partition_id, groups, keys)
        self.store.consume(partition_id, group_keys)
        self.report_trained(partition_id, len(group_keys))
        metrics = {"rollout/failed_samples": len(failed), **self.staleness_metrics(groups, global_steps)}
        # Trajectory rows carry their group's submit step as `global_steps`, like the group row.
        spans = [
            group_span(t, global_steps)
            for members in groups.values()
            for t in members.values()
            if t.get("status") != FAILED
        ]
        metrics["training/off_policy/trajectory_spans/mean"] = sum(spans) / len(spans)
        metrics["training/off_policy/trajectory_spans/max"] = float(max(spans))
        return meta, metrics

    def _split_informative(
        self, partition_id: str, groups: dict[str, dict[str, dict]]
    ) -> tuple[dict[str, dict[str, dict]], list[str]]:
        """DAPO dynamic sampling: keep groups whose metric varies across their trajectories."""
        if not self.filter_groups.enable:
            return groups, []
        values = self._metric_values(partition_id, groups)
        filtered = [g for g in groups if len(values[g]) > 1 and statistics.pvariance(values[g]) == 0.0]
        return {g: m for g, m in groups.items() if g not in filtered}, filtered

    def _metric_values(self, partition_id: str, groups: dict[str, dict[str, dict]]) -> dict[str, list[float]]:
        metric = self.filter_groups.metric or "score"
        keys = [k for members in groups.values() for k, t in members.items() if t.get("status") != FAILED]
        rows = self.store.get(partition_id, keys, fields=["reward_score", "reward_extra"])
        scores, extras = rows["reward_score"].tolist(), rows["reward_extra"].tolist()
        values: dict[str, list[float]] = defaultdict(list)
        for key, score, extra in zip(keys, scores, extras):
            if metric in ("score", "seq_reward", "seq_final_reward"):
                value = score
            elif metric in (extra or {}):
                value = extra[metric]
            else:
                raise ConfigError(
                    f"algorithm.filter_groups.metric={metric!r} is neither 'score' nor a key the reward "
                    f"function returns (it returned {sorted(extra or {})}); pick one of those"
                )
            if isinstance(value, str):
                raise ConfigError(
                    f"algorithm.filter_groups.metric={metric!r}: the reward function returns text there "
                    f"({value!r}), not a number whose variance can be taken; pick a numeric key"
                )
            values[parse_key(key).uid].append(float(value))
        return values

    def _stop_if_everything_fails(self, evicted: Counter, accepted: dict, batch_size: int) -> None:
        if evicted[FAILED] >= batch_size and not accepted:
            raise AllSamplesFailedError(
                f"{evicted[FAILED]} prompt groups in a row failed in every session; "
                "check the agent loop and the reward function (the rows' `error` tags)"
            )

    def _stop_if_filtering_exhausted(self, evicted: Counter, batch_size: int) -> None:
        limit = int(self.filter_groups.max_num_gen_batches)
        if limit > 0 and evicted[FILTERED] >= limit * batch_size:
            raise FilterGroupsExhaustedError(
                f"filter_groups discarded {evicted[FILTERED]} groups (>= max_num_gen_batches={limit} batches) without "
                "filling a batch: the task is too easy or too hard for the policy; raise "
                "algorithm.filter_groups.max_num_gen_batches (0 = no limit) or check the reward"
            )

    @staticmethod
    def _eviction_metrics(evicted: Counter) -> dict[str, float]:
        prefix = "training/off_policy/evicted_samples"
        return {
            prefix: float(sum(evicted.values())),
            **{f"{prefix}/{reason}": float(evicted[reason]) for reason in (STALE, FAILED, FILTERED)},
        }
