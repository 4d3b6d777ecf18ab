"""The store as a data plane, on both backends: `add_fields` writes per-row outputs back under the
same keys (no put, tags and counters unchanged), `get` repeats rows a resampled batch names twice,
and `traffic` counts the tensor bytes this process moved in and out."""

import asyncio
import uuid

import pytest
import ray
import torch

from core_v1.transfer_store import (
    DuplicateKeyError,
    InvalidRowError,
    MissingKeyError,
    make_transfer_store,
    trajectory_key,
    traffic,
)


@pytest.fixture(scope="module", params=["local", "ray"])
def store(request):
    if request.param == "ray":
        request.getfixturevalue("ray_runtime")
    return make_transfer_store(request.param)


@pytest.fixture
def partition():
    return f"part-{uuid.uuid4().hex[:8]}"


def put_trajectories(store, partition, lengths, response_floats=8):
    """Rows of one put: jagged ids, equal-length log-probs and an object field; returns (keys, rows)."""
    uid = uuid.uuid4().hex
    keys = [trajectory_key(uid, s) for s in range(len(lengths))]
    rows = {
        key: {"ids": torch.arange(n) + 10 * n, "lp": torch.randn(response_floats), "src": f"s{n}"}
        for n, key in zip(lengths, keys)
    }
    store.put(partition, rows, {key: {"status": "finished", "length": n} for key, n in zip(keys, lengths)})
    return keys, rows


def test_add_fields_writes_outputs_back_without_a_put(store, partition):
    keys, rows = put_trajectories(store, partition, [2, 0, 5])
    tags_before, stats_before = store.list(partition), store.stats(partition)
    old = {key: {"old_lp": torch.full((3,), float(i)), "note": {"i": i}} for i, key in enumerate(keys)}
    store.add_fields(partition, old)

    assert store.list(partition) == tags_before and store.stats(partition) == stats_before
    batch = store.get(partition, keys, fields=["ids", "old_lp", "note"])
    for position, key in enumerate(keys):
        assert torch.equal(batch["ids"][position], rows[key]["ids"])
        assert torch.equal(batch["old_lp"][position], old[key]["old_lp"])
    assert batch["note"] == [{"i": 0}, {"i": 1}, {"i": 2}]
    assert set(store.get(partition, keys[1:]).keys()) == {"ids", "lp", "src", "old_lp", "note"}
    store.consume(partition, keys)
    store.check_accounting(partition, require_drained=True)


def test_add_fields_copies_like_put(store, partition):
    keys, _ = put_trajectories(store, partition, [3])
    values = torch.zeros(40_000)  # over the Ray store's inline limit: it travels through the object store
    store.add_fields(partition, {keys[0]: {"values": values}})
    values += 1
    assert store.get(partition, keys, fields=["values"])["values"].sum().item() == 0


def test_add_fields_refuses_rows_that_are_not_live_and_changes_nothing(store, partition):
    keys, _ = put_trajectories(store, partition, [2, 3])
    store.consume(partition, [keys[1]])
    gone = trajectory_key(uuid.uuid4().hex, 0)
    for missing in (keys[1], gone):
        with pytest.raises(MissingKeyError, match=missing):
            store.add_fields(partition, {keys[0]: {"adv": torch.ones(2)}, missing: {"adv": torch.ones(2)}})
    assert "adv" not in store.get(partition, [keys[0]]).keys(), "all or nothing"


def test_add_fields_refuses_a_field_the_row_has_unless_overwrite(store, partition):
    keys, rows = put_trajectories(store, partition, [2, 3])
    store.add_fields(partition, {key: {"adv": torch.zeros(2)} for key in keys})
    for taken in ("ids", "adv"):
        with pytest.raises(InvalidRowError, match=f"already has field.*{taken}.*overwrite=True"):
            store.add_fields(partition, {keys[1]: {taken: torch.ones(2)}})
    store.add_fields(partition, {keys[1]: {"adv": torch.ones(2), "ids": torch.tensor([7])}}, overwrite=True)
    batch = store.get(partition, keys, fields=["ids", "adv"])
    assert torch.equal(batch["adv"][1], torch.ones(2)) and torch.equal(batch["ids"][1], torch.tensor([7]))
    assert torch.equal(batch["ids"][0], rows[keys[0]]["ids"]) and torch.equal(batch["adv"][0], torch.zeros(2))
    assert store.stats(partition).overwritten == 0, "add_fields is not a put"


def test_aadd_fields_from_an_event_loop(store, partition):
    keys, _ = put_trajectories(store, partition, [1, 2])
    asyncio.run(store.aadd_fields(partition, {key: {"adv": torch.ones(1)} for key in keys}))
    assert store.get(partition, keys, fields=["adv"])["adv"].tolist() == [[1.0], [1.0]]


