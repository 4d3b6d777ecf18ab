"""The in-process TransferStore: put/get/list/consume/evict, counters, waits, errors, save/load."""

import asyncio
import pickle
import threading
import time
import uuid

import pytest
import torch
from tensordict import NonTensorStack

from core_v1.transfer_store import (
    AccountingError,
    DuplicateKeyError,
    FieldAssemblyError,
    InvalidKeyError,
    InvalidRowError,
    MissingFieldError,
    MissingKeyError,
    PartitionStats,
    StoreStateError,
    StoreTimeoutError,
    TransferStore,
    group_key,
    make_transfer_store,
    pad_jagged,
    trajectory_key,
)


def trajectory_rows(uid, lengths):
    """One row per session: token fields of the given lengths plus object fields."""
    rows, tags = {}, {}
    for session_id, length in enumerate(lengths):
        key = trajectory_key(uid, session_id)
        rows[key] = {
            "prompt_ids": torch.arange(3) + session_id,
            "response_ids": torch.arange(length) + 100 * session_id,
            "response_logprobs": -torch.rand(length),
            "data_source": "gsm8k",
            "reward_model": {"ground_truth": str(session_id)},
            "raw_prompt": [{"role": "user", "content": f"q{session_id}"}],
            "reward_score": float(session_id),
        }
        tags[key] = {"status": "finished", "response_length": length, "global_steps": session_id % 2}
    return rows, tags


@pytest.fixture
def store():
    return make_transfer_store("local")


def test_put_get_round_trip_with_tensor_and_object_fields(store):
    uid = uuid.uuid4().hex
    rows, tags = trajectory_rows(uid, [4, 2, 5])
    store.put("train", rows, tags)
    keys = list(reversed(list(rows)))  # get honours the caller's order

    batch = store.get("train", keys)
    assert batch.batch_size == torch.Size([3])
    assert batch["prompt_ids"].shape == (3, 3) and not batch["prompt_ids"].is_nested  # same length: stacked
    assert batch["response_ids"].is_nested and batch["response_ids"].layout == torch.jagged
    assert isinstance(batch.get("reward_model"), NonTensorStack)
    for position, key in enumerate(keys):
        assert torch.equal(batch["response_ids"][position], rows[key]["response_ids"])
        assert torch.equal(batch["prompt_ids"][position], rows[key]["prompt_ids"])
        assert batch[position]["reward_model"] == rows[key]["reward_model"]
    assert batch["raw_prompt"] == [rows[key]["raw_prompt"] for key in keys]  # lists stay whole lists
    assert batch["reward_score"] == [rows[key]["reward_score"] for key in keys]

    only = store.get("train", keys[:1], fields=["data_source", "response_ids"])
    assert set(only.keys()) == {"data_source", "response_ids"}


def test_rows_are_copied_in_and_out(store):
    key = trajectory_key("ab12", 0)
    ids, info = torch.arange(4), {"ground_truth": "7"}
    store.put("train", {key: {"response_ids": ids, "reward_model": info}})
    ids[0] = 99
    info["ground_truth"] = "changed by the producer"
    batch = store.get("train", [key])
    assert batch["response_ids"][0, 0] == 0 and batch["reward_model"] == [{"ground_truth": "7"}]
    batch["reward_model"][0]["ground_truth"] = "changed by the consumer"
    assert store.get("train", [key])["reward_model"] == [{"ground_truth": "7"}]


def test_list_filters_by_predicate_or_mapping_and_returns_copies(store):
    uid = uuid.uuid4().hex
    rows, tags = trajectory_rows(uid, [1, 2, 3, 4])
    store.put("train", rows, tags)
    store.put("train", {group_key(uid): {"n": 4}}, {group_key(uid): {"status": "running"}})

    assert set(store.list("train")) == set(rows) | {uid}
    assert set(store.list("train", {"status": "finished"})) == set(rows)
    long_rows = store.list("train", lambda t: t.get("response_length", 0) >= 3)
    assert sorted(t["response_length"] for t in long_rows.values()) == [3, 4]

    snapshot = store.list("train")
    snapshot[uid]["status"] = "failed"  # a caller's copy, not the store's tags
    assert store.list("train")[uid] == {"status": "running"}
    assert store.list("val") == {}  # any partition name; an unused one is empty


def test_partitions_are_independent(store):
    store.put("train", {"aa": {"x": 1}})
    store.put("val", {"aa": {"x": 2}})
    assert store.get("val", ["aa"])["x"] == [2]
    store.consume("train", ["aa"])
    assert store.list("val") == {"aa": {}}
    assert store.stats("train") == PartitionStats("train", put=1, consumed=1)
    assert store.stats("val") == PartitionStats("val", put=1, live=1)


