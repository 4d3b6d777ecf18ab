"""Round trips DataProto <-> TensorDict and DataProto <-> rows (shims.data), and the refusals."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from legacy_v0.protocol import DataProto, object_column
from shims.data import (
    DATAPROTO_LAYOUT_KEY,
    DataConversionError,
    dataproto_to_rows,
    dataproto_to_tensordict,
    rows_to_dataproto,
    tensordict_to_dataproto,
)

PAD = 9  # a pad token id that is not 0, so a wrong fill shows up


def contract_batch(
    prompt_lengths=(3, 5, 1, 4), response_lengths=(6, 2, 4, 0), prompt_width=5, response_width=6, seed=0
) -> DataProto:
    """A batch laid out as docs/CONTRACTS.md says: left-padded prompts, right-padded responses, masks, stage outputs."""
    generator = torch.Generator().manual_seed(seed)
    n = len(prompt_lengths)
    prompts = torch.full((n, prompt_width), PAD)
    responses = torch.full((n, response_width), PAD)
    prompt_mask = torch.zeros(n, prompt_width, dtype=torch.long)
    response_attention = torch.zeros(n, response_width, dtype=torch.long)
    response_mask = torch.zeros(n, response_width, dtype=torch.long)
    log_probs = torch.zeros(n, response_width)
    for i, (p, r) in enumerate(zip(prompt_lengths, response_lengths)):
        prompts[i, prompt_width - p :] = torch.randint(10, 100, (p,), generator=generator)
        prompt_mask[i, prompt_width - p :] = 1
        responses[i, :r] = torch.randint(10, 100, (r,), generator=generator)
        response_attention[i, :r] = 1
        response_mask[i, :r] = 1
        if r > 2:
            response_mask[i, 1] = 0  # a tool token inside the response: real, but not trained on
        log_probs[i, :r] = -torch.rand(r, generator=generator)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "old_log_probs": log_probs,
            "rm_scores": log_probs * 2,  # not a contract name: resolved as response-aligned by width
            "acc": torch.arange(n, dtype=torch.float32),  # one value per row
            "embedding": torch.randn(n, 3, generator=generator),
        },
        non_tensors={
            "uid": [f"u{i // 2}" for i in range(n)],
            "reward_model": [{"style": "rule", "ground_truth": str(i)} for i in range(n)],
            "raw_prompt": object_column([{"role": "user", "content": f"q{i}"}] for i in range(n)),
        },
        meta_info={"temperature": 0.7, "global_steps": 3, "metrics": {"timing": [1.0]}},
    ).union(DataProto(non_tensor_batch={"tool_calls": object_column([[1, 2]] * n)}))  # equal-length lists, 1-D


def assert_identical(a: DataProto, b: DataProto) -> None:
    assert (a.batch is None) == (b.batch is None)
    if a.batch is not None:
        assert sorted(a.batch.keys()) == sorted(b.batch.keys())
        for key in a.batch.keys():
            x, y = a.batch[key], b.batch[key]
            if x.is_nested:
                assert y.is_nested and [t.tolist() for t in x.unbind()] == [t.tolist() for t in y.unbind()], key
            else:
                assert x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y), key
    assert a.non_tensor_batch.keys() == b.non_tensor_batch.keys()
    for key, column in a.non_tensor_batch.items():
        other = b.non_tensor_batch[key]
        assert column.dtype == other.dtype and column.shape == other.shape, key
        assert column.tolist() == other.tolist(), key
    assert a.meta_info == b.meta_info


# ---------------------------------------------------------------------------------------------
# DataProto <-> TensorDict
# ---------------------------------------------------------------------------------------------


def test_tensordict_round_trip_is_exact():
    data = contract_batch()
    td = dataproto_to_tensordict(data)
    assert td.batch_size == torch.Size([4])
    assert torch.equal(td["attention_mask"], data.batch["attention_mask"])  # padded, masks kept
    assert td["uid"] == ["u0", "u0", "u1", "u1"]
    assert td["temperature"] == 0.7
    assert_identical(tensordict_to_dataproto(td), data)


def test_tensordict_round_trip_keeps_column_dtype_and_shape():
    data = DataProto.from_dict(
        {"x": torch.arange(3)},
        {"grid": np.array([["a", "b"], ["c", "d"], ["e", "f"]], dtype=object), "nulls": [None, None, None]},
        meta_info={"tags": ["x", "y"], "none": None},
    )
    data.non_tensor_batch["count"] = np.array([4, 5, 6], dtype=np.int64)
    data.non_tensor_batch["same"] = np.array(["g", "g", "g"], dtype=object)
    back = tensordict_to_dataproto(dataproto_to_tensordict(data))
    assert_identical(back, data)
    assert back.non_tensor_batch["grid"].shape == (3, 2)
    assert back.non_tensor_batch["count"].dtype == np.int64


def test_tensordict_round_trip_jagged_and_batchless():
    jagged = torch.nested.as_nested_tensor([torch.arange(3), torch.arange(1), torch.arange(2)], layout=torch.jagged)
    data = DataProto.from_dict({"ids": jagged, "x": torch.ones(3)}, {"uid": ["a", "b", "c"]})
    assert_identical(tensordict_to_dataproto(dataproto_to_tensordict(data)), data)
    batchless = DataProto.from_dict(non_tensors={"uid": ["a", "b"]}, meta_info={"k": 1})
    assert_identical(tensordict_to_dataproto(dataproto_to_tensordict(batchless)), batchless)
    empty_batch = DataProto(
        batch=TensorDict({}, batch_size=[2]), non_tensor_batch={"u": np.array([1, 2], dtype=object)}
    )
    assert tensordict_to_dataproto(dataproto_to_tensordict(empty_batch)).batch.batch_size == torch.Size([2])


def test_tensordict_survives_pickling_and_indexing():
    data = contract_batch()
    td = pickle.loads(pickle.dumps(dataproto_to_tensordict(data)))
    assert_identical(tensordict_to_dataproto(td), data)
    rows_1_and_3 = tensordict_to_dataproto(dataproto_to_tensordict(data)[torch.tensor([1, 3])])
    assert_identical(rows_1_and_3, data[[1, 3]])


def test_tensordict_without_layout_record_converts_like_from_tensordict():
    td = TensorDict({"obs": torch.zeros(2, 3)}, batch_size=[2])
    td["uid"] = NonTensorStack(NonTensorData("a"), NonTensorData("b"), batch_size=[2])
    td["temperature"] = NonTensorData(1.0)
    data = tensordict_to_dataproto(td)
    assert list(data.non_tensor_batch["uid"]) == ["a", "b"] and data.meta_info == {"temperature": 1.0}


def test_tensordict_conversion_refusals():
    data = DataProto.from_dict({"x": torch.zeros(2)}, meta_info={DATAPROTO_LAYOUT_KEY: 1})
    with pytest.raises(DataConversionError, match="reserved"):
        dataproto_to_tensordict(data)
    td = dataproto_to_tensordict(DataProto.from_dict({"x": torch.zeros(2)}))
    td["stray"] = NonTensorData("single value")
    with pytest.raises(DataConversionError, match="stray"):
        tensordict_to_dataproto(td)


# ---------------------------------------------------------------------------------------------
# DataProto -> rows
# ---------------------------------------------------------------------------------------------


def test_rows_hold_unpadded_values():
    data = contract_batch()
    rows = dataproto_to_rows(data)
    assert len(rows) == 4
    row = rows[1]  # prompt of 5 tokens, response of 2
    assert row["prompts"].tolist() == data.batch["prompts"][1].tolist()
    assert row["responses"].tolist() == data.batch["responses"][1, :2].tolist()
    assert row["input_ids"].tolist() == row["prompts"].tolist() + row["responses"].tolist()
    assert row["attention_mask"].tolist() == [1] * 7
    assert row["position_ids"].tolist() == list(range(7))
    assert len(row["old_log_probs"]) == len(row["rm_scores"]) == len(row["response_mask"]) == 2
    assert row["acc"].shape == () and row["embedding"].shape == (3,)
    assert row["reward_model"] == {"style": "rule", "ground_truth": "1"} and row["tool_calls"] == [1, 2]
    assert rows[3]["responses"].numel() == 0 and len(rows[3]["prompts"]) == 4
    assert rows[0]["response_mask"].tolist() == [1, 0, 1, 1, 1, 1]  # tool token kept inside the response
    rows[0]["responses"][0] = -1
    assert data.batch["responses"][0, 0] != -1  # rows are copies


def test_rows_round_trip_is_exact():
    data = contract_batch()
    back = rows_to_dataproto(
        dataproto_to_rows(data), meta_info=data.meta_info, pad_token_id=PAD, prompt_width=5, response_width=6
    )
    assert_identical(back, data)


def test_rows_round_trip_with_default_widths_uses_longest_row():
    data = contract_batch(prompt_lengths=(2, 4, 1), response_lengths=(3, 1, 2), prompt_width=6, response_width=5)
    back = rows_to_dataproto(dataproto_to_rows(data), meta_info=data.meta_info, pad_token_id=PAD)
    assert back.batch["prompts"].shape == (3, 4) and back.batch["responses"].shape == (3, 3)
    trimmed = contract_batch(prompt_lengths=(2, 4, 1), response_lengths=(3, 1, 2), prompt_width=4, response_width=3)
    assert_identical(back, trimmed)


def test_rows_round_trip_for_prompt_only_batch():
    """Before generation a batch holds only left-padded prompts as input_ids (no responses)."""
    mask = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 1]])
    input_ids = torch.where(mask.bool(), torch.arange(1, 13).reshape(3, 4), PAD)
    data = DataProto.from_dict(
        {"input_ids": input_ids, "attention_mask": mask, "position_ids": (mask.cumsum(1) - 1).clamp(min=0)},
        {"uid": ["a", "b", "c"]},
    )
    rows = dataproto_to_rows(data)
    assert [len(r["input_ids"]) for r in rows] == [2, 4, 1]
    assert_identical(rows_to_dataproto(rows, pad_token_id=PAD), data)


def test_rows_of_jagged_batch_and_explicit_layouts():
    jagged = torch.nested.as_nested_tensor([torch.arange(3), torch.arange(1)], layout=torch.jagged)
    data = DataProto.from_dict({"ids": jagged, "window": torch.arange(8).reshape(2, 4)})
    rows = dataproto_to_rows(data)
    assert rows[0]["ids"].tolist() == [0, 1, 2] and rows[1]["window"].tolist() == [4, 5, 6, 7]
    assert_identical(rows_to_dataproto(rows), data)
    forced = rows_to_dataproto(rows, layouts={"ids": "response"})
    assert forced.batch["ids"].tolist() == [[0, 1, 2], [0, 0, 0]]


def test_rows_without_attention_mask_use_response_mask():
    response_mask = torch.tensor([[1, 0, 1, 0], [1, 1, 0, 0]])  # row 0 ends in a model token at 2
    responses = torch.tensor([[5, 6, 7, 0], [8, 9, 0, 0]])
    data = DataProto.from_dict({"responses": responses, "response_mask": response_mask})
    rows = dataproto_to_rows(data)
    assert rows[0]["responses"].tolist() == [5, 6, 7] and rows[1]["responses"].tolist() == [8, 9]
    assert_identical(rows_to_dataproto(rows, response_width=4), data)


def test_custom_pad_values():
    data = contract_batch()
    back = rows_to_dataproto(
        dataproto_to_rows(data), pad_token_id=PAD, pad_values={"old_log_probs": -1.0}, prompt_width=5, response_width=6
    )
    assert back.batch["old_log_probs"][3].tolist() == [-1.0] * 6


# ---------------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------------


def test_to_rows_refuses_holes_in_masks():
    data = contract_batch()
    data.batch["attention_mask"][0, 6] = 0  # a hole inside the response
    with pytest.raises(DataConversionError, match="right-padded"):
        dataproto_to_rows(data)
    data = contract_batch()
    data.batch["attention_mask"][1, 0] = 0  # prompt row 1 is full; a hole at its start is fine...
    data.batch["attention_mask"][2, 4] = 0  # ...but this 0 after the prompt's last 1 is not
    data.batch["attention_mask"][2, 3] = 1
    with pytest.raises(DataConversionError, match="left-padded"):
        dataproto_to_rows(data)


def test_to_rows_refusals():
    data = contract_batch()
    data.batch.pop("attention_mask")
    with pytest.raises(DataConversionError, match="attention_mask"):
        dataproto_to_rows(data)
    data = contract_batch()
    data.batch["position_ids"] = torch.zeros(4, 3, 11, dtype=torch.long)  # mrope-style [B, 3, L]
    with pytest.raises(DataConversionError, match="layouts="):
        dataproto_to_rows(data)
    assert dataproto_to_rows(data, layouts={"position_ids": "row"})[0]["position_ids"].shape == (3, 11)
    data = DataProto.from_dict({"x": torch.zeros(2)}, {"t": object_column([torch.ones(1), torch.ones(1)])})
    with pytest.raises(DataConversionError, match="torch tensors"):
        dataproto_to_rows(data)
    with pytest.raises(DataConversionError, match="unknown layouts"):
        dataproto_to_rows(contract_batch(), layouts={"x": "diagonal"})


def test_from_rows_refusals():
    rows = dataproto_to_rows(contract_batch())
    with pytest.raises(DataConversionError, match="at least one row"):
        rows_to_dataproto([])
    with pytest.raises(DataConversionError, match="same fields"):
        rows_to_dataproto([rows[0], {k: v for k, v in rows[1].items() if k != "uid"}])
    mixed = [dict(rows[0]), dict(rows[1])]
    mixed[1]["acc"] = 1.0
    with pytest.raises(DataConversionError, match="tensor in some rows"):
        rows_to_dataproto(mixed)
    with pytest.raises(DataConversionError, match="response_width=3"):
        rows_to_dataproto(rows, response_width=3)
    broken = [dict(row) for row in rows]
    broken[0]["old_log_probs"] = broken[0]["old_log_probs"][:-1]
    with pytest.raises(DataConversionError, match="row 0: field 'old_log_probs'"):
        rows_to_dataproto(broken)
    recast = [dict(row) for row in rows]
    recast[2]["old_log_probs"] = recast[2]["old_log_probs"].double()
    with pytest.raises(DataConversionError, match="dtypes"):
        rows_to_dataproto(recast)