def test_get_returns_a_row_once_per_mention(store, partition):
    keys, rows = put_trajectories(store, partition, [2, 0, 5], response_floats=30_000)
    for order in ([keys[0], keys[1], keys[0]], [keys[2], keys[2]], keys + keys):
        batch = store.get(partition, order)
        assert batch.batch_size[0] == len(order) and batch["src"] == [rows[key]["src"] for key in order]
        for position, key in enumerate(order):
            assert torch.equal(batch["ids"][position], rows[key]["ids"])
            assert torch.equal(batch["lp"][position], rows[key]["lp"])


def test_traffic_counts_the_tensor_bytes_this_process_moved(store, partition):
    before = traffic.snapshot()
    keys, rows = put_trajectories(store, partition, [2, 5], response_floats=30_000)  # ids int64, lp float32
    put_bytes = (2 + 5) * 8 + 2 * 30_000 * 4
    store.add_fields(partition, {key: {"adv": torch.ones(4)} for key in keys})
    store.get(partition, keys, fields=["lp", "src"])
    store.get(partition, [keys[1], keys[0], keys[1]], fields=["ids", "adv"])
    after = traffic.snapshot()
    assert after["put_bytes"] - before["put_bytes"] == put_bytes + 2 * 4 * 4
    assert after["got_bytes"] - before["got_bytes"] == 2 * 30_000 * 4 + (5 + 2 + 5) * 8 + 3 * 4 * 4
    assert (after["puts"] - before["puts"], after["gets"] - before["gets"]) == (2, 2)
    traffic.reset()
    assert traffic.snapshot() == {"put_bytes": 0, "got_bytes": 0, "puts": 0, "gets": 0}


# --------------------------------------------------------------------- Ray backend: segments


@pytest.fixture
def ray_store(store):
    if not hasattr(store, "_actor"):
        pytest.skip("segments are the Ray store's")
    return store


def test_a_get_fetches_only_the_segments_holding_its_fields(ray_store, partition):
    keys, _ = put_trajectories(ray_store, partition, [2, 3], response_floats=30_000)
    ray_store.add_fields(partition, {key: {"adv": torch.ones(30_000)} for key in keys})

    def fetched(fields):
        payloads, picks = ray.get(ray_store._actor.payloads.remote(partition, keys, fields))
        return len(payloads), picks

    assert fetched(["adv"]) == (1, [[0], [0]])
    # A put's tensors and its Python objects are separate segments: reading the objects (the
    # trainer's handle on a batch) fetches no tensor payload.
    assert fetched(["src"]) == (1, [[0], [0]])
    assert fetched(["ids", "src"]) == (2, [[0, 1], [0, 1]])
    assert fetched(None) == (3, [[0, 1, 2], [0, 1, 2]])


def test_rows_read_across_segments_in_put_order_are_views(ray_store, partition):
    keys, rows = put_trajectories(ray_store, partition, [2, 0, 5], response_floats=30_000)
    adv = {key: {"adv": torch.randn(30_000)} for key in keys}
    ray_store.add_fields(partition, adv)
    first, second = (ray_store.get(partition, keys, fields=["lp", "adv", "src"]) for _ in range(2))
    assert first["lp"].data_ptr() == second["lp"].data_ptr() and first["adv"].data_ptr() == second["adv"].data_ptr()
    assert first["src"] == ["s2", "s0", "s5"]
    for position, key in enumerate(keys):
        assert torch.equal(first["adv"][position], adv[key]["adv"])
        assert torch.equal(first["lp"][position], rows[key]["lp"])


def test_save_and_load_keep_added_fields(ray_store, partition, tmp_path):
    keys, rows = put_trajectories(ray_store, partition, [2, 3])
    ray_store.add_fields(partition, {key: {"adv": torch.ones(2)} for key in keys})
    ray_store.save(tmp_path / "state.pt")
    local = make_transfer_store("local")
    local.load(tmp_path / "state.pt")
    batch = local.get(partition, keys, fields=["ids", "adv"])
    assert torch.equal(batch["ids"][1], rows[keys[1]]["ids"]) and batch["adv"].tolist() == [[1.0, 1.0]] * 2
    ray_store.consume(partition, keys)


# --------------------------------------------------------------------- Ray backend: aputs of one turn


def writer_rows(count):
    uid = uuid.uuid4().hex
    return {trajectory_key(uid, s): {"ids": torch.arange(s + 1), "lp": torch.randn(3)} for s in range(count)}


