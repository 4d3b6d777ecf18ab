"""`naive`: colocated weight copy. Replicas share the trainer's machine; the weights are copied to CPU
bucket by bucket and handed to the replicas together (by reference in-process, as one object in
Ray's shared-memory store for replica actors), so a sync holds one CPU copy of the model. No
process group is needed, which is also why it cannot serve a separate rollout pool
(`separate_async` refuses it at start-up); `gloo`/`nccl` stream bucket by bucket instead."""

from __future__ import annotations

import time
from typing import Any, Iterable

import torch

from core_v1.checkpoint_engine.base import CheckpointEngine, bucket_tensors, register_checkpoint_backend


@register_checkpoint_backend("naive")
class NaiveCheckpointEngine(CheckpointEngine):
    async def sync(self, named_tensors: Iterable[tuple[str, torch.Tensor]], rollout_client: Any, version: int) -> dict:
        start, total = time.perf_counter(), 0
        buckets = []
        for bucket in bucket_tensors(named_tensors, self.bucket_bytes):
            cpu_bucket = [(name, t.detach().to("cpu", copy=True)) for name, t in bucket]
            total += sum(t.numel() * t.element_size() for _, t in cpu_bucket)
            buckets.append(cpu_bucket)
        await rollout_client.update_weights(buckets, version)
        return {"weight_sync/bytes": total, "timing_s/weight_sync": time.perf_counter() - start}
