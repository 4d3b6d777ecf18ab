"""Tests for legacy_v0.protocol.DataProto: verl's documented behaviour, error cases included."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from legacy_v0.protocol import (
    DataProto,
    DataProtoConfig,
    DataProtoError,
    DataProtoItem,
    collate_fn,
    deserialize_single_tensor,
    deserialize_tensordict,
    fold_batch_dim,
    list_of_dict_to_dict_of_list,
    pad_dataproto_to_divisor,
    serialize_single_tensor,
    serialize_tensordict,
    unfold_batch_dim,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
    unpad_dataproto,
)


def make_data(n: int = 6, meta_info: dict | None = None) -> DataProto:
    """Rows i = 0..n-1: obs = [2i, 2i+1], labels = letter i, extra = {"i": i}."""
    return DataProto.from_dict(
        tensors={"obs": torch.arange(2 * n).reshape(n, 2), "score": torch.arange(n, dtype=torch.float32)},
        non_tensors={"labels": list("abcdefghijklmnop"[:n]), "extra": [{"i": i} for i in range(n)]},
        meta_info={"name": "abc"} if meta_info is None else meta_info,
    )


def rows_of(data: DataProto) -> list[int]:
    """Which original rows `data` holds (obs[:, 0] == 2 * original index)."""
    return (data.batch["obs"][:, 0] // 2).tolist()


def assert_same(a: DataProto, b: DataProto) -> None:
    assert sorted(a.batch.keys()) == sorted(b.batch.keys())
    for key in a.batch.keys():
        assert a.batch[key].dtype == b.batch[key].dtype and torch.equal(a.batch[key], b.batch[key]), key
    assert a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for key in a.non_tensor_batch:
        assert a.non_tensor_batch[key].shape == b.non_tensor_batch[key].shape, key
        assert list(a.non_tensor_batch[key]) == list(b.non_tensor_batch[key]), key
    assert a.meta_info == b.meta_info


# ---------------------------------------------------------------------------------------------
# construction and consistency
# ---------------------------------------------------------------------------------------------


def test_from_dict_builds_one_batch_dim_and_object_columns():
    data = make_data(4)
    assert data.batch.batch_size == torch.Size([4])
    assert data.non_tensor_batch["labels"].dtype == object
    assert len(data) == 4


def test_from_dict_rejects_mismatched_tensor_lengths():
    with pytest.raises(DataProtoError, match="same batch size"):
        DataProto.from_dict(tensors={"a": torch.zeros(3, 2), "b": torch.zeros(4)})


def test_from_dict_rejects_extra_batch_dims_and_non_positive_dims():
    obs, act = torch.randn(10, 4), torch.randn(10, 4, 3)
    with pytest.raises(AssertionError):  # verl callers catch AssertionError; ours is one
        DataProto.from_dict(tensors={"obs": obs, "act": act}, num_batch_dims=2)
    with pytest.raises(DataProtoError):
        DataProto.from_dict(tensors={"obs": obs}, num_batch_dims=0)
    with pytest.raises(DataProtoError, match="num_batch_dims=1"):
        DataProto.from_dict(tensors={"obs": obs}, non_tensors={"x": list(range(10))}, num_batch_dims=2)


def test_from_dict_rejects_non_tensor_length_mismatch():
    with pytest.raises(DataProtoError, match="length 2 is not equal to batch size 3"):
        DataProto.from_dict(tensors={"a": torch.zeros(3)}, non_tensors={"x": ["p", "q"]})


def test_constructor_rejects_non_numpy_columns_and_ragged_columns():
    with pytest.raises(DataProtoError, match="numpy.array"):
        DataProto(batch=None, non_tensor_batch={"x": ["a", "b"]})
    with pytest.raises(DataProtoError, match="length"):
        DataProto(non_tensor_batch={"x": np.array([1, 2], dtype=object), "y": np.array([1], dtype=object)})


def test_from_dict_without_tensors_and_auto_padding_flag():
    data = DataProto.from_dict(non_tensors={"labels": ["a", "b", "c"]}, auto_padding=True)
    assert data.batch is None and len(data) == 3
    assert data.is_padding_enabled()


def test_from_single_dict_splits_by_type_and_respects_subclass():
    class MyProto(DataProto):
        pass

    data = MyProto.from_single_dict({"x": torch.zeros(2), "y": np.array(["a", "b"], dtype=object)}, meta_info={"k": 1})
    assert type(data) is MyProto
    assert list(data.batch.keys()) == ["x"] and list(data.non_tensor_batch) == ["y"] and data.meta_info == {"k": 1}
    with pytest.raises(ValueError, match="Unsupported type"):
        DataProto.from_single_dict({"x": [1, 2]})


def test_len_of_batchless_and_empty():
    labels = np.array(["a", "b", "c"], dtype=object)
    assert len(DataProto(batch=None, non_tensor_batch={"labels": labels})) == 3
    assert len(DataProto(batch=None, non_tensor_batch={})) == 0
    assert len(DataProto(batch=None, non_tensor_batch=None, meta_info={"info": 1})) == 0


# ---------------------------------------------------------------------------------------------
# indexing
# ---------------------------------------------------------------------------------------------


def test_int_index_returns_item_with_row_values():
    data = make_data(4)
    for index in (2, np.int64(2), torch.tensor(2)):
        item = data[index]
        assert isinstance(item, DataProtoItem)
        assert item.batch["obs"].tolist() == [4, 5]
        assert item.non_tensor_batch == {"labels": "c", "extra": {"i": 2}}
        assert item.meta_info is data.meta_info


@pytest.mark.parametrize(
    "index", [[3, 0, 3], np.array([3, 0, 3]), torch.tensor([3, 0, 3]), torch.tensor([3, 0, 3], dtype=torch.int32)]
)
def test_integer_index_forms_select_rows_in_order(index):
    selected = make_data(4)[index]
    assert isinstance(selected, DataProto)
    assert rows_of(selected) == [3, 0, 3]
    assert list(selected.non_tensor_batch["labels"]) == ["d", "a", "d"]
    assert selected.batch.batch_size == torch.Size([3]) and all(type(d) is int for d in selected.batch.batch_size)


@pytest.mark.parametrize(
    "mask", [[True, False, True, False], np.array([True, False, True, False]), torch.tensor([True, False, True, False])]
)
def test_bool_mask_forms_select_rows(mask):
    selected = make_data(4)[mask]
    assert rows_of(selected) == [0, 2]
    assert list(selected.non_tensor_batch["labels"]) == ["a", "c"]
    assert selected.batch.batch_size == torch.Size([2])


def test_bad_indices_raise_clear_errors():
    data = make_data(4)
    with pytest.raises(DataProtoError, match="boolean mask"):
        data[[True, False]]
    with pytest.raises(DataProtoError, match="integers or booleans"):
        data[np.array([0.5, 1.0])]
    with pytest.raises(TypeError, match="not supported"):
        data["obs"]
    assert len(data[[]]) == 0


def test_slice_and_slice_method_agree_and_share_meta():
    data = make_data(6)
    assert rows_of(data[1:5:2]) == [1, 3]
    assert rows_of(data.slice(1, 5, 2)) == [1, 3]
    assert list(data[::-1].non_tensor_batch["labels"]) == list("fedcba")
    assert data[4:].meta_info is data.meta_info


# ---------------------------------------------------------------------------------------------
# keys: select, pop, rename, union
# ---------------------------------------------------------------------------------------------


def test_select_keys_and_deepcopy():
    data = make_data(3, meta_info={"a": [1], "b": 2})
    chosen = data.select(batch_keys=["obs"], non_tensor_batch_keys=["labels", "absent"], meta_info_keys=["a"])
    assert list(chosen.batch.keys()) == ["obs"]
    assert list(chosen.non_tensor_batch) == ["labels"]
    assert chosen.meta_info == {"a": [1]}
    assert chosen.meta_info["a"] is data.meta_info["a"]
    copied = data.select(meta_info_keys=["a"], deepcopy=True)
    assert copied.meta_info["a"] == [1] and copied.meta_info["a"] is not data.meta_info["a"]
    assert data.select().batch is data.batch
    with pytest.raises(DataProtoError, match="no key"):
        data.select(batch_keys=["missing"])


def test_pop_removes_and_returns_keys():
    data = make_data(3, meta_info={"2": 2, "1": 1})
    popped = data.pop(batch_keys=["obs"], non_tensor_batch_keys=["labels"], meta_info_keys=["2"])
    assert list(popped.batch.keys()) == ["obs"] and list(popped.non_tensor_batch) == ["labels"]
    assert popped.meta_info == {"2": 2}
    assert list(data.batch.keys()) == ["score"] and list(data.non_tensor_batch) == ["extra"]
    assert data.meta_info == {"1": 1}


def test_pop_missing_key_changes_nothing():
    data = make_data(3)
    with pytest.raises(DataProtoError, match="no key"):
        data.pop(batch_keys=["obs"], meta_info_keys=["missing"])
    assert "obs" in data.batch.keys()


def test_pop_non_tensor_only_from_batchless():
    data = DataProto.from_dict(non_tensors={"labels": ["a", "b", "c"]}, meta_info={"info": 1})
    popped = data.pop(non_tensor_batch_keys=["labels"])
    assert list(popped.non_tensor_batch["labels"]) == ["a", "b", "c"] and popped.batch is None
    assert data.non_tensor_batch == {}


def test_rename_single_multiple_and_swap():
    data = make_data(3)
    assert data.rename("obs", "observation") is data
    assert sorted(data.batch.keys()) == ["observation", "score"]
    data.rename(["observation", "score"], ["score", "observation"])  # a swap
    assert data.batch["observation"].dtype == torch.float32


def test_rename_errors():
    data = make_data(3)
    with pytest.raises(ValueError, match="same length"):
        data.rename(["obs"], ["a", "b"])
    with pytest.raises(TypeError, match="list or a string"):
        data.rename(("obs",), ("a",))
    with pytest.raises(DataProtoError, match="overwrite"):
        data.rename("obs", "score")
    with pytest.raises(DataProtoError, match="no key"):
        data.rename("missing", "other")


def test_union_merges_all_three_parts():
    obs = torch.randn(4, 2)
    left = DataProto.from_dict({"obs": obs}, {"uid": ["a", "b", "c", "d"]}, meta_info={"t": 1.0})
    right = DataProto.from_dict(
        {"obs": obs.clone(), "rew": torch.ones(4)}, {"uid": ["a", "b", "c", "d"]}, meta_info={"t": 1.0, "step": 3}
    )
    assert left.union(right) is left
    assert sorted(left.batch.keys()) == ["obs", "rew"]
    assert left.meta_info == {"t": 1.0, "step": 3}


@pytest.mark.parametrize(
    "right",
    [
        lambda: DataProto.from_dict({"obs": torch.ones(4, 2)}),  # tensor conflict
        lambda: DataProto.from_dict({"x": torch.ones(4)}, {"uid": ["a", "b", "c", "X"]}),  # column conflict
        lambda: DataProto.from_dict({"x": torch.ones(4)}, meta_info={"t": 2.0}),  # meta conflict
        lambda: DataProto.from_dict({"x": torch.ones(5)}),  # row count
    ],
)
def test_union_conflicts_raise(right):
    left = DataProto.from_dict({"obs": torch.zeros(4, 2)}, {"uid": ["a", "b", "c", "d"]}, meta_info={"t": 1.0})
    with pytest.raises(DataProtoError):
        left.union(right())


def test_union_with_batchless_side():
    left = DataProto.from_dict(non_tensors={"uid": ["a", "b"]})
    right = DataProto.from_dict({"obs": torch.zeros(2, 3)})
    left.union(right)
    assert left.batch is right.batch and len(left) == 2


def test_union_tensor_dict_and_numpy_dict_helpers():
    obs = torch.randn(5, 3)
    union_tensor_dict(TensorDict({"obs": obs}, [5]), TensorDict({"obs": obs, "x": torch.ones(5)}, [5]))
    with pytest.raises(AssertionError):
        union_tensor_dict(TensorDict({"obs": obs}, [5]), TensorDict({"obs": obs + 1}, [5]))
    with pytest.raises(DataProtoError, match="batch size"):
        union_tensor_dict(TensorDict({"obs": obs}, [5]), TensorDict({"obs": obs[:4]}, [4]))

    nan = np.array([1.0, np.nan, 3.0])
    union_numpy_dict({"d": nan}, {"d": np.array([1.0, np.nan, 3.0])})  # NaN in the same place is equal
    with pytest.raises(AssertionError):
        union_numpy_dict({"d": nan}, {"d": np.array([np.nan, 1.0, 3.0])})
    nested = np.array([[np.array([1, 2]), "t"], [np.array([3.0]), None]], dtype=object)
    union_numpy_dict({"o": nested}, {"o": copy.deepcopy(nested)})
    changed = copy.deepcopy(nested)
    changed[1, 1] = "other"
    with pytest.raises(AssertionError, match="`o` in tensor_dict1 and tensor_dict2 are not the same object"):
        union_numpy_dict({"o": nested}, {"o": changed})
    circular_a, circular_b = np.array([None], dtype=object), np.array([None], dtype=object)
    circular_a[0], circular_b[0] = circular_a, circular_b
    union_numpy_dict({"c": circular_a}, {"c": circular_b})
    with pytest.raises(AssertionError):
        union_numpy_dict({"c": circular_a}, {"c": np.array([None], dtype=object)})
    with pytest.raises(DataProtoError):
        union_two_dict({"k": 1}, {"k": 2})


# ---------------------------------------------------------------------------------------------
# chunk, split, concat, padding
# ---------------------------------------------------------------------------------------------


def test_chunk_and_concat_round_trip():
    data = make_data(6)
    parts = data.chunk(2)
    assert [rows_of(p) for p in parts] == [[0, 1, 2], [3, 4, 5]]
    assert [list(p.non_tensor_batch["labels"]) for p in parts] == [list("abc"), list("def")]
    assert all(p.meta_info == {"name": "abc"} for p in parts)
    assert_same(DataProto.concat(parts), data)


def test_chunk_uneven_needs_padding_enabled(monkeypatch):
    data = make_data(5)
    with pytest.raises(DataProtoError, match="only support equal chunk"):
        data.chunk(2)
    with pytest.raises(DataProtoError):
        data.chunk(0)
    padded_meta = make_data(5, meta_info={DataProtoConfig.auto_padding_key: True})
    assert [len(p) for p in padded_meta.chunk(4)] == [2, 1, 1, 1]  # exactly `chunks` parts
    monkeypatch.setenv("VERL_AUTO_PADDING", "1")
    assert [len(p) for p in data.chunk(2)] == [3, 2]


def test_data_proto_config_auto_padding_switch():
    data = make_data(5)
    DataProtoConfig.auto_padding = True
    try:
        assert data.is_padding_enabled() and len(data.chunk(3)) == 3
    finally:
        DataProtoConfig.auto_padding = False
    assert not data.is_padding_enabled()
    with pytest.raises(TypeError):
        DataProtoConfig.auto_padding = "yes"


def test_split_makes_fixed_size_parts():
    parts = make_data(5).split(2)
    assert [rows_of(p) for p in parts] == [[0, 1], [2, 3], [4]]
    with pytest.raises(DataProtoError):
        make_data(5).split(0)


def test_concat_merges_meta_info_and_aggregates_metrics():
    first = make_data(2, meta_info={"temperature": 1.0, "metrics": {"loss": 0.5}})
    second = make_data(2, meta_info={"temperature": 1.0, "step": 7, "metrics": [{"loss": 0.25}, {"loss": 0.125}]})
    merged = DataProto.concat([first, second])
    assert merged.meta_info == {"temperature": 1.0, "step": 7, "metrics": {"loss": [0.5, 0.25, 0.125]}}
    assert len(merged) == 4


def test_concat_errors():
    with pytest.raises(DataProtoError, match="at least one"):
        DataProto.concat([])
    with pytest.raises(DataProtoError, match="conflicting values for meta_info key 'temperature'"):
        DataProto.concat([make_data(2, {"temperature": 1.0}), make_data(2, {"temperature": 0.5})])
    with pytest.raises(DataProtoError, match="batch keys"):
        DataProto.concat([make_data(2), make_data(2).select(batch_keys=["obs"])])
    with pytest.raises(DataProtoError, match="non_tensor_batch keys"):
        DataProto.concat([make_data(2), make_data(2).select(non_tensor_batch_keys=["labels"])])
    with pytest.raises(DataProtoError, match="keys"):
        list_of_dict_to_dict_of_list([{"a": 1}, {"b": 2}])


def test_pad_and_unpad_to_divisor():
    data = make_data(3, meta_info={"info": "x"})
    for divisor, expected_pad, expected_rows in [
        (2, 1, [0, 1, 2, 0]),
        (3, 0, [0, 1, 2]),
        (7, 4, [0, 1, 2, 0, 1, 2, 0]),
    ]:
        padded, pad_size = pad_dataproto_to_divisor(data, size_divisor=divisor)
        assert pad_size == expected_pad and rows_of(padded) == expected_rows
        assert list(padded.non_tensor_batch["labels"]) == ["abc"[i] for i in expected_rows]
        assert padded.meta_info == {"info": "x"}
        assert_same(unpad_dataproto(padded, pad_size), data)
    with pytest.raises(TypeError):
        pad_dataproto_to_divisor({"x": 1}, 2)
    empty = DataProto()
    assert pad_dataproto_to_divisor(empty, 4) == (empty, 0)


def test_padding_appends_first_or_last_row_in_place():
    data = make_data(3)
    data.padding(2)
    assert rows_of(data) == [0, 1, 2, 2, 2]
    data = make_data(3)
    data.padding(1, padding_candidate="first")
    assert rows_of(data) == [0, 1, 2, 0] and list(data.non_tensor_batch["labels"]) == list("abca")
    data.padding(0)
    assert len(data) == 4
    with pytest.raises(DataProtoError, match="empty"):
        DataProto().padding(2)


# ---------------------------------------------------------------------------------------------
# reorder, repeat, unfold_column_chunks, fold / unfold
# ---------------------------------------------------------------------------------------------


def test_reorder_in_place_keeps_meta():
    data = make_data(6)
    assert data.reorder(torch.tensor([3, 4, 2, 0, 1, 5])) is None
    assert rows_of(data) == [3, 4, 2, 0, 1, 5]
    assert list(data.non_tensor_batch["labels"]) == list("decabf")
    assert data.meta_info == {"name": "abc"}


def test_repeat_interleaved_and_tiled():
    data = make_data(3)
    assert rows_of(data.repeat(2, interleave=True)) == [0, 0, 1, 1, 2, 2]
    tiled = data.repeat(repeat_times=2, interleave=False)
    assert rows_of(tiled) == [0, 1, 2, 0, 1, 2]
    assert list(tiled.non_tensor_batch["labels"]) == list("abcabc")
    assert tiled.meta_info == {"name": "abc"}
    with pytest.raises(DataProtoError):
        data.repeat(-1)


def test_sample_level_repeat_accepts_every_count_form():
    data = make_data(3)
    for counts in ([3, 1, 2], (3, 1, 2), np.array([3, 1, 2]), torch.tensor([3, 1, 2])):
        repeated = data.sample_level_repeat(counts)
        assert rows_of(repeated) == [0, 0, 0, 1, 2, 2]
        assert list(repeated.non_tensor_batch["labels"]) == list("aaabcc")
    assert len(data.sample_level_repeat([0, 0, 1])) == 1
    with pytest.raises(DataProtoError, match="one non-negative count per row"):
        data.sample_level_repeat([1, 2])
    with pytest.raises(DataProtoError):
        data.sample_level_repeat([1, -1, 2])
    with pytest.raises(TypeError):
        data.sample_level_repeat(3)


def test_unfold_column_chunks_splits_named_keys_and_repeats_the_rest():
    obs1 = torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]])
    obs2 = torch.tensor([[1, 2], [5, 6], [9, 10]])
    data = DataProto.from_dict(
        {"obs1": obs1, "obs2": obs2}, {"labels": [["a1", "a2"], ["b1", "b2"], ["c1", "c2"]]}, meta_info={"name": "abc"}
    )
    out = data.unfold_column_chunks(2, split_keys=["obs1", "labels"])
    assert out.batch["obs1"].tolist() == [[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]
    assert out.batch["obs2"].tolist() == [[1, 2], [1, 2], [5, 6], [5, 6], [9, 10], [9, 10]]
    assert out.non_tensor_batch["labels"].tolist() == [["a1"], ["a2"], ["b1"], ["b2"], ["c1"], ["c2"]]
    assert out.meta_info == {"name": "abc"}
    all_repeated = data.unfold_column_chunks(2)
    assert all_repeated.batch["obs1"].shape == (6, 4)
    with pytest.raises(DataProtoError, match="divisible"):
        data.unfold_column_chunks(3, split_keys=["obs1"])
    with pytest.raises(DataProtoError, match="unknown split key"):
        data.unfold_column_chunks(2, split_keys=["nope"])


def test_unfold_column_chunks_on_3d_tensor():
    obs = torch.arange(24).reshape(3, 4, 2)
    out = DataProto.from_dict({"obs": obs}).unfold_column_chunks(2, split_keys=["obs"])
    assert out.batch["obs"].shape == (6, 2, 2) and torch.equal(out.batch["obs"][1], obs[0, 2:])


def test_fold_and_unfold_batch_dim():
    data = make_data(3).select(batch_keys=["obs"], non_tensor_batch_keys=["labels"]).repeat(2, interleave=True)
    folded = fold_batch_dim(data, new_batch_size=3)
    assert folded.batch.batch_size == torch.Size([3])
    assert folded.batch["obs"].tolist() == [[[0, 1], [0, 1]], [[2, 3], [2, 3]], [[4, 5], [4, 5]]]
    assert folded.non_tensor_batch["labels"].tolist() == [["a", "a"], ["b", "b"], ["c", "c"]]
    folded.reorder(torch.tensor([1, 2, 0]))
    unfolded = unfold_batch_dim(folded, batch_dims=2)
    assert rows_of(unfolded) == [1, 1, 2, 2, 0, 0]
    assert unfolded.non_tensor_batch["labels"].tolist() == list("bbccaa")
    assert unfolded.meta_info == {"name": "abc"}
    with pytest.raises(DataProtoError, match="divide"):
        fold_batch_dim(data, new_batch_size=4)


# ---------------------------------------------------------------------------------------------
# iteration and collation
# ---------------------------------------------------------------------------------------------


def test_make_iterator_yields_minibatches_reproducibly():
    data = make_data(8, meta_info={"step": 1})
    first = list(data.make_iterator(mini_batch_size=4, epochs=2, seed=1, dataloader_kwargs={"shuffle": True}))
    second = list(data.make_iterator(mini_batch_size=4, epochs=2, seed=1, dataloader_kwargs={"shuffle": True}))
    assert len(first) == 4
    assert [rows_of(m) for m in first] == [rows_of(m) for m in second]
    assert sorted(sum((rows_of(m) for m in first[:2]), [])) == list(range(8))  # one epoch covers every row once
    for mini_batch in first:
        assert mini_batch.meta_info is data.meta_info
        expected = ["abcdefgh"[i] for i in rows_of(mini_batch)]
        assert list(mini_batch.non_tensor_batch["labels"]) == expected
        assert [e["i"] for e in mini_batch.non_tensor_batch["extra"]] == rows_of(mini_batch)
    unshuffled = list(data.make_iterator(mini_batch_size=4, epochs=1))
    assert [rows_of(m) for m in unshuffled] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(DataProtoError, match="8 % 3 != 0"):
        data.make_iterator(mini_batch_size=3, epochs=1)


def test_collate_fn_keeps_list_rows_one_dimensional():
    data = DataProto.from_dict(
        {"x": torch.arange(3)}, {"ids": [[1, 2], [3, 4], [5]], "pair": np.array([[1, 2], [3, 4], [5, 6]], dtype=object)}
    )
    data.non_tensor_batch["same_len"] = np.empty(3, dtype=object)
    for i in range(3):
        data.non_tensor_batch["same_len"][i] = [i, i]
    collated = collate_fn([data[i] for i in range(3)])
    assert collated.non_tensor_batch["same_len"].shape == (3,)
    assert collated.non_tensor_batch["same_len"][1] == [1, 1]
    assert collated.non_tensor_batch["pair"].shape == (3, 2)  # rows of a 2-D column stack back
    assert collated.non_tensor_batch["ids"][2] == [5]
    assert collated.batch["x"].tolist() == [0, 1, 2]


# ---------------------------------------------------------------------------------------------
# devices, persistence, TensorDict conversion
# ---------------------------------------------------------------------------------------------


def test_to_moves_batch_and_returns_self():
    data = make_data(2)
    assert data.to("cpu") is data and data.batch.device == torch.device("cpu")


def test_pickle_and_deepcopy_round_trip():
    data = make_data(4, meta_info={"info": [1, 2]})
    restored = pickle.loads(pickle.dumps(data))
    assert_same(restored, data)
    assert_same(copy.deepcopy(data), data)
    batchless = DataProto.from_dict(non_tensors={"x": [1, 2]})
    assert pickle.loads(pickle.dumps(batchless)).batch is None


def test_pickle_keeps_nested_jagged_and_exotic_dtypes():
    jagged = torch.nested.as_nested_tensor([torch.arange(2), torch.arange(5), torch.arange(1)], layout=torch.jagged)
    batch = TensorDict(
        {
            "j": jagged,
            "bf16": torch.randn(3, 2).bfloat16(),
            "flag": torch.tensor([True, False, True]),
            "strided": torch.randn(2, 3).t(),
        },
        batch_size=[3],
    )
    restored = pickle.loads(pickle.dumps(DataProto(batch=batch)))
    assert restored.batch["j"].is_nested and restored.batch["j"].layout == torch.jagged
    assert [t.tolist() for t in restored.batch["j"].unbind()] == [[0, 1], [0, 1, 2, 3, 4], [0]]
    for key in ("bf16", "flag", "strided"):
        assert restored.batch[key].dtype == batch[key].dtype and torch.equal(restored.batch[key], batch[key])


def test_save_and_load_from_disk(tmp_path):
    data = make_data(3, meta_info={"info": "test_info"})
    path = tmp_path / "data.pkl"
    data.save_to_disk(path)
    assert_same(DataProto.load_from_disk(path), data)


def test_to_tensordict_and_back():
    data = make_data(3, meta_info={"name": "abdce"})
    td = data.to_tensordict()
    assert torch.equal(td["obs"], data.batch["obs"])
    assert td["labels"] == ["a", "b", "c"]
    assert td["name"] == "abdce"
    back = DataProto.from_tensordict(td)
    assert_same(back, data)
    with pytest.raises(DataProtoError, match="more than one"):
        DataProto.from_dict({"x": torch.zeros(2)}, meta_info={"x": 1}).to_tensordict()


def test_from_tensordict_sorts_values_by_kind():
    td = TensorDict({"obs": torch.zeros(2, 3)}, batch_size=[2])
    td["uid"] = NonTensorStack(NonTensorData([1, 2]), NonTensorData([3, 4]), batch_size=[2])
    td["temperature"] = NonTensorData(0.7)
    data = DataProto.from_tensordict(td, meta_info={"step": 1})
    assert list(data.batch.keys()) == ["obs"]
    assert data.non_tensor_batch["uid"].shape == (2,) and data.non_tensor_batch["uid"][1] == [3, 4]
    assert data.meta_info == {"step": 1, "temperature": 0.7}
    nested = TensorDict({"sub": TensorDict({"a": torch.zeros(2)}, [2])}, batch_size=[2])
    with pytest.raises(DataProtoError, match="nested TensorDicts"):
        DataProto.from_tensordict(nested)


# ---------------------------------------------------------------------------------------------
# serialization helpers
# ---------------------------------------------------------------------------------------------


def test_serialize_single_tensor_round_trip():
    for tensor in (torch.randn(3, 4, 5), torch.randint(0, 9, (2, 3)), torch.zeros(0, 4), torch.tensor(3.5)):
        restored = deserialize_single_tensor(serialize_single_tensor(tensor))
        assert restored.shape == tensor.shape and restored.dtype == tensor.dtype and torch.equal(restored, tensor)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_serialize_tensordict_regular_nested_and_device():
    strided_nested = torch.nested.as_nested_tensor([torch.randn(2, 3), torch.randn(3, 4), torch.randn(1, 5)])
    td = TensorDict({"nested": strided_nested, "regular": torch.randn(3, 4, 5)}, batch_size=[3], device="cpu")
    batch_size, device, encoded = serialize_tensordict(td)
    restored = deserialize_tensordict((batch_size, device, encoded))
    assert restored.batch_size == td.batch_size and str(restored.device) == "cpu"
    assert torch.equal(restored["regular"], td["regular"])
    assert restored["nested"].is_nested and restored["nested"].layout == td["nested"].layout
    for original, back in zip(td["nested"].unbind(), restored["nested"].unbind()):
        assert torch.equal(original, back)
    two_dim = TensorDict({"x": torch.randn(5, 3, 2)}, batch_size=[5, 3])
    assert deserialize_tensordict(serialize_tensordict(two_dim)).batch_size == torch.Size([5, 3])
    with pytest.raises(DataProtoError, match="invalid encoding"):
        deserialize_tensordict(((1,), None, {"x": ("a",)}))


def test_get_data_info_and_print_size(capsys):
    data = make_data(2, meta_info={"step": 1})
    info = data.get_data_info()
    assert "obs: (2, 2) (torch.int64)" in info and "labels: ndarray(2,) (object)" in info and "step: int" in info
    data.print_size(prefix="p")
    assert capsys.readouterr().out.startswith("p, Size of tensordict:")


def test_row_operations_carry_jagged_tensors():
    lengths = [2, 5, 1, 3]
    jagged = torch.nested.as_nested_tensor([torch.arange(n) for n in lengths], layout=torch.jagged)
    data = DataProto.from_dict({"ids": jagged, "x": torch.arange(4)}, {"u": list("abcd")})

    def jagged_lengths(d: DataProto) -> list[int]:
        return [len(t) for t in d.batch["ids"].unbind()]

    assert data[1].batch["ids"].tolist() == [0, 1, 2, 3, 4]
    assert jagged_lengths(data[[3, 1]]) == [3, 5]
    assert jagged_lengths(data.repeat(2)) == [2, 2, 5, 5, 1, 1, 3, 3]
    assert jagged_lengths(DataProto.concat(data.chunk(2))) == lengths
    padded, pad_size = pad_dataproto_to_divisor(data, 3)
    assert jagged_lengths(padded) == lengths + [2, 5] and pad_size == 2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batch_indexing_pickling_and_moving_back():
    data = make_data(4).to("cuda")
    assert data.batch.device.type == "cuda"
    assert rows_of(data[[3, 1]]) == [3, 1] and rows_of(data[torch.tensor([True, False, True, False])]) == [0, 2]
    restored = pickle.loads(pickle.dumps(data))
    assert restored.batch.device.type == "cuda" and torch.equal(restored.batch["obs"], data.batch["obs"])
    assert DataProto.concat(data.chunk(2)).batch["obs"].device.type == "cuda"
    assert data.to_tensordict().device.type == "cuda"
    assert data.to("cpu").batch.device == torch.device("cpu")
