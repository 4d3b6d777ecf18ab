"""Jagged round trip: variable-length rows -> get -> pad_jagged -> equal to the originals."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core_v1.transfer_store import TransferStore, pad_jagged, row_lengths, trajectory_key


def put_and_get(rows_by_field):
    """Put one row per position of the given per-field value lists and get them back."""
    store = TransferStore()
    count = len(next(iter(rows_by_field.values())))
    keys = [trajectory_key("abc", session_id) for session_id in range(count)]
    store.put(
        "train", {key: {field: values[i] for field, values in rows_by_field.items()} for i, key in enumerate(keys)}
    )
    return store.get("train", keys)


def expected_padding(rows, side, pad_value, length):
    padded = torch.full((len(rows), length, *rows[0].shape[1:]), pad_value, dtype=rows[0].dtype)
    mask = torch.zeros(len(rows), length, dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(length - len(row), length) if side == "left" else slice(0, len(row))
        padded[i, span] = row
        mask[i, span] = 1
    return padded, mask


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=9), min_size=1, max_size=6),
    side=st.sampled_from(["left", "right"]),
    extra=st.integers(min_value=0, max_value=3),
    seed=st.integers(min_value=0, max_value=2**31 - 1),
)
def test_variable_length_rows_round_trip_through_padding(lengths, side, extra, seed):
    generator = torch.Generator().manual_seed(seed)
    ids = [torch.randint(1, 1000, (n,), generator=generator) for n in lengths]
    logprobs = [-torch.rand(n, generator=generator) for n in lengths]
    batch = put_and_get({"response_ids": ids, "response_logprobs": logprobs})

    assert row_lengths(batch["response_ids"]).tolist() == lengths
    length = max(lengths) + extra
    for field, rows, pad_value in (("response_ids", ids, 0), ("response_logprobs", logprobs, -1.0)):
        padded, mask = pad_jagged(batch[field], side=side, pad_value=pad_value, length=length)
        want_padded, want_mask = expected_padding(rows, side, pad_value, length)
        assert torch.equal(padded, want_padded)
        assert torch.equal(mask, want_mask)
        assert padded.dtype == rows[0].dtype and mask.dtype == torch.long
        recovered = [padded[i][mask[i].bool()] for i in range(len(rows))]
        assert all(torch.equal(a, b) for a, b in zip(recovered, rows))


def test_rows_with_trailing_dimensions_are_jagged_on_the_first():
    rows = [torch.randn(2, 4), torch.randn(5, 4), torch.randn(1, 4)]
    batch = put_and_get({"top_logprobs": rows})
    assert batch["top_logprobs"].is_nested
    padded, mask = pad_jagged(batch["top_logprobs"], side="left", pad_value=0.5)
    want_padded, want_mask = expected_padding(rows, "left", 0.5, 5)
    assert torch.equal(padded, want_padded) and torch.equal(mask, want_mask)


def test_same_length_rows_are_stacked_and_still_padded_by_the_helper():
    rows = [torch.arange(3), torch.arange(3) + 10]
    batch = put_and_get({"response_ids": rows, "score": [torch.tensor(1.0), torch.tensor(0.0)]})
    assert not batch["response_ids"].is_nested and batch["response_ids"].shape == (2, 3)
    assert batch["score"].shape == (2,)
    padded, mask = pad_jagged(batch["response_ids"], side="right", pad_value=-1, length=5)
    assert torch.equal(padded, torch.tensor([[0, 1, 2, -1, -1], [10, 11, 12, -1, -1]]))
    assert torch.equal(mask, torch.tensor([[1, 1, 1, 0, 0]] * 2))


def test_jagged_batch_indexes_like_any_tensordict():
    rows = [torch.arange(n) for n in (1, 4, 2)]
    batch = put_and_get({"response_ids": rows, "data_source": ["a", "b", "c"]})
    assert torch.equal(batch[1]["response_ids"], rows[1]) and batch[1]["data_source"] == "b"


def test_pad_jagged_rejects_bad_arguments():
    batch = put_and_get({"response_ids": [torch.arange(2), torch.arange(4)]})
    with pytest.raises(ValueError, match="side must be"):
        pad_jagged(batch["response_ids"], side="middle")
    with pytest.raises(ValueError, match="longest row has 4"):
        pad_jagged(batch["response_ids"], length=3)
