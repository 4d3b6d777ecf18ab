"""The Ray store's field-by-field gather (`payloads.gathered_batch`) builds the same batch as the
row-by-row merge, for rows spread over several puts and `add_fields` segments in any order.

The store actor's class runs here in-process (no Ray): its puts under 100 kB travel pickled, so
the segments a get fetches are the same `StoredBatch` records a Ray run reads."""

import asyncio
import pickle
import random
import uuid

import pytest
import torch

from core_v1.transfer_store import (
    DuplicateKeyError,
    InvalidRowError,
    MissingFieldError,
    make_transfer_store,
    trajectory_key,
)
from core_v1.transfer_store.actor import _TransferStoreActor
from core_v1.transfer_store.payloads import gathered_batch, gathered_objects, merged_row
from core_v1.transfer_store.staging import column_batch, stage
from core_v1.transfer_store.store import assemble_batch, object_columns


class InProcessActor:
    """The store actor's methods, called directly."""

    def __init__(self):
        self.actor = _TransferStoreActor()

    def put(self, rows):
        staged = stage(rows)
        asyncio.run(self.actor.put("p", staged.keys, staged.names, staged.stored, None, False))

    def add_fields(self, rows, overwrite=False):
        staged = stage(rows)
        asyncio.run(self.actor.add_fields("p", staged.keys, staged.names, staged.stored, overwrite))

    def segments(self, keys, fields):
        payloads, picks = asyncio.run(self.actor.payloads("p", keys, fields))
        return [pickle.loads(payload) for payload in payloads], picks


def row_by_row(batches, keys, picks, fields):
    rows = [merged_row(batches, key, pick) for key, pick in zip(keys, picks)]
    return assemble_batch("p", keys, rows, fields)


def assert_same_batch(got, expected):
    assert list(got.keys()) == list(expected.keys())
    for name in expected.keys():
        want, have = expected.get(name), got.get(name)
        if not isinstance(want, torch.Tensor):
            assert have.tolist() == want.tolist(), name
            continue
        assert have.is_nested == want.is_nested and have.dtype == want.dtype, name
        assert len(have) == len(want)
        for position in range(len(want)):
            assert torch.equal(have[position], want[position]), (name, position)


@pytest.fixture
def spread_rows():
    """48 rows put in 3 puts, a stage's per-token output added to all of them, a later stage
    overwriting `ids` on half of them (and flagging them, the other half apart); keys shuffled,
    one named twice (a padding row)."""
    rng = random.Random(0)
    store, keys = InProcessActor(), []
    for put in range(3):
        uid = uuid.uuid4().hex
        rows = {}
        for session in range(16):
            key = trajectory_key(uid, session)
            n = rng.randint(1, 5)
            rows[key] = {
                "ids": torch.randint(0, 99, (n,)),
                "lp": torch.randn(3),
                "pairs": torch.randn(n, 2),
                "src": f"s{put}",
                "note": {"turns": [session]},
            }
            keys.append(key)
        store.put(rows)
    store.add_fields({key: {"old": torch.randn(rng.randint(0, 3))} for key in keys})
    store.add_fields({key: {"ids": torch.arange(4), "flag": True} for key in keys[::2]}, overwrite=True)
    store.add_fields({key: {"flag": False} for key in keys[1::2]})
    rng.shuffle(keys)
    return store, keys + keys[:1]


@pytest.mark.parametrize(
    "fields", [None, ["ids", "old", "src", "flag"], ["lp", "note", "pairs"], ["ids"], ["old", "lp"]], ids=str
)
def test_gather_equals_the_row_by_row_merge(spread_rows, fields):
    store, keys = spread_rows
    batches, picks = store.segments(keys, fields)
    gathered = gathered_batch(batches, keys, picks, fields)
    assert gathered is not None, "rows over a few segments take the gather path"
    assert_same_batch(gathered, row_by_row(batches, keys, picks, fields))


