"""The driver's own rank takes its shard straight from the batch (`RankWorker.run_in_process`); it
must see and return exactly what the store path (`RankWorker.run`, as a rank actor does) gives."""

from __future__ import annotations

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from core_v1.transfer_store import make_transfer_store
from core_v1.workers.group import WorkerGroup
from core_v1.workers.rank import INPUT_PARTITION, OUTPUT_PARTITION, RankWorker
from core_v1.workers.sharding import Shard


class _Role:
    """Records the batch it was given and returns per-row outputs that depend on row order."""

    def __init__(self):
        self.seen: list[TensorDict] = []

    def compute(self, batch: TensorDict, scale: float = 1.0):
        self.seen.append(batch)
        batch["scratch"] = torch.zeros(len(batch))  # an engine's own key must not reach the caller
        logp = batch["response_mask"].float() * scale + torch.arange(len(batch))[:, None]
        return logp, None

    def update(self, batch: TensorDict) -> dict:
        self.seen.append(batch)
        return {"loss": float(batch["response_mask"].sum())}


def _batch(rows: int = 5) -> TensorDict:
    return TensorDict({
        "response_mask": torch.arange(rows * 3).reshape(rows, 3) % 2,
        "uid": NonTensorStack(*(NonTensorData(f"u{row}") for row in range(rows)), batch_size=[rows]),
        "extra": NonTensorStack(*(NonTensorData({"row": row}) for row in range(rows)), batch_size=[rows]),
    }, batch_size=[rows])


def _rank() -> RankWorker:
    worker = RankWorker(config=None, store=make_transfer_store("local"), rank=0, world_size=1, device_type="cpu")
    worker.roles = {"actor": _Role()}
    return worker


def _through_store(worker: RankWorker, method: str, shard: Shard, batch: TensorDict, outputs, train: bool, kwargs):
    keys = WorkerGroup._publish(worker, batch)  # the same rows a group publishes (uses only .store)
    metrics = worker.run("actor", method, shard, keys, outputs, train, kwargs)
    collected = {}
    if worker.store.list(OUTPUT_PARTITION):
        rows = worker.store.get(OUTPUT_PARTITION, keys)
        worker.store.consume(OUTPUT_PARTITION, keys)
        collected = {name: rows[name] for name in outputs if name in rows.keys()}
    worker.store.consume(INPUT_PARTITION, keys)
    return collected, metrics


def test_the_in_process_rank_returns_what_the_store_path_returns():
    shard = Shard(rows=(3, 0, 4, 1, 2, 2), padding=(False, False, False, False, False, True))
    batch, outputs = _batch(), ("old_log_probs", "entropys")
    via_store, store_metrics = _through_store(_rank(), "compute", shard, batch, outputs, False, {"scale": 2.0})
    worker = _rank()
    direct, metrics = worker.run_in_process("actor", "compute", shard, batch, outputs, False, {"scale": 2.0})
    assert direct.keys() == via_store.keys() == {"old_log_probs"}
    assert torch.equal(direct["old_log_probs"], via_store["old_log_probs"])
    assert metrics == store_metrics == {}
    seen = worker.roles["actor"].seen[0]
    assert seen["uid"].tolist() == ["u3", "u0", "u4", "u1", "u2", "u2"]
    assert "scratch" not in batch.keys()


def test_the_in_process_rank_masks_padding_rows_in_updates_and_leaves_the_batch_alone():
    shard = Shard(rows=(1, 0, 0), padding=(False, False, True))
    batch = _batch(2)
    before = batch["response_mask"].clone()
    worker = _rank()
    _, metrics = worker.run_in_process("actor", "update", shard, batch, (), True, {})
    _, store_metrics = _through_store(_rank(), "update", shard, batch, (), True, {})
    assert metrics == store_metrics == {"loss": float(before[[1, 0]].sum())}
    assert torch.equal(batch["response_mask"], before)
    seen = worker.roles["actor"].seen[0]
    assert torch.equal(seen["response_mask"][2], torch.zeros(3, dtype=before.dtype))
