"""`naive`: colocated weight copy. Replicas share the trainer's machine; the weights are copied to CPU
bucket by bucket and handed to the replicas together (by reference in-process, as one object in
Ray's shared-memory store for replica actors), so a sync holds one CPU copy of the model; it is
kept until the next sync, for a replica that restarts meanwhile (`resend`). No
process group is needed, which is also why it cannot serve a separate rollout pool
(`separate_async` refuses it at start-up); `gloo`/`nccl` stream bucket by bucket instead."""

from __future__ import annotations

import time
from typing import Any, Iterable, Optional

import torch

from core_v1.checkpoint_engine.base import CheckpointEngine, bucket_tensors, register_checkpoint_backend


@register_checkpoint_backend("naive")
class NaiveCheckpointEngine(CheckpointEngine):
    def __init__(self, config: Any):
        super().__init__(config)
        self._sent: Optional[tuple[Any, int]] = None  # (what the replicas were sent, its version)

    async def sync(self, named_tensors: Iterable[tuple[str, torch.Tensor]], rollout_client: Any, version: int) -> dict:
        start, total = time.perf_counter(), 0
        self._sent = None  # one CPU copy at a time: the previous version's goes before this one is made
        buckets = []
        for bucket in bucket_tensors(named_tensors, self.bucket_bytes):
            cpu_bucket = [(name, t.detach().to("cpu", copy=True)) for name, t in bucket]
            total += sum(t.numel() * t.element_size() for _, t in cpu_bucket)
            buckets.append(cpu_bucket)
        sent = await rollout_client.update_weights(buckets, version)
        if rollout_client.restartable:  # kept only for replicas that can restart
            self._sent = (sent, version)
        return {"weight_sync/bytes": total, "timing_s/weight_sync": time.perf_counter() - start}

    async def resend(self, rollout_client: Any, index: int) -> bool:
        if self._sent is None:
            return False
        payload, version = self._sent
        await rollout_client.call_one(index, "update_weights", payload, version)
        return True

    def close(self) -> None:
        self._sent = None
