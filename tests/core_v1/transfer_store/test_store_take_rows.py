"""`take_rows` picks rows of a batch as tensordict's indexing does, without sharing tensors."""

import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from core_v1.transfer_store import TransferStore, take_rows, trajectory_key


def _batch(rows: int = 6) -> TensorDict:
    store = TransferStore()
    keys = [trajectory_key("abc", row) for row in range(rows)]
    store.put(
        "train",
        {
            key: {
                "ids": torch.arange(3) + row,
                "score": float(row),
                "uid": f"u{row}",
                "extra": {"row": row, "items": [row]},
            }
            for row, key in enumerate(keys)
        },
    )
    batch = store.get("train", keys)
    batch["same"] = NonTensorData("gsm8k", batch_size=[rows])
    batch["nested"] = TensorDict({"z": torch.arange(rows)}, batch_size=[rows])
    return batch


def _assert_same(expected: TensorDict, got: TensorDict) -> None:
    assert set(expected.keys()) == set(got.keys()) and expected.batch_size == got.batch_size
    for name in expected.keys():
        want, have = expected.get(name), got.get(name)
        if isinstance(want, torch.Tensor):
            assert want.dtype == have.dtype and torch.equal(want, have), name
        elif isinstance(want, TensorDict):
            assert torch.equal(want["z"], have["z"]), name
        else:
            assert want.tolist() == have.tolist(), name


def test_take_rows_equals_tensordict_indexing_for_reordered_and_repeated_rows():
    batch = _batch()
    for rows in ([5, 0, 3, 3, 1], list(range(6)), [2]):
        _assert_same(batch[torch.tensor(rows)], take_rows(batch, rows))
    assert isinstance(take_rows(batch, [1, 0]).get("uid"), NonTensorStack)


def test_taken_rows_share_no_tensor_or_key_with_the_batch():
    batch = _batch()
    taken = take_rows(batch, range(6))
    taken["ids"].add_(100)
    taken["new"] = torch.zeros(6)
    assert torch.equal(batch["ids"][0], torch.arange(3)) and "new" not in batch.keys()
