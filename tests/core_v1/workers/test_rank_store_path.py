"""A rank's part of a role call (`RankWorker.run`): it reads its shard's rows from the store, pads
them itself, and writes its outputs back onto the same rows, trimmed to each row's response; the
one rank of a one-rank run, in the driver, does exactly this too."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from core_v1.batch.meta import summary_columns
from core_v1.transfer_store import make_transfer_store, trajectory_key
from core_v1.workers.rank import RankTask, RankWorker

PROMPTS = [[5, 6], [7], [8, 9, 10]]
RESPONSES = [[1, 2, 3], [4], [5, 6]]
MASKS = [[1, 0, 1], [1], [1, 1]]


class _Role:
    """Records the batch it was given; returns per-token outputs that depend on the row's tokens."""

    def __init__(self):
        self.seen: list[TensorDict] = []

    def compute(self, batch: TensorDict, scale: float = 1.0):
        self.seen.append(batch)
        return batch["responses"].float() * scale, None

    def update(self, batch: TensorDict) -> dict:
        self.seen.append(batch)
        return {"loss": float((batch["advantages"] * batch["response_mask"]).sum())}


def _rank_with_rows() -> tuple[RankWorker, list[str]]:
    store = make_transfer_store("local")
    keys = [trajectory_key("ab" * 8, session) for session in range(3)]
    store.put(
        "step",
        {
            key: {"prompt_ids": torch.tensor(p), "response_ids": torch.tensor(r), "response_mask": torch.tensor(m)}
            for key, p, r, m in zip(keys, PROMPTS, RESPONSES, MASKS)
        },
    )
    worker = RankWorker(config=None, store=store, rank=0, world_size=1, device_type="cpu")
    worker.roles = {"actor": _Role()}
    return worker, keys


def test_a_rank_reads_its_rows_in_shard_order_and_writes_each_output_onto_its_row():
    worker, keys = _rank_with_rows()
    shard_keys = [keys[2], keys[0], keys[0]]  # the last is a padding row
    task = RankTask(
        "actor", "compute", "step", shard_keys, (False, False, True), outputs=("old_log_probs", "x"), pad_token_id=0
    )
    metrics, summaries = worker.run(task, {"scale": 2.0})
    seen = worker.roles["actor"].seen[0]
    assert seen["responses"].tolist() == [[5, 6, 0], [1, 2, 3], [1, 2, 3]]
    assert seen["prompts"].tolist() == [[8, 9, 10], [0, 5, 6], [0, 5, 6]]  # left-padded by the rank
    stored = worker.store.get("step", [keys[0], keys[2]], fields=["old_log_probs"])["old_log_probs"]
    assert stored[0].tolist() == [2.0, 4.0, 6.0] and stored[1].tolist() == [10.0, 12.0]  # trimmed to the response
    total, high, low = summary_columns("old_log_probs")
    assert summaries["model_tokens"] == [2, 2, 2]
    assert summaries[total][:2] == [22.0, 8.0] and summaries[high][:2] == [12.0, 6.0]
    assert summaries[low][:2] == [10.0, 2.0] and metrics == {}


def test_a_row_a_rank_did_not_read_gets_no_output():
    worker, keys = _rank_with_rows()
    worker.run(RankTask("actor", "compute", "step", [keys[1]], (False,), outputs=("old_log_probs",)), {})
    assert worker.store.get("step", [keys[1]], fields=["old_log_probs"])["old_log_probs"].tolist() == [[4.0]]
    try:
        worker.store.get("step", [keys[0]], fields=["old_log_probs"])
    except Exception as error:
        assert "old_log_probs" in str(error)
    else:
        raise AssertionError("row 0 was not this rank's: it must not hold an output")


def test_updates_spread_per_row_scalars_over_the_response_and_mask_padding_rows():
    worker, keys = _rank_with_rows()
    task = RankTask(
        "actor",
        "update",
        "step",
        [keys[0], keys[2], keys[2]],
        (False, False, True),
        per_row={"advantages": [1.0, -2.0, -2.0]},
        train=True,
    )
    metrics, _ = worker.run(task, {})
    seen = worker.roles["actor"].seen[0]
    assert seen["advantages"].tolist() == [[1.0, 0.0, 1.0], [-2.0, -2.0, 0.0], [-2.0, -2.0, 0.0]]
    assert seen["response_mask"][2].tolist() == [0, 0, 0]  # a padding row adds nothing to a loss
    assert metrics == {"loss": 1.0 + 1.0 - 4.0}