def test_duplicate_key_is_an_error_unless_overwrite_and_counted_once(store):
    key = trajectory_key("abc", 0)
    store.put("train", {key: {"x": torch.ones(2)}}, {key: {"status": "running"}})
    with pytest.raises(DuplicateKeyError, match="already live.*overwrite=True"):
        store.put("train", {key: {"x": torch.zeros(2)}, trajectory_key("abc", 1): {"x": torch.zeros(2)}})
    assert store.list("train") == {key: {"status": "running"}}  # all or nothing: the new key was not put either

    store.put("train", {key: {"x": torch.zeros(3)}}, {key: {"status": "finished"}}, overwrite=True)
    assert torch.equal(store.get("train", [key])["x"][0], torch.zeros(3))
    assert store.list("train")[key] == {"status": "finished"}
    assert store.stats("train") == PartitionStats("train", put=1, live=1, overwritten=1)
    store.check_accounting()


def test_consume_evict_and_counters(store):
    uid = uuid.uuid4().hex
    rows, tags = trajectory_rows(uid, [1] * 6)
    keys = list(rows)
    store.put("train", rows, tags)
    store.consume("train", keys[:2])
    store.evict("train", keys[2:3], reason="stale")
    store.evict("train", keys[3:4], reason="failed")
    with pytest.raises(AccountingError, match="still live"):
        store.check_accounting("train", require_drained=True)
    store.evict("train", keys[4:], reason="end_of_run")

    stats = store.stats("train")
    assert stats == PartitionStats("train", put=6, consumed=2, evicted={"stale": 1, "failed": 1, "end_of_run": 2})
    assert stats.balanced and stats.evicted_total == 4
    store.check_accounting(require_drained=True)


def test_removing_a_row_twice_or_a_missing_row_is_an_error(store):
    store.put("train", {"aa": {"x": 1}, "bb": {"x": 2}})
    store.consume("train", ["aa"])
    with pytest.raises(MissingKeyError, match="not live"):
        store.consume("train", ["aa"])
    with pytest.raises(MissingKeyError, match="not live"):
        store.evict("train", ["bb", "aa"], reason="stale")  # all or nothing: bb stays
    with pytest.raises(DuplicateKeyError, match="more than once"):
        store.consume("train", ["bb", "bb"])
    with pytest.raises(MissingKeyError):
        store.get("train", ["aa"])
    assert list(store.list("train")) == ["bb"]
    assert store.stats("train") == PartitionStats("train", put=2, consumed=1, live=1)


def test_bad_input_gets_a_one_line_error(store):
    with pytest.raises(InvalidKeyError, match="uuid4"):
        store.put("train", {"not-a-hex-uid": {"x": 1}})
    with pytest.raises(InvalidRowError, match="unknown status 'done'"):
        store.put("train", {"aa": {"x": 1}}, {"aa": {"status": "done"}})
    with pytest.raises(InvalidRowError, match="tags hold numbers"):
        store.put("train", {"aa": {"x": 1}}, {"aa": {"lengths": [1, 2]}})
    with pytest.raises(InvalidRowError, match="not being put"):
        store.put("train", {"aa": {"x": 1}}, {"bb": {"status": "finished"}})
    with pytest.raises(InvalidRowError, match="cannot be pickled"):
        store.put("train", {"aa": {"lock": threading.Lock()}})
    with pytest.raises(ValueError, match="non-empty reason"):
        store.evict("train", [], reason="")
    with pytest.raises(TypeError, match="single string"):
        store.consume("train", "aa")
    with pytest.raises(ValueError, match="partition name"):
        store.list("")
    assert store.stats("train") == PartitionStats("train")  # nothing half-written


def test_get_reports_missing_fields_and_unbatchable_fields(store):
    store.put("train", {"aa": {"ids": torch.ones(2), "obj": 1}, "bb": {"ids": torch.ones(3, dtype=torch.long)}})
    with pytest.raises(MissingFieldError, match="row 'bb' has no field 'obj'"):
        store.get("train", ["aa", "bb"])
    with pytest.raises(FieldAssemblyError, match="different dtypes"):
        store.get("train", ["aa", "bb"], fields=["ids"])
    store.put("train", {"cc": {"ids": 5}, "dd": {"ids": torch.ones(2, 3)}, "ee": {"ids": torch.ones(3, 2)}})
    with pytest.raises(FieldAssemblyError, match="tensors in some rows"):
        store.get("train", ["aa", "cc"], fields=["ids"])
    with pytest.raises(FieldAssemblyError, match="only the first dimension may vary"):
        store.get("train", ["dd", "ee"], fields=["ids"])
    assert store.get("train", []).batch_size == torch.Size([0])


