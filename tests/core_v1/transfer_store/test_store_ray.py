"""The Ray backend: same flow and errors as in-process, waits across processes, payloads through Ray's
object store (every dtype round trips, batch objects are freed with their last row, a dead writer's
rows fail with a clear error), and save files shared with the in-process store."""

import asyncio
import functools
import pickle
import re
import sys
import threading
import time
import uuid

import pytest
import ray
import torch

from core_v1.transfer_store import (
    DuplicateKeyError,
    InvalidKeyError,
    InvalidRowError,
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
from core_v1.transfer_store.groups import oldest_complete_groups


@pytest.fixture(scope="module", autouse=True)
def ray_cluster(ray_runtime):
    # Predicates defined here travel to the actor by value: Ray's workers cannot import a test module.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


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
    store.put(
        partition,
        {
            key: {"response_ids": ids, "reward_model": {"ground_truth": str(i)}}
            for i, (key, ids) in enumerate(zip(keys, responses))
        },
        {key: {"status": "finished", "response_length": n} for key, n in zip(keys, lengths)},
    )
    store.put(partition, {group_key(uid): {"n": 3}}, {group_key(uid): {"status": "finished"}})

    assert store.wait_for(
        partition, lambda rows: finished_keys(rows) if len(rows) == 4 else None, timeout=10
    ) == sorted(keys + [uid])
    assert set(store.list(partition, lambda tags: tags.get("response_length", 0) > 2)) == {keys[0], keys[2]}

    batch = store.get(partition, keys)
    assert batch["response_ids"].is_nested
    padded, mask = pad_jagged(batch["response_ids"], side="left")
    for row, ids in enumerate(responses):
        assert torch.equal(padded[row][mask[row].bool()], ids)
    assert batch["reward_model"] == [{"ground_truth": "0"}, {"ground_truth": "1"}, {"ground_truth": "2"}]

    store.put(partition, {keys[1]: {"response_ids": responses[1]}}, {keys[1]: {"status": "failed"}}, overwrite=True)
    assert store.list(partition, {"status": "failed"}) == {keys[1]: {"status": "failed"}}
    store.evict(partition, [keys[1]], reason="failed")
    path = tmp_path / "store.pt"
    store.save(path)  # written by the actor; same machine here
    store.consume(partition, [keys[0], keys[2], uid])
    assert store.stats(partition) == PartitionStats(partition, put=4, consumed=3, evicted={"failed": 1}, overwritten=1)
    store.check_accounting(partition, require_drained=True)

    for restored in make_transfer_store("ray"), TransferStore():  # one file format for both backends
        restored.load(path)
        assert restored.stats(partition) == PartitionStats(
            partition, put=4, evicted={"failed": 1}, live=3, overwritten=1
        )
        assert torch.equal(restored.get(partition, [keys[2]])["response_ids"][0], responses[2])
        assert restored.get(partition, [keys[0]])["reward_model"] == [{"ground_truth": "0"}]
        restored.consume(partition, [keys[0], keys[2], uid])
        restored.check_accounting(require_drained=True)


def test_a_ray_store_loads_an_in_process_save(partition, tmp_path):
    local = TransferStore()
    local.put(partition, {"aa": {"ids": torch.arange(3), "source": "x"}}, {"aa": {"status": "finished"}})
    local.save(tmp_path / "local.pt")
    remote = make_transfer_store("ray")
    remote.load(tmp_path / "local.pt")
    batch = remote.get(partition, ["aa"])
    assert torch.equal(batch["ids"][0], torch.arange(3)) and batch["source"] == ["x"]
    assert remote.list(partition) == {"aa": {"status": "finished"}}


def test_errors_come_back_unwrapped_with_their_message(store, partition):
    store.put(partition, {"aa": {"x": 1}})
    with pytest.raises(DuplicateKeyError, match="already live") as raised:
        store.put(partition, {"aa": {"x": 2}})
    assert type(raised.value) is DuplicateKeyError  # not a RayTaskError subclass with a remote traceback
    with pytest.raises(MissingKeyError, match="not live"):
        store.consume(partition, ["bb"])
    with pytest.raises(StoreTimeoutError, match=f"partition '{partition}'"):
        store.wait_for(partition, lambda rows: len(rows) > 1, timeout=0.2)
    with pytest.raises(InvalidKeyError, match="uuid4"):
        store.put(partition, {"not-a-hex-uid": {"x": 1}})
    with pytest.raises(InvalidRowError, match="field 'lock' of row 'bb' cannot be pickled"):
        store.put(partition, {"bb": {"lock": threading.Lock()}})
    with pytest.raises(TypeError, match="single string"):
        store.get(partition, "aa")
    assert store.stats(partition) == PartitionStats(partition, put=1, live=1)  # nothing half-written


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


def test_aput_from_an_event_loop_and_blocking_wait_refused_there(store, partition):
    async def agent_loop():
        await store.aput(partition, {"dd": {"score": 1.0}}, {"dd": {"status": "finished"}})
        with pytest.raises(StoreStateError, match="asyncio.to_thread"):  # a blocking wait would stall this loop
            store.wait_for(partition, finished_keys, timeout=1)
        assert await asyncio.to_thread(store.wait_for, partition, finished_keys, 10) == ["dd"]  # the way it names

    asyncio.run(agent_loop())
    assert store.wait_for(partition, finished_keys, timeout=10) == ["dd"]
    assert store.get(partition, ["dd"])["score"] == [1.0]


def test_writes_made_without_waiting_travel_in_order_with_the_thread_s_next_call(store, partition):
    keys = [trajectory_key(uuid.uuid4().hex, session) for session in range(3)]
    store.put(partition, {key: {"response_ids": torch.arange(2)} for key in keys})
    before = [tuple(version) for version in store.row_versions(partition, keys)]
    store.add_columns(partition, keys, [2, 2, 2], {"old_log_probs": torch.ones(3, 2)}, wait=False)
    store.add_columns(
        partition, keys, [2, 2, 2], {"old_log_probs": torch.full((3, 2), 2.0)}, wait=False, overwrite=True
    )
    store.consume(partition, keys[2:], wait=False)
    seen = {}  # another thread's call carries none of this thread's writes
    reader = threading.Thread(target=lambda: seen.update(stats=store.stats(partition)))
    reader.start()
    reader.join()
    assert seen["stats"] == PartitionStats(partition, put=3, live=3)
    batch, versions = store.get_versioned(partition, keys[:2], ["old_log_probs"])
    assert [tuple(version) for version in versions] == [(serial, additions + 2) for serial, additions in before[:2]]
    assert torch.equal(batch["old_log_probs"], torch.full((2, 2), 2.0))  # the writes were done in order
    assert store.stats(partition) == PartitionStats(partition, put=3, consumed=1, live=2)


def test_a_write_made_without_waiting_that_fails_raises_at_the_next_call_and_flush_sends_now(store, partition):
    key = trajectory_key(uuid.uuid4().hex, 0)
    store.put(partition, {key: {"response_ids": torch.arange(2)}})
    store.add_columns(partition, ["ab" * 8 + "_0_0"], [1], {"old_log_probs": torch.ones(1, 1)}, wait=False)
    with pytest.raises(MissingKeyError, match="cannot add fields"):
        store.consume(partition, [key])
    assert store.stats(partition) == PartitionStats(partition, put=1, live=1)  # the call it rode on was not done
    store.consume(partition, [key], wait=False)
    store.flush()
    seen = {}
    reader = threading.Thread(target=lambda: seen.update(stats=store.stats(partition)))
    reader.start()
    reader.join()
    assert seen["stats"] == PartitionStats(partition, put=1, consumed=1)


def test_the_client_pickles_and_reaches_the_same_actor(store, partition):
    store.put(partition, {"ee": {"x": 1}})
    assert list(pickle.loads(pickle.dumps(store)).list(partition)) == ["ee"]


@pytest.mark.parametrize("through", ["actor call", "object store"])
def test_every_dtype_and_shape_round_trips_and_batches_are_private_copies(store, partition, through):
    rows = {
        "a0": {
            "bf16": torch.randn(3, 2).bfloat16(),
            "flag": torch.tensor([True, False]),
            "scalar": torch.tensor(7, dtype=torch.int8),
            "empty": torch.zeros(0, 4),
            "strided": torch.arange(12.0).reshape(3, 4)[:, ::2],
        },
        "a1": {
            "bf16": torch.randn(1, 2).bfloat16(),
            "flag": torch.tensor([False, True]),
            "scalar": torch.tensor(-1, dtype=torch.int8),
            "empty": torch.zeros(0, 4),
            "strided": torch.arange(6.0).reshape(3, 2),
        },
    }
    if through == "object store":  # over the size that travels inline in the actor call
        rows["a0"]["bulk"] = rows["a1"]["bulk"] = torch.zeros(30_000)
    store.put(partition, rows)
    rows["a1"]["flag"][0] = True  # the producer's tensor is not the stored one
    batch = store.get(partition, ["a0", "a1"])
    assert batch["bf16"].is_nested and batch["bf16"].dtype == torch.bfloat16
    for position, key in enumerate(["a0", "a1"]):
        assert torch.equal(batch["bf16"][position], rows[key]["bf16"])
        assert torch.equal(batch["strided"][position], rows[key]["strided"])
    assert batch["flag"].tolist() == [[True, False], [False, True]]
    assert batch["scalar"].tolist() == [7, -1] and batch["empty"].shape == (2, 0, 4)
    batch["scalar"][0] = 0  # writable, and the store's copy is untouched
    assert store.get(partition, ["a0"], fields="scalar")["scalar"].tolist() == [7]

    views = store.get(partition, ["a0", "a1"], fields=["bf16", "flag", "empty", "strided"])  # the zero-copy path
    for name in views.keys():
        assert views[name].dtype == rows["a0"][name].dtype
        for position, key in enumerate(["a0", "a1"]):
            assert torch.equal(views[name][position], batch[name][position]), name


def test_consecutive_rows_of_one_put_come_back_as_views_and_other_gets_copy(store, partition):
    uid = uuid.uuid4().hex
    keys = [trajectory_key(uid, s) for s in range(4)]
    rows = {
        key: {"ids": torch.arange(n) + 10 * n, "lp": torch.randn(30_000), "src": f"s{n}"}  # via the object store
        for n, key in zip([2, 0, 5, 1], keys)
    }
    store.put(partition, rows)

    def same_memory(first, second):
        return first.data_ptr() == second.data_ptr()

    whole = store.get(partition, keys)
    assert list(whole.keys()) == ["ids", "lp", "src"] and whole["src"] == ["s2", "s0", "s5", "s1"]
    assert whole["ids"].is_nested and not whole["lp"].is_nested
    assert same_memory(whole["lp"], store.get(partition, keys)["lp"]), "a view of the stored column"
    assert same_memory(whole["ids"].values(), store.get(partition, keys, fields=["ids"])["ids"].values())
    middle = store.get(partition, keys[1:3], fields=["lp", "ids"])
    assert list(middle.keys()) == ["lp", "ids"] and same_memory(middle["lp"], whole["lp"][1])
    shuffled = store.get(partition, [keys[2], keys[0]])
    assert not same_memory(shuffled["lp"], store.get(partition, [keys[2], keys[0]])["lp"]), "a private copy"
    for got, order in ((whole, keys), (middle, keys[1:3]), (shuffled, [keys[2], keys[0]])):
        for position, key in enumerate(order):
            assert torch.equal(got["ids"][position], rows[key]["ids"])
            assert torch.equal(got["lp"][position], rows[key]["lp"])
    padded, mask = pad_jagged(whole["ids"], side="left")
    assert mask.sum(dim=1).tolist() == [2, 0, 5, 1] and torch.equal(padded[2], rows[keys[2]]["ids"])


def _owned_objects():
    """Object ids this process owns that something still references (the actor, as a borrower)."""
    return set(ray._private.worker.global_worker.core_worker.get_all_reference_counts())


def _eventually(condition, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_batch_object_lives_until_its_last_row_leaves(store, partition):
    before = _owned_objects()
    store.put(partition, {"f1": {"x": torch.ones(300_000)}, "f2": {"x": torch.ones(300_000)}})
    batch_objects = _owned_objects() - before
    assert len(batch_objects) == 1, "one object per put, held by the actor after the put returned"
    store.consume(partition, ["f1"])
    assert torch.equal(store.get(partition, ["f2"])["x"][0], torch.ones(300_000))
    assert batch_objects <= _owned_objects()
    store.put(partition, {"f2": {"x": torch.zeros(1)}}, overwrite=True)  # the old payload goes with it
    assert _eventually(lambda: not batch_objects & _owned_objects()), "the batch object was not released"


@ray.remote(num_cpus=0)
class Writer:
    def put(self, store, partition):
        store.put(partition, {"ab": {"x": torch.ones(100_000)}}, {"ab": {"status": "finished"}})  # object store
        store.put(partition, {"cd": {"x": torch.ones(4)}}, {"cd": {"status": "finished"}})  # inline: the actor's


def test_rows_of_a_writer_that_died_fail_with_a_clear_error(store, partition):
    writer = Writer.remote()
    ray.get(writer.put.remote(store, partition))
    ray.kill(writer)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(writer.put.remote(store, partition))  # returns once the writer is dead
    assert store.list(partition) == {"ab": {"status": "finished"}, "cd": {"status": "finished"}}  # in the actor
    assert torch.equal(store.get(partition, ["cd"])["x"][0], torch.ones(4))

    def get_fails():  # Ray marks the object lost soon after its owner's death, not at once
        try:
            store.get(partition, ["ab"])
        except StoreStateError as error:
            return str(error)
        return None

    assert _eventually(get_fails), "a dead writer's rows were still readable after 10 s"
    assert re.search(r"rows 1 key\(s\) \['ab'\] of partition .* lost from Ray's object store.*evict them", get_fails())
    store.evict(partition, ["ab", "cd"], reason="failed")
    store.check_accounting(partition, require_drained=True)


def torch_in_actor_process(store) -> bool:
    return ray.get(store._actor.__ray_call__.remote(lambda actor: "torch" in sys.modules))


def test_the_actor_process_imports_no_torch_for_the_store_s_own_calls(partition, tmp_path):
    """The actor keeps keys, tags and payload handles only, so no call of the store's own makes its
    process import torch (1.4 of its 2.4 CPU-s a quickstart run, on 2 cores): a load, puts large and small, gets, group
    waits, a move, added columns, consumes, a save. A predicate that uses torch brings it there,
    which shows the probe sees it."""
    saved = TransferStore()
    saved.put("resumed", {"aa": {"weights": torch.arange(30_000.0), "source": "y"}}, {"aa": {"status": "finished"}})
    saved.save(tmp_path / "before.pt")
    store = make_transfer_store("ray")  # its own actor: the module's has run torch-using predicates
    try:
        store.load(tmp_path / "before.pt")
        uid = uuid.uuid4().hex
        keys = [trajectory_key(uid, session) for session in range(2)]
        big = torch.randn(2, 40_000)  # 320 kB: through the object store; the objects travel pickled
        store.put(partition, {group_key(uid): {"prompt": "p"}}, {group_key(uid): {"status": "running", "n": 2}})
        store.put(
            partition,
            {key: {"ids": torch.arange(i + 2), "big": big[i], "source": "x"} for i, key in enumerate(keys)},
            {key: {"status": "finished"} for key in keys},
        )
        groups = store.wait_for(partition, functools.partial(oldest_complete_groups, batch_size=1), timeout=10)
        assert set(groups[group_key(uid)]) == set(keys)
        assert store.wait_for(partition, finished_keys, timeout=10) == sorted(keys)
        store.move(partition, partition + "-step", keys)
        store.add_columns(partition + "-step", keys, [1, 2], {"adv": torch.ones(2, 3)}, wait=False)
        batch = store.get(partition + "-step", keys)
        assert torch.equal(batch["big"], big) and batch["source"] == ["x", "x"]
        assert torch.equal(pad_jagged(batch["adv"])[0], torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
        store.consume(partition + "-step", keys, wait=False)
        assert store.stats(partition + "-step") == PartitionStats(partition + "-step", put=2, consumed=2)
        store.save(tmp_path / "after.pt")
        assert not torch_in_actor_process(store)

        restored = TransferStore()
        restored.load(tmp_path / "after.pt")
        assert torch.equal(restored.get("resumed", ["aa"])["weights"][0], torch.arange(30_000.0))
        assert restored.stats(partition) == PartitionStats(partition, put=3, consumed=2, live=1)
        store.wait_for("resumed", lambda rows: torch.tensor(len(rows)).item() == 1, timeout=10)
        assert torch_in_actor_process(store)
    finally:
        store.shutdown()
