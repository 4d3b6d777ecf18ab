"""Accounting under concurrent producers, a consumer and a monitor: nothing lost, nothing twice."""

import asyncio
import collections
import random
import threading
import time
import uuid

import pytest
import torch

from core_v1.transfer_store import TransferStore, trajectory_key

PRODUCERS = 4
GROUPS_PER_PRODUCER = 40
SESSIONS = 4
TOTAL = PRODUCERS * GROUPS_PER_PRODUCER * SESSIONS


def produce(store, seed, put_keys, errors):
    """Put the trajectories of one group after another, each finished or failed (as agent loops do)."""
    rng = random.Random(seed)
    try:
        for _ in range(GROUPS_PER_PRODUCER):
            uid = uuid.uuid4().hex
            keys = [trajectory_key(uid, session_id) for session_id in range(SESSIONS)]
            rows = {key: {"response_ids": torch.arange(rng.randint(1, 8)), "data_source": "test"} for key in keys}
            store.put("train", rows, {key: {"status": rng.choice(["finished", "finished", "failed"])} for key in keys})
            put_keys.extend(keys)
            time.sleep(0.0005)  # let the other threads in between two puts
    except Exception as error:  # surfaced by the main thread
        errors.append(error)


def terminal_rows(rows):
    return {key: tags["status"] for key, tags in rows.items() if tags["status"] in ("finished", "failed")}


def consume_everything(store, consumed, evicted, rounds, errors):
    """Wait for finished/failed rows, train on most, drop failed and every fifth as stale, until all are gone."""
    try:
        handled = 0
        while handled < TOTAL:
            ready = store.wait_for("train", terminal_rows, timeout=20)
            keys = sorted(ready)
            store.get("train", keys, fields=["response_ids", "data_source"])
            failed = [key for key in keys if ready[key] == "failed"]
            stale = [key for i, key in enumerate(keys) if ready[key] == "finished" and i % 5 == 0]
            trained = [key for key in keys if key not in set(failed) | set(stale)]
            store.evict("train", failed, reason="failed")
            store.evict("train", stale, reason="stale")
            store.consume("train", trained)
            evicted["failed"].extend(failed)
            evicted["stale"].extend(stale)
            consumed.extend(trained)
            handled += len(keys)
            rounds.append(len(keys))
    except Exception as error:
        errors.append(error)


def monitor(store, stop, snapshots, errors):
    try:
        while not stop.is_set():
            snapshots.append(store.stats("train"))
            time.sleep(0.001)
    except Exception as error:
        errors.append(error)


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_every_row_is_consumed_or_evicted_exactly_once_under_concurrency():
    store = TransferStore()
    put_keys, consumed, rounds, errors, snapshots = [], [], [], [], []
    evicted = collections.defaultdict(list)
    stop = threading.Event()
    threads = [threading.Thread(target=produce, args=(store, seed, put_keys, errors)) for seed in range(PRODUCERS)]
    threads.append(threading.Thread(target=consume_everything, args=(store, consumed, evicted, rounds, errors)))
    watcher = threading.Thread(target=monitor, args=(store, stop, snapshots, errors))
    watcher.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    stop.set()
    watcher.join()

    assert not errors, errors
    assert len(rounds) > 1, "the consumer never overlapped with the producers"
    removed = consumed + evicted["failed"] + evicted["stale"]
    assert len(put_keys) == len(set(put_keys)) == TOTAL
    assert len(removed) == len(set(removed)) == TOTAL, "a row was removed twice"
    assert set(removed) == set(put_keys), "a row was lost"

    stats = store.stats("train")
    assert (stats.put, stats.consumed, stats.live) == (TOTAL, len(consumed), 0)
    assert dict(stats.evicted) == {reason: len(keys) for reason, keys in evicted.items() if keys}
    store.check_accounting(require_drained=True)
    assert snapshots and all(snapshot.balanced for snapshot in snapshots)  # balanced at every moment observed


def test_async_producers_on_their_own_event_loops_and_a_blocking_consumer():
    """Agent-loop style producers (asyncio tasks on two loop threads) feeding a trainer thread."""
    store = TransferStore()
    per_loop, loops = 30, 2

    async def agent_loops(loop_index):
        async def one_sample(i):
            await asyncio.sleep(random.random() * 0.01)
            key = trajectory_key(uuid.uuid4().hex, i % 3)
            await store.aput(
                "train",
                {key: {"response_ids": torch.ones(i % 5 + 1)}},
                {key: {"status": "finished", "loop": loop_index}},
            )

        await asyncio.gather(*(one_sample(i) for i in range(per_loop)))

    producers = [threading.Thread(target=lambda i=i: asyncio.run(agent_loops(i))) for i in range(loops)]
    for thread in producers:
        thread.start()
    taken = []
    while len(taken) < per_loop * loops:
        batch_keys = store.wait_for("train", lambda rows: sorted(rows)[:16], timeout=20)
        store.get("train", batch_keys)
        store.consume("train", batch_keys)
        taken.extend(batch_keys)
    for thread in producers:
        thread.join()
    assert len(set(taken)) == per_loop * loops
    store.check_accounting(require_drained=True)
