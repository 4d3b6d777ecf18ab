"""Trajectories finishing together share one store put; a row that cannot be stored fails alone."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import torch

from core_v1.agent_loop.worker import AgentLoopWorker, _CoalescedPuts
from core_v1.transfer_store import TransferStore


class _Worker:
    """The two things `_CoalescedPuts` uses from its worker: the store, and the failed-row builder."""

    _failed = AgentLoopWorker._failed
    _passthrough_columns = AgentLoopWorker._passthrough_columns
    config = SimpleNamespace(data=SimpleNamespace(image_key="images", video_key="videos"))

    def __init__(self):
        self.store = TransferStore()
        self.puts = 0
        real_put = self.store.aput

        async def counting_put(*args, **kwargs):
            self.puts += 1
            return await real_put(*args, **kwargs)

        self.store.aput = counting_put


def _finish(puts: _CoalescedPuts, session_id: int, value):
    session = {"uid": "ab12", "session_id": session_id, "global_steps": 3}
    key = f"ab12_{session_id}_0"
    return puts.put(
        "train", session, {key: {"ids": torch.tensor([session_id]), "extra": value}}, {key: {"status": "finished"}}
    )


def test_sessions_finishing_together_share_one_put():
    worker = _Worker()
    puts = _CoalescedPuts(worker)

    async def finish_all():
        await asyncio.gather(*(_finish(puts, i, i) for i in range(16)))

    asyncio.run(finish_all())
    assert worker.puts == 1
    assert len(worker.store.list("train", where={"status": "finished"})) == 16


def test_an_unstorable_row_fails_alone_and_nothing_is_lost():
    worker = _Worker()
    puts = _CoalescedPuts(worker)

    async def finish_all():
        await asyncio.gather(*(_finish(puts, i, threading.Lock() if i == 2 else i) for i in range(5)))

    asyncio.run(finish_all())
    tags = worker.store.list("train")
    assert len(tags) == 5
    assert tags["ab12_2_0"]["status"] == "failed" and "cannot be pickled" in tags["ab12_2_0"]["error"]
    assert all(t["status"] == "finished" for k, t in tags.items() if k != "ab12_2_0")


def test_recorder_recovers_log_probs_a_loop_did_not_return():
    from core_v1.agent_loop import AgentLoopOutput
    from core_v1.agent_loop.worker import RecordingClient

    recorder = RecordingClient(client=None, base_seed=None)
    recorder.generated = [([5, 6], [-0.1, -0.2]), ([9], [-0.3])]
    two_turns = AgentLoopOutput(prompt_ids=[1], response_ids=[5, 6, 7, 7, 9], response_mask=[1, 1, 0, 0, 1])
    assert recorder.logprobs_for(two_turns) == [-0.1, -0.2, 0.0, 0.0, -0.3]
    edited = AgentLoopOutput(prompt_ids=[1], response_ids=[5, 9], response_mask=[1, 1])
    assert recorder.logprobs_for(edited) is None  # tokens do not line up: do not guess


def test_sessions_finishing_while_a_put_is_in_flight_go_together_in_the_next():
    worker = _Worker()
    counting_put = worker.store.aput
    sizes = []

    async def slow_put(partition, rows, tags):
        sizes.append(len(rows))
        await asyncio.sleep(0.05)  # the round trip to a store actor
        return await counting_put(partition, rows, tags)

    worker.store.aput = slow_put
    puts = _CoalescedPuts(worker)

    async def finish_one_per_turn():
        async def finish_later(session_id):
            for _ in range(session_id):
                await asyncio.sleep(0)  # each session finishes one event-loop turn after the previous
            await _finish(puts, session_id, session_id)

        await asyncio.gather(*(finish_later(i) for i in range(16)))

    asyncio.run(finish_one_per_turn())
    assert len(sizes) == 2 and sizes[0] <= 2, "the first put goes at once; the rest wait for it and travel together"
    assert worker.puts == 2 and len(worker.store.list("train", where={"status": "finished"})) == 16