def test_rows_of_equal_length_gather_dense_and_the_copy_is_private(spread_rows):
    store, keys = spread_rows
    batches, picks = store.segments(keys, ["lp"])
    gathered = gathered_batch(batches, keys, picks, ["lp"])
    assert not gathered["lp"].is_nested and gathered["lp"].shape == (len(keys), 3)
    gathered["lp"].zero_()
    assert gathered_batch(batches, keys, picks, ["lp"])["lp"].abs().sum() > 0


def test_a_field_missing_from_a_row_is_left_to_the_row_by_row_path(spread_rows):
    store, keys = spread_rows
    store.add_fields({key: {"late": torch.ones(2)} for key in keys[:5]})
    fields = ["ids", "late"]
    batches, picks = store.segments(keys, fields)
    assert gathered_batch(batches, keys, picks, fields) is None
    with pytest.raises(MissingFieldError, match="has no field 'late'"):
        row_by_row(batches, keys, picks, fields)
    batches, picks = store.segments(keys, None)
    assert gathered_batch(batches, keys, picks, None) is None


def test_a_tensor_stored_outside_a_column_is_left_to_the_row_by_row_path():
    store = InProcessActor()
    uid = uuid.uuid4().hex
    keys = [trajectory_key(uid, session) for session in range(4)]
    store.put({key: {"x": torch.randn(2)} for key in keys[:2]})
    store.put({keys[2]: {"x": torch.randn(2)}, keys[3]: {"x": torch.randn(1, 2)}})  # shapes differ: no column
    batches, picks = store.segments(keys, ["x"])
    assert gathered_batch(batches, keys, picks, ["x"]) is None


def test_columns_cut_from_padded_tensors_read_back_as_the_trimmed_rows(spread_rows):
    store, keys = spread_rows
    unique = list(dict.fromkeys(keys))
    lengths = [i % 5 for i in range(len(unique))]
    padded = torch.randn(len(unique), 4, 2)
    columns = {"adv": padded, "kept": padded[..., 0] > 0}
    staged = column_batch(unique, lengths, columns)
    asyncio.run(store.actor.add_fields("p", staged.keys, staged.names, staged.stored, False))
    batches, picks = store.segments(keys, ["adv", "kept"])
    ray_batch = gathered_batch(batches, keys, picks, ["adv", "kept"])
    local = make_transfer_store("local")
    local.put("p", {key: {} for key in unique})
    local.add_columns("p", unique, lengths, columns)
    local_batch = local.get("p", keys, fields=["adv", "kept"])
    for position, key in enumerate(keys):
        row, length = unique.index(key), lengths[unique.index(key)]
        for batch in (ray_batch, local_batch):
            assert torch.equal(batch["adv"][position], padded[row, :length])
            assert torch.equal(batch["kept"][position], padded[row, :length, 0] > 0)


def test_columns_refuse_a_repeated_key_and_rows_longer_than_the_tensor(spread_rows):
    _, keys = spread_rows
    with pytest.raises(DuplicateKeyError, match="more than once"):
        column_batch([keys[0], keys[0]], [1, 1], {"adv": torch.zeros(2, 3)})
    with pytest.raises(InvalidRowError, match="fewer than the longest length 4"):
        column_batch(keys[:2], [4, 1], {"adv": torch.zeros(2, 3)})


def test_object_columns_gather_as_the_row_by_row_merge_finds_them(spread_rows):
    store, keys = spread_rows
    fields = ["src", "note", "flag"]
    batches, picks = store.segments(keys, fields)
    rows = [merged_row(batches, key, pick) for key, pick in zip(keys, picks)]
    assert gathered_objects(batches, keys, picks, fields) == object_columns("p", keys, rows, fields)
    for field in (["src", "old"], ["src", "absent"]):  # a tensor, a field no row has
        batches, picks = store.segments(keys, field)
        assert gathered_objects(batches, keys, picks, field) is None
