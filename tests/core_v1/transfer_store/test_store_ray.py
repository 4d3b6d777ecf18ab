"""The Ray actor backend: same flow as in-process, errors unwrapped, and waits across processes."""

import asyncio
import pickle
import sys
import threading
import time
import uuid

import pytest
import ray
import torch

from core_v1.transfer_store import (DuplicateKeyError, MissingKeyError, PartitionStats, RayTransferStore,
                                    StoreStateError, StoreTimeoutError, group_key, make_transfer_store, pad_jagged,
                                    trajectory_key)


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # Predicates defined here travel to the actor by value: Ray's workers cannot import a test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    ray.shutdown()


@pytest.fixture(scope="module")
def store(ray_cluster):
    """One actor for the module (starting an actor process costs seconds on 2 cores); tests use own partitions."""
    return make_transfer_store("ray")


@pytest.fixture
def partition():
    return f"part-{uuid.uuid4().hex[:8]}"


def finished_keys(rows):
    return sorted(key for key, tags in rows.items() if tags.get("status") == "finished")


def test_basic_flow_through_the_actor(store, partition, tmp_path):
    uid = uuid.uuid4().hex
    lengths = [3, 1, 5]
    keys = [trajectory_key(uid, s) for s in range(len(lengths))]
    responses = [torch.arange(n) + 1 for n in lengths]
    store.put(partition, {key: {"response_ids": ids, "reward_model": {"ground_truth": str(i)}}
                          for i, (key, ids) in enumerate(zip(keys, responses))},
              {key: {"status": "finished", "response_length": n} for key, n in zip(keys, lengths)})
    store.put(partition, {group_key(uid): {"n": 3}}, {group_key(uid): {"status": "finished"}})

    assert store.wait_for(partition, lambda rows: finished_keys(rows) if len(rows) == 4 else None,
                          timeout=10) == sorted(keys + [uid])
    assert set(store.list(partition, lambda tags: tags.get("response_length", 0) > 2)) == {keys[0], keys[2]}

    batch = store.get(partition, keys)
    assert batch["response_ids"].is_nested
    padded, mask = pad_jagged(batch["response_ids"], side="left")
    for row, ids in enumerate(responses):
        assert torch.equal(padded[row][mask[row].bool()], ids)
    assert batch["reward_model"] == [{"ground_truth": "0"}, {"ground_truth": "1"}, {"ground_truth": "2"}]

    store.update_tags(partition, {keys[1]: {"status": "failed"}})
    store.evict(partition, [keys[1]], reason="failed")
    path = tmp_path / "store.pt"
    store.save(path)  # written by the actor; same machine here
    store.consume(partition, [keys[0], keys[2], uid])
    assert store.stats(partition) == PartitionStats(partition, put=4, consumed=3, evicted={"failed": 1})
    store.check_accounting(partition, require_drained=True)

    restored = make_transfer_store("ray")
    restored.load(path)
    assert restored.stats(partition) == PartitionStats(partition, put=4, evicted={"failed": 1}, live=3)
    assert torch.equal(restored.get(partition, [keys[2]])["response_ids"][0], responses[2])
    restored.consume(partition, [keys[0], keys[2], uid])
    restored.check_accounting(require_drained=True)


def test_errors_come_back_unwrapped_with_their_message(store, partition):
    store.put(partition, {"aa": {"x": 1}})
    with pytest.raises(DuplicateKeyError, match="already live") as raised:
        store.put(partition, {"aa": {"x": 2}})
    assert type(raised.value) is DuplicateKeyError  # not a RayTaskError subclass with a remote traceback
    with pytest.raises(MissingKeyError, match="not live"):
        store.consume(partition, ["bb"])
    with pytest.raises(StoreTimeoutError, match=f"partition '{partition}'"):
        store.wait_for(partition, lambda rows: len(rows) > 1, timeout=0.2)


def test_a_long_wait_does_not_block_puts_from_another_thread(store, partition):
    def put_later():
        time.sleep(0.3)
        store.put(partition, {"cc": {"x": 1}}, {"cc": {"status": "finished"}})

    thread = threading.Thread(target=put_later)
    thread.start()
    assert store.wait_for(partition, finished_keys, timeout=10) == ["cc"]
    thread.join()


@ray.remote(num_cpus=0)
def answer_in_another_process(store, partition, uid, count):
    """A Ray task (another process) holding the pickled client: waits for the driver's group row, then
    puts that group's trajectories one by one."""
    group = store.wait_for(partition, lambda rows: [key for key in rows if key == uid], timeout=30)
    for session_id in range(count):
        key = trajectory_key(uid, session_id)
        store.put(partition, {key: {"response_ids": torch.arange(session_id + 1)}}, {key: {"status": "finished"}})
        time.sleep(0.05)
    return group


def test_cross_process_wait_and_put(store, partition):
    uid = uuid.uuid4().hex
    answer = answer_in_another_process.remote(store, partition, uid, 4)
    time.sleep(0.2)  # usually the task is waiting by now; the test holds either way
    store.put(partition, {group_key(uid): {"n": 4}}, {group_key(uid): {"status": "running"}})
    trajectories = store.wait_for(partition, lambda rows: finished_keys(rows) if len(rows) == 5 else None, timeout=30)
    assert ray.get(answer) == [uid]
    assert trajectories == sorted(trajectory_key(uid, s) for s in range(4))
    assert store.get(partition, trajectories)["response_ids"].is_nested


def test_async_client_methods(store, partition):
    async def scenario():
        waiting = asyncio.ensure_future(store.await_rows(partition, finished_keys, timeout=10))
        await asyncio.sleep(0.1)
        await store.aput(partition, {"dd": {"score": 1.0}}, {"dd": {"status": "running"}})
        await store.aupdate_tags(partition, {"dd": {"status": "finished"}})
        keys = await waiting
        with pytest.raises(StoreStateError, match="await_rows"):  # a blocking wait would stall this loop
            store.wait_for(partition, finished_keys, timeout=1)
        batch = await store.aget(partition, keys)
        assert await store.alist(partition) == {"dd": {"status": "finished"}}
        await store.aconsume(partition, keys)
        with pytest.raises(MissingKeyError):
            await store.aevict(partition, keys, reason="stale")
        return batch, await store.astats(partition)

    batch, stats = asyncio.run(scenario())
    assert batch["score"] == [1.0]
    assert stats == PartitionStats(partition, put=1, consumed=1)


def test_named_store_can_be_reached_by_name_and_the_client_pickles():
    name = f"store-{uuid.uuid4().hex}"
    created = make_transfer_store("ray", name=name)
    created.put("train", {"ee": {"x": 1}})
    assert list(RayTransferStore.connect(name).list("train")) == ["ee"]
    assert list(pickle.loads(pickle.dumps(created)).list("train")) == ["ee"]
    with pytest.raises(LookupError, match="no transfer-store actor named 'missing'"):
        RayTransferStore.connect("missing")