def test_wait_for_wakes_on_a_put_from_another_thread(store):
    key = trajectory_key("abc", 0)

    def producer():
        time.sleep(0.2)
        store.put("train", {"abc": {"n": 1}}, {"abc": {"status": "running"}})  # wakes the waiter, still falsy
        time.sleep(0.1)
        store.put("train", {key: {"x": 1}}, {key: {"status": "finished"}})

    thread = threading.Thread(target=producer)
    started = time.monotonic()
    thread.start()
    finished = store.wait_for(
        "train", lambda rows: [k for k, t in rows.items() if t["status"] == "finished"], timeout=10
    )
    thread.join()
    assert finished == [key]
    assert 0.25 <= time.monotonic() - started < 5


def test_wait_for_timeout_names_the_partition(store):
    store.put("train", {"aa": {"x": 1}}, {"aa": {"status": "running"}})
    started = time.monotonic()
    with pytest.raises(StoreTimeoutError, match=r"partition 'train'.*1 live rows \(1 running\)"):
        store.wait_for("train", lambda rows: len(rows) >= 2, timeout=0.2)
    assert 0.2 <= time.monotonic() - started < 2
    assert store.wait_for("train", lambda rows: len(rows), timeout=0) == 1  # already true: no wait


def test_aput_and_await_rows_across_event_loops(store):
    """Producers on one event loop thread, the waiter on another: await_rows wakes without polling."""
    uid = uuid.uuid4().hex
    keys = [trajectory_key(uid, s) for s in range(4)]

    async def produce():
        for key in keys:
            await asyncio.sleep(0.02)
            await store.aput("train", {key: {"ids": torch.arange(2)}}, {key: {"status": "finished"}})

    async def consume():
        ready = await store.await_rows(
            "train",
            lambda rows: sorted(rows) if sum(t["status"] == "finished" for t in rows.values()) == 4 else None,
            timeout=10,
        )
        return store.get("train", ready)

    producer = threading.Thread(target=lambda: asyncio.run(produce()))
    producer.start()
    batch = asyncio.run(consume())
    producer.join()
    assert batch.batch_size == torch.Size([4])
    assert store.stats("train") == PartitionStats("train", put=4, live=4)


def test_blocking_wait_inside_an_event_loop_is_refused(store):
    async def misuse():
        assert store.wait_for("train", lambda rows: "ready", timeout=5) == "ready"  # satisfied: no wait needed
        with pytest.raises(StoreStateError, match="await_rows"):
            store.wait_for("train", lambda rows: rows, timeout=5)

    asyncio.run(misuse())


def test_await_rows_timeout_and_cancellation_leave_no_waiter(store):
    async def scenario():
        with pytest.raises(StoreTimeoutError, match="partition 'val'"):
            await store.await_rows("val", lambda rows: rows, timeout=0.1)
        task = asyncio.ensure_future(store.await_rows("val", lambda rows: rows))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert store._partitions["val"].async_waiters == set()


def test_save_load_round_trip_keeps_rows_tags_and_counters(store, tmp_path):
    uid = uuid.uuid4().hex
    rows, tags = trajectory_rows(uid, [3, 1, 4])
    store.put("train", rows, tags)
    store.put("val", {group_key(uid): {"n": 3}}, {group_key(uid): {"status": "running"}})
    keys = list(rows)
    store.consume("train", keys[:1])
    store.evict("val", [uid], reason="validated")
    path = tmp_path / "ckpt" / "transfer_store.pt"
    store.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["transfer_store.pt"]  # no temp file left behind

    restored = TransferStore()
    restored.load(path)
    assert restored.stats("train") == store.stats("train")
    assert restored.stats("val") == PartitionStats("val", put=1, evicted={"validated": 1})
    assert restored.list("train") == store.list("train")
    original, loaded = store.get("train", keys[1:]), restored.get("train", keys[1:])
    assert torch.equal(pad_jagged(original["response_ids"])[0], pad_jagged(loaded["response_ids"])[0])
    assert loaded["reward_model"] == original["reward_model"]
    restored.consume("train", keys[1:])
    restored.check_accounting(require_drained=True)

    with pytest.raises(StoreStateError, match="fresh store"):
        store.load(path)


def test_load_rejects_other_files_and_unbalanced_counters(tmp_path):
    other = tmp_path / "other.pt"
    torch.save({"weights": torch.ones(1)}, other)
    with pytest.raises(StoreStateError, match="not a transfer-store save file"):
        TransferStore().load(other)

    store = TransferStore()
    store.put("train", {"aa": {"x": 1}})
    path = tmp_path / "store.pt"
    store.save(path)
    state = torch.load(path, weights_only=False)
    state["partitions"]["train"]["put"] = 2  # a row that vanished without being consumed or evicted
    torch.save(state, path)
    with pytest.raises(AccountingError, match="put=2 consumed=0 evicted=0.*live=1"):
        TransferStore().load(path)


def test_in_process_store_refuses_to_be_pickled(store):
    with pytest.raises(TypeError, match="backend='ray'"):
        pickle.dumps(store)
    with pytest.raises(ValueError, match="unknown transfer-store backend 'redis'"):
        make_transfer_store("redis")
