"""The generation pipeline's bookkeeping: submissions, the in-flight count from its own ledger,
refills of evicted groups, and the accounting proof against a real store. The agent-loop manager
is a stand-in that only puts the group rows (generation itself is tested elsewhere)."""

from __future__ import annotations

from collections import Counter

import pytest

from core_v1.trainer.generation import GenerationPipeline
from core_v1.trainer.prompt_feed import PromptFeed
from core_v1.transfer_store import AccountingError, make_transfer_store


class _Sampler:
    """Batches of 4 numbered prompts, as the epoch sampler hands them out."""

    def __init__(self):
        self.next = 0

    def next_batch(self) -> list[dict]:
        rows = [{"prompt": f"p{self.next + i}"} for i in range(4)]
        self.next += 4
        return rows

    def state_dict(self) -> dict:
        return {"next": self.next}

    def load_state_dict(self, state: dict) -> None:
        self.next = state["next"]


class _GroupRowsOnly:
    """Puts a group row per prompt, as AgentLoopManager.submit does before generating."""

    def __init__(self, store):
        self.store, self.submitted, self.prompts = store, 0, []

    def submit(self, partition: str, rows: list[dict], global_steps: int) -> list[str]:
        uids = [f"{self.submitted + i:x}" for i in range(len(rows))]
        self.store.put(
            partition,
            {uid: {"row": row} for uid, row in zip(uids, rows)},
            {uid: {"status": "running", "n": 1, "global_steps": global_steps} for uid in uids},
        )
        self.submitted += len(rows)
        self.prompts += [row["prompt"] for row in rows]
        return uids


def _pipeline():
    store = make_transfer_store("local")
    manager = _GroupRowsOnly(store)
    return GenerationPipeline(manager, PromptFeed(_Sampler()), store), manager, store


def test_top_up_counts_in_flight_from_the_ledger_and_refills_replace_evictions():
    pipeline, manager, store = _pipeline()
    assert len(pipeline.top_up(8, global_steps=0)) == 8
    assert pipeline.top_up(8, global_steps=1) == []  # already 8 in flight
    trained = sorted(store.list("train"))[:3]
    store.consume("train", trained)
    pipeline.record_trained(3)
    evicted = sorted(store.list("train"))[:2]
    store.evict("train", evicted, reason="stale")
    refills = pipeline.record_evicted(Counter(stale=2), global_steps=1)
    assert len(refills) == 2 and pipeline.in_flight == 5
    assert pipeline.accounting() == {
        "training/accounting/submitted_groups": 10.0,
        "training/accounting/trained_groups": 3.0,
        "training/accounting/evicted_groups": 2.0,
        "training/accounting/in_flight_groups": 5.0,
    }
    assert len(pipeline.top_up(8, global_steps=2)) == 3
    assert manager.prompts == [f"p{i}" for i in range(13)]  # the feed's order, nothing skipped


def test_a_group_taken_without_a_report_fails_the_accounting_with_the_fix():
    pipeline, _, store = _pipeline()
    pipeline.submit(4, global_steps=0)
    store.consume("train", sorted(store.list("train"))[:1])  # a sampler that does not report
    with pytest.raises(AccountingError, match="report_trained"):
        pipeline.accounting()


def test_state_round_trips_through_a_checkpoint():
    pipeline, manager, _ = _pipeline()
    pipeline.submit(6, global_steps=0)
    pipeline.record_trained(4)
    restored, restored_manager, _ = _pipeline()
    restored.load_state_dict(pipeline.state_dict())
    assert restored_manager.submitted == 6 and restored.in_flight == 2
    restored.submit(2, global_steps=1)
    pipeline.submit(2, global_steps=1)
    assert restored_manager.prompts == manager.prompts[6:]  # the leftover prompts came back too