def test_aputs_of_one_turn_travel_as_one_put(ray_store, partition):
    writers = [writer_rows(4) for _ in range(16)]

    async def write_all():
        await asyncio.gather(
            *(ray_store.aput(partition, rows, {key: {"status": "finished"} for key in rows}) for rows in writers)
        )

    before = traffic.snapshot()["puts"]
    asyncio.run(write_all())
    assert traffic.snapshot()["puts"] - before == 1
    keys = [key for rows in writers for key in rows]
    assert ray_store.stats(partition).put == 64 and len(ray_store.list(partition, {"status": "finished"})) == 64
    batch = ray_store.get(partition, keys)
    for position, key in enumerate(keys):
        row = next(rows[key] for rows in writers if key in rows)
        assert torch.equal(batch["ids"][position], row["ids"]) and torch.equal(batch["lp"][position], row["lp"])


def test_each_coalesced_aput_still_succeeds_or_fails_on_its_own(ray_store, partition):
    live = writer_rows(2)
    ray_store.put(partition, live)
    fine, clash = writer_rows(3), writer_rows(1)
    stray_tags = {next(iter(fine)): {"status": "finished"}}

    async def write_all():
        return await asyncio.gather(
            ray_store.aput(partition, fine),
            ray_store.aput(partition, live),
            ray_store.aput(partition, clash),
            ray_store.aput(partition, clash),
            ray_store.aput(partition, writer_rows(1), stray_tags),
            return_exceptions=True,
        )

    outcomes = asyncio.run(write_all())
    assert outcomes[0] is None and isinstance(outcomes[1], DuplicateKeyError)
    assert {type(outcome) for outcome in outcomes[2:4]} == {DuplicateKeyError, type(None)}, "one key, put twice"
    assert isinstance(outcomes[4], InvalidRowError) and "tags given for keys that are not being put" in str(outcomes[4])
    assert set(ray_store.list(partition)) == {*live, *fine, *clash}


def test_rows_of_several_puts_read_in_put_order_are_joined_run_by_run(ray_store, partition):
    puts = [
        put_trajectories(ray_store, partition, [1 + (i + p) % 5 for i in range(8)], response_floats=4_000)
        for p in range(4)
    ]
    keys = [key for put_keys, _ in puts for key in put_keys]
    rows = {key: row for _, put_rows in puts for key, row in put_rows.items()}
    for order in (keys, keys[4:28]):
        batch = ray_store.get(partition, order)
        assert batch["ids"].is_nested and not batch["lp"].is_nested
        assert batch["src"] == [rows[key]["src"] for key in order]
        for position, key in enumerate(order):
            assert torch.equal(batch["ids"][position], rows[key]["ids"])
            assert torch.equal(batch["lp"][position], rows[key]["lp"])
    batch["lp"].zero_()  # a private copy: the store's rows are untouched
    assert torch.equal(ray_store.get(partition, keys[4:5])["lp"][0], rows[keys[4]]["lp"])


def test_rows_split_from_one_tensor_are_stored_as_copies(store, partition):
    whole = torch.randn(8, 20_000)  # 640 kB: through the Ray store's object store
    original = whole.clone()
    keys = [trajectory_key(uuid.uuid4().hex, 0) for _ in range(8)]
    store.put(partition, {key: {"x": whole[i]} for i, key in enumerate(keys)})
    store.add_fields(partition, {key: {"y": whole[i, :100]} for i, key in enumerate(keys[2:5], start=2)})
    whole.zero_()
    assert torch.equal(store.get(partition, keys, fields=["x"])["x"], original)
    assert torch.equal(store.get(partition, keys[2:5], fields=["y"])["y"], original[2:5, :100])


def test_get_objects_reads_object_columns_as_plain_copied_lists_without_tensor_bytes(store, partition):
    from core_v1.transfer_store import MissingFieldError

    keys, _ = put_trajectories(store, partition, [2, 4, 3])
    store.add_fields(partition, {key: {"note": {"turns": [i]}} for i, key in enumerate(keys)})
    got_before = traffic.snapshot()
    columns = store.get_objects(partition, [keys[2], keys[0], keys[2]], ["src", "note"])
    assert columns == {"src": ["s3", "s2", "s3"], "note": [{"turns": [2]}, {"turns": [0]}, {"turns": [2]}]}
    assert traffic.snapshot() == got_before  # no tensor bytes moved
    columns["note"][0]["turns"].append(99)  # a copy: the stored row is unchanged
    assert store.get_objects(partition, [keys[2]], ["note"]) == {"note": [{"turns": [2]}]}
    with pytest.raises(MissingFieldError, match="no field 'absent'"):
        store.get_objects(partition, keys, ["absent"])
    store.consume(partition, keys)
