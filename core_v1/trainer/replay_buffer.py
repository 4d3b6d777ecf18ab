"""The replay buffer: how the trainer takes finished trajectories out of the transfer store.

Key schema (see `core_v1.transfer_store`): a prompt group is a row `{uid}` put by the
AgentLoopManager when it submits the group, tagged `status=running`, `n` (sessions expected)
and `global_steps` (the step that submitted it). Each session writes its outputs as rows
`{uid}_{session_id}_{index}` when it finishes, tagged `status=finished` or `status=failed`.

A group is *complete* when rows from all `n` sessions are in. `sample(global_steps,
partition_id, batch_size)` blocks (without polling) until `batch_size` groups are complete,
takes the oldest complete groups first (lowest submit step, then submission order), and:

- consumes the group rows, and moves their finished trajectory rows into the step's partition
  (`STEP_PARTITION`: counted `consumed` here), where the training ranks read and write them,
- evicts failed trajectory rows (counted `evicted/failed`) — the rest of the group still trains;
  a group whose sessions all failed is evicted whole,
- returns the handle on the moved rows (`core_v1.batch.meta.BatchMeta`: keys and per-row scalars,
  no tensors) and metrics,
- and tells the generation pipeline (`core_v1.trainer.generation`) how many groups it trained.

`release(meta)` consumes the step's rows once the step has trained on them.

A custom buffer (`trainer.v1.sampler.custom_sampler`) subclasses `sample` and can filter, reorder
or reweight rows by the handle's columns (`meta.select(rows)`) without reading a tensor; one that
needs a tensor field reads just that field: `store.get(meta.partition, meta.keys, fields=[...])`.

This sync buffer never drops for staleness: in `sync` mode nothing is in flight while the
trainer trains, so every trajectory is on-policy. The async buffer adds staleness bounds.
Subclass it and set `trainer.v1.sampler.custom_sampler.{path,name}` to change sampling.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from typing import Any, Callable, Optional

from core_v1.batch.meta import STEP_PARTITION, BatchMeta, describe_rows
from core_v1.errors import UserError
from core_v1.trainer.generation import TRAIN, GenerationPipeline
from core_v1.transfer_store import RowStatus, parse_key
from core_v1.transfer_store.groups import complete_groups, every_group_complete, oldest_complete_groups  # noqa: F401


class AllSamplesFailedError(UserError, RuntimeError):
    """A whole batch failed (an agent loop or reward function that always raises): stop, do not spin."""


class ReplayBuffer:
    health_check_seconds = 10.0

    def __init__(
        self,
        store: Any,
        config: Any,
        pad_token_id: int,
        wait_timeout: Optional[float] = None,
        health_check: Optional[Callable[[], None]] = None,
        pipeline: Optional[GenerationPipeline] = None,
        **kwargs: Any,
    ):
        self.store = store
        self.pipeline = pipeline  # told what was trained and evicted (None: a buffer used on its own)
        self.config = config
        self.pad_token_id = pad_token_id
        self.wait_timeout = wait_timeout
        self.health_check = health_check  # raises if the generation side died
        self.sampler_kwargs = kwargs

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[BatchMeta, dict]:
        started = time.perf_counter()
        groups = self.wait_for_groups(partition_id, functools.partial(oldest_complete_groups, batch_size=batch_size))
        keys, failed, group_keys = self._split_rows(groups)
        metrics = {"rollout/failed_samples": len(failed), "timing_s/wait_for_batch": time.perf_counter() - started}
        if failed:
            self.store.evict(partition_id, failed, reason="failed")
        if not keys:
            self.store.consume(partition_id, group_keys)
            first_error = next(
                t.get("error") for members in groups.values() for t in members.values() if t.get("error")
            )
            raise AllSamplesFailedError(
                f"every trajectory of {len(group_keys)} prompt groups failed; the first error: {first_error}"
            )
        meta = self.take(partition_id, groups, keys)
        self.store.consume(partition_id, group_keys)
        self.report_trained(partition_id, len(group_keys))
        metrics.update(self.staleness_metrics(groups, global_steps))
        return meta, metrics

    def take(self, partition_id: str, groups: dict[str, dict[str, dict]], keys: list[str]) -> BatchMeta:
        """Move trajectory rows `keys` of `groups` into the step's partition; their handle."""
        self.store.move(partition_id, STEP_PARTITION, keys, wait=False)  # the handle's read carries it
        tags = {key: row_tags for members in groups.values() for key, row_tags in members.items()}
        return describe_rows(self.store, STEP_PARTITION, keys, tags)

    def release(self, meta: BatchMeta) -> None:
        """The step has trained on `meta`'s rows (the handle `sample` returned): they leave the store
        with this thread's next store call (only the step, in this thread, reads that partition)."""
        self.store.consume(meta.partition, list(dict.fromkeys(meta.keys)), wait=False)

    def report_trained(self, partition_id: str, num_groups: int) -> None:
        """Tell the generation pipeline that `num_groups` prompt groups left the store trained."""
        if self.pipeline is not None and partition_id == TRAIN:
            self.pipeline.record_trained(num_groups)

    def report_evicted(self, partition_id: str, groups: Counter, global_steps: int) -> None:
        """Tell the generation pipeline which groups were evicted (reason -> count); it replaces them."""
        if self.pipeline is not None and partition_id == TRAIN:
            self.pipeline.record_evicted(groups, global_steps)

    def wait_for_groups(self, partition_id: str, predicate: Callable) -> Any:
        """Block until `predicate` (module-level, so the Ray store can run it in its own process)
        holds, checking between slices that the generation side is still alive."""
        deadline = None if self.wait_timeout is None else time.monotonic() + self.wait_timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            slice_seconds = (
                self.health_check_seconds if remaining is None else min(remaining, self.health_check_seconds)
            )
            try:
                return self.store.wait_for(partition_id, predicate, timeout=slice_seconds)
            except TimeoutError:
                if self.health_check is not None:
                    self.health_check()
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    @staticmethod
    def _split_rows(groups: dict[str, dict[str, dict]]) -> tuple[list[str], list[str], list[str]]:
        finished, failed = [], []
        for members in groups.values():
            for key in sorted(members, key=lambda k: (parse_key(k).session_id, parse_key(k).index)):
                (failed if members[key].get("status") == RowStatus.FAILED.value else finished).append(key)
        return finished, failed, list(groups)

    @staticmethod
    def staleness_metrics(groups: dict[str, dict[str, dict]], global_steps: int) -> dict[str, float]:
        """How many weight versions old the sampled trajectories are (0 = produced by the current weights)."""
        return trajectory_staleness_metrics(
            [t for members in groups.values() for t in members.values() if t.get("status") != RowStatus.FAILED.value],
            global_steps,
        )


def trajectory_staleness_metrics(trained: list[dict], global_steps: int) -> dict[str, float]:
    """The `training/off_policy/*` staleness metrics of the trajectories trained at `global_steps`,
    from their row tags (`min_global_steps` / `max_global_steps`: the oldest and newest weight
    version that produced them; `response_len`). V1's buffers and the V0 trainer both report these."""
    if not trained:
        return {}
    # Weight version v = the weights after step v; step s trains on-policy on version s - 1.
    staleness = [global_steps - 1 - t.get("min_global_steps", global_steps - 1) for t in trained]
    tokens = [max(int(t.get("response_len", 1)), 1) for t in trained]
    return {
        "training/off_policy/trajectory_staleness/mean": sum(staleness) / len(staleness),
        "training/off_policy/trajectory_staleness/max": float(max(staleness)),
        # Response tokens of trajectories that an older policy than the trained one began.
        "training/off_policy/off_policy_token_fraction": sum(n for n, s in zip(tokens, staleness) if s > 0)
        / sum(tokens),
        # Trajectories whose tokens came from more than one weight version (an update landed mid-way).
        "training/off_policy/mixed_version_fraction": sum(
            t.get("min_global_steps") != t.get("max_global_steps") for t in trained
        )
        / len(trained),
    }
