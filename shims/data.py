"""The data boundary between V0 and V1: `DataProto` <-> `TensorDict` <-> transfer-store rows.

Two conversions, each lossless in both directions:

**DataProto <-> TensorDict** (`dataproto_to_tensordict`, `tensordict_to_dataproto`). Tensors stay
as they are (padded, masks included, nested jagged tensors included), each non-tensor column
becomes a `NonTensorStack` (one object per row), each meta_info entry a `NonTensorData`. One
extra entry, `DATAPROTO_LAYOUT_KEY`, records which keys were meta_info and each column's numpy
dtype and trailing shape, so the way back restores them exactly. A TensorDict made elsewhere
(without that entry) converts like `DataProto.from_tensordict`.

**DataProto <-> rows** (`dataproto_to_rows`, `rows_to_dataproto`). A row is the transfer-store
shape: `{field name: per-row value}`, where a padded token tensor is cut down to the row's real
tokens. Every tensor field has a *layout* that says how it was padded (see `FieldLayout`):

- `prompt`: `[B, P]`, left-padded (`prompts`); real tokens are `attention_mask[:, :P] == 1`.
- `response`: `[B, R]`, right-padded (`responses`, `response_mask`, log-probs, values,
  advantages...); real tokens are `attention_mask[:, P:] == 1`. Without an attention mask the
  response ends at the last 1 of `response_mask` (tool tokens are 0 there, so that mask alone
  cannot mark padding in the middle).
- `sequence`: `[B, P + R]` = prompt part then response part (`input_ids`, `attention_mask`,
  `position_ids`); the row value is the prompt's real tokens followed by the response's.
- `row`: any other fixed shape, kept whole (`tensor[i]`); `jagged`: a nested tensor, unbound.

The names of docs/CONTRACTS.md have fixed layouts (`KNOWN_LAYOUTS`); another field is
`response` / `sequence` / `prompt` if its width (dim 1) or, coming back from rows, every row's
length matches that part, else `row` (or `jagged` for rows of varying length). Pass
`layouts={name: layout}` to override. Padding is regenerated on the way back: token-id fields
with `pad_token_id`, `position_ids` with 0 on the left and the last real position on the right
(the contract's `cumsum(attention_mask) - 1`, clamped at 0), everything else with
`pad_values.get(name, 0)`. So a DataProto built to the contract survives the round trip
bit-for-bit; masks that are not contiguous (padding inside real tokens) are refused, not guessed.
meta_info does not travel in rows; pass it to `rows_to_dataproto`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Mapping, Sequence

import numpy as np
import torch
from tensordict import NonTensorData, TensorDict

from legacy_v0.protocol import DataProto, object_column

__all__ = [
    "DATAPROTO_LAYOUT_KEY",
    "KNOWN_LAYOUTS",
    "DataConversionError",
    "FieldLayout",
    "dataproto_to_rows",
    "dataproto_to_tensordict",
    "rows_to_dataproto",
    "tensordict_to_dataproto",
]

FieldLayout = Literal["prompt", "response", "sequence", "row", "jagged"]
_LAYOUTS = ("prompt", "response", "sequence", "row", "jagged")

# The batch layout of docs/CONTRACTS.md (shared with V1 stages).
KNOWN_LAYOUTS: dict[str, FieldLayout] = {
    "prompts": "prompt",
    **{
        name: "response"
        for name in (
            "responses",
            "response_mask",
            "old_log_probs",
            "ref_log_prob",
            "values",
            "token_level_scores",
            "token_level_rewards",
            "advantages",
            "returns",
            "rollout_log_probs",
            "entropys",
        )
    },
    **{name: "sequence" for name in ("input_ids", "attention_mask", "position_ids")},
}
_TOKEN_ID_FIELDS = ("prompts", "responses", "input_ids")
# Fields whose per-row length defines the response part, most trusted first.
_RESPONSE_LENGTH_FIELDS = ("responses", "response_mask")

DATAPROTO_LAYOUT_KEY = "_dataproto_layout"


class DataConversionError(ValueError):
    """A DataProto, TensorDict or list of rows cannot be converted without losing data; the message says why."""


# ---------------------------------------------------------------------------------------------
# DataProto <-> TensorDict
# ---------------------------------------------------------------------------------------------


def dataproto_to_tensordict(data: DataProto) -> TensorDict:
    """A TensorDict of batch size `[len(data)]` holding all of `data`; see the module docstring."""
    if DATAPROTO_LAYOUT_KEY in data.meta_info:
        raise DataConversionError(f"meta_info key {DATAPROTO_LAYOUT_KEY!r} is reserved for this conversion; rename it")
    result = data.to_tensordict()
    result[DATAPROTO_LAYOUT_KEY] = NonTensorData(
        {
            "has_batch": data.batch is not None,
            "meta_info_keys": list(data.meta_info),
            "columns": {key: (value.dtype.str, value.shape[1:]) for key, value in data.non_tensor_batch.items()},
        }
    )
    return result


def tensordict_to_dataproto(tensor_dict: TensorDict) -> DataProto:
    """Inverse of `dataproto_to_tensordict`; a TensorDict without its layout record converts like
    `DataProto.from_tensordict` (tensors -> batch, NonTensorStack -> column, NonTensorData -> meta_info)."""
    if DATAPROTO_LAYOUT_KEY not in tensor_dict.keys():
        return DataProto.from_tensordict(tensor_dict)
    layout = tensor_dict.get(DATAPROTO_LAYOUT_KEY).data
    data = DataProto.from_tensordict(tensor_dict.exclude(DATAPROTO_LAYOUT_KEY))
    n_rows = tensor_dict.batch_size[0] if tensor_dict.batch_size else 0
    for key, (dtype, trailing_shape) in layout["columns"].items():
        if key in data.non_tensor_batch:
            values = list(data.non_tensor_batch[key])
        elif key in data.meta_info:  # a column of one repeated value may come back as a single NonTensorData
            values = [data.meta_info.pop(key)] * n_rows
        else:
            raise DataConversionError(f"column {key!r} named in the layout record is missing from the TensorDict")
        data.non_tensor_batch[key] = _restore_column(values, np.dtype(dtype), tuple(trailing_shape))
    unexpected_meta = set(data.meta_info) - set(layout["meta_info_keys"])
    if unexpected_meta:
        raise DataConversionError(
            f"TensorDict entries {sorted(unexpected_meta)} are single values but not "
            f"meta_info keys of the original DataProto; store per-row data as NonTensorStack"
        )
    if data.batch is None and layout["has_batch"]:
        data.batch = TensorDict({}, batch_size=[n_rows], device=tensor_dict.device)
    data.check_consistency()
    return data


def _restore_column(values: list, dtype: np.dtype, trailing_shape: tuple[int, ...]) -> np.ndarray:
    if dtype == object and not trailing_shape:  # noqa: E721 - a numpy dtype equals object, is not it
        return object_column(values)
    column = np.empty((len(values), *trailing_shape), dtype=dtype)
    for index, value in enumerate(values):
        column[index] = value
    return column


# ---------------------------------------------------------------------------------------------
# DataProto -> rows
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spans:
    """Padded widths (`prompt_width` P, `response_width` R) and each row's real prompt / response lengths."""

    prompt_width: int
    response_width: int
    prompt_lengths: list[int]
    response_lengths: list[int]


def dataproto_to_rows(data: DataProto, layouts: Mapping[str, FieldLayout] | None = None) -> list[dict[str, Any]]:
    """One dict per row: tensors cut to the row's real tokens (and copied), non-tensor values as stored.

    Raises `DataConversionError` if a field name is both a tensor and a column, a mask is not
    contiguous, a known field has the wrong width, or a column holds torch tensors (which rows
    could not tell apart from tensor fields).
    """
    layouts = _checked_layouts(layouts)
    tensors = dict(data.batch.items()) if data.batch is not None else {}
    both = tensors.keys() & data.non_tensor_batch.keys()
    if both:
        raise DataConversionError(f"fields {sorted(both)} are both tensors and non-tensor columns; rename one side")
    field_layouts, prompt_width, response_width = _resolve_batch_layouts(tensors, layouts)
    n_rows = len(data)
    spans = _Spans(
        prompt_width,
        response_width,
        _prompt_lengths(tensors, field_layouts, prompt_width, n_rows),
        _response_lengths(tensors, prompt_width, response_width, n_rows),
    )
    rows: list[dict[str, Any]] = [{} for _ in range(len(data))]
    for key, tensor in tensors.items():
        _check_width(key, tensor, field_layouts[key], spans)
        for row, value in zip(rows, _unpad(tensor, field_layouts[key], spans)):
            row[key] = value
    for key, column in data.non_tensor_batch.items():
        if any(isinstance(value, torch.Tensor) for value in column.flat):
            raise DataConversionError(
                f"non-tensor column {key!r} holds torch tensors, which rows cannot tell apart "
                f"from tensor fields; move it into batch or store numpy arrays"
            )
        for index, row in enumerate(rows):
            row[key] = column[index]
    return rows


def _resolve_batch_layouts(
    tensors: dict[str, torch.Tensor], layouts: Mapping[str, FieldLayout]
) -> tuple[dict[str, FieldLayout], int, int]:
    """Each field's layout plus the padded widths P and R, read off the fields of known layout.

    Order: `layouts` overrides, then nested tensors (`jagged`), then `KNOWN_LAYOUTS`; any other
    field is matched by its width once P and R are known.
    """
    known: dict[str, FieldLayout] = {}
    for key, tensor in tensors.items():
        if key in layouts:
            known[key] = layouts[key]
        elif tensor.is_nested:
            known[key] = "jagged"
        elif key in KNOWN_LAYOUTS:
            known[key] = KNOWN_LAYOUTS[key]

    def width_of(layout: str) -> int | None:
        return next((tensors[k].shape[1] for k, v in known.items() if v == layout), None)

    response_width = width_of("response") or 0
    prompt_width = width_of("prompt")
    if prompt_width is None:
        sequence_width = width_of("sequence")
        prompt_width = sequence_width - response_width if sequence_width is not None else 0
    resolved = {
        key: known.get(key) or _layout_by_width(tensor, prompt_width, response_width) for key, tensor in tensors.items()
    }
    return resolved, prompt_width, response_width


def _layout_by_width(tensor: torch.Tensor, prompt_width: int, response_width: int) -> FieldLayout:
    width = tensor.shape[1] if tensor.dim() >= 2 else None
    if width is not None and response_width and width == response_width:
        return "response"
    if width is not None and prompt_width and width == prompt_width + response_width:
        return "sequence"
    if width is not None and prompt_width and width == prompt_width:
        return "prompt"
    return "row"


def _prompt_lengths(tensors, field_layouts, prompt_width: int, n_rows: int) -> list[int]:
    if not any(layout in ("prompt", "sequence") for layout in field_layouts.values()):
        return [0] * n_rows
    mask = tensors.get("attention_mask")
    if mask is None:
        raise DataConversionError("cannot unpad prompt tokens without an 'attention_mask' field; add it to the batch")
    prompt_mask = mask[:, :prompt_width].long()
    if bool((prompt_mask[:, 1:] < prompt_mask[:, :-1]).any()):
        raise DataConversionError(
            "attention_mask is not left-padded over the prompt part (a 0 follows a 1), so "
            "prompt rows cannot be cut losslessly; keep such fields with layout 'row'"
        )
    return prompt_mask.sum(dim=1).tolist()


def _response_lengths(tensors, prompt_width: int, response_width: int, n_rows: int) -> list[int]:
    if not response_width:
        return [0] * n_rows
    if "attention_mask" in tensors:
        mask = tensors["attention_mask"][:, prompt_width:].long()
        if bool((mask[:, 1:] > mask[:, :-1]).any()):
            raise DataConversionError(
                "attention_mask is not right-padded over the response part (a 1 follows a 0), "
                "so response rows cannot be cut losslessly"
            )
        return mask.sum(dim=1).tolist()
    if "response_mask" in tensors:
        mask = tensors["response_mask"].bool()
        positions = torch.arange(1, response_width + 1).expand_as(mask)
        return torch.where(mask, positions, 0).max(dim=1).values.tolist()
    raise DataConversionError("cannot find where responses end: add 'attention_mask' (or 'response_mask') to the batch")


def _check_width(key: str, tensor: torch.Tensor, layout: str, spans: _Spans) -> None:
    expected = {
        "prompt": spans.prompt_width,
        "response": spans.response_width,
        "sequence": spans.prompt_width + spans.response_width,
    }.get(layout)
    if expected is not None and (tensor.dim() < 2 or tensor.shape[1] != expected):
        raise DataConversionError(
            f"field {key!r} of shape {tuple(tensor.shape)} should be {layout}-aligned with "
            f"width {expected} on dim 1; pass layouts={{{key!r}: 'row'}} to keep it whole"
        )


def _unpad(tensor: torch.Tensor, layout: str, spans: _Spans) -> list[torch.Tensor]:
    """Each row's real part of a padded tensor, as fresh tensors that share no memory with the batch."""
    if layout == "jagged":
        return [component.clone() for component in tensor.unbind()]
    rows = []
    p_width = spans.prompt_width
    for index, row in enumerate(tensor):
        prompt_len, response_len = spans.prompt_lengths[index], spans.response_lengths[index]
        if layout == "prompt":
            row = row[p_width - prompt_len :]
        elif layout == "response":
            row = row[:response_len]
        elif layout == "sequence":
            row = torch.cat([row[p_width - prompt_len : p_width], row[p_width : p_width + response_len]])
        rows.append(row.clone())
    return rows


# ---------------------------------------------------------------------------------------------
# rows -> DataProto
# ---------------------------------------------------------------------------------------------


def rows_to_dataproto(
    rows: Sequence[Mapping[str, Any]],
    meta_info: dict | None = None,
    *,
    pad_token_id: int = 0,
    pad_values: Mapping[str, float] | None = None,
    prompt_width: int | None = None,
    response_width: int | None = None,
    layouts: Mapping[str, FieldLayout] | None = None,
) -> DataProto:
    """Pad rows (as made by `dataproto_to_rows` or read from the transfer store) back into a DataProto.

    Tensor fields are padded to `prompt_width` / `response_width` (default: the longest prompt /
    response among the rows); other fields become 1-D object columns holding each row's value
    (so a multi-dimensional column comes back as a 1-D column of its row arrays). Every row must
    have the same fields, and a field must be a tensor in every row or in none.
    """
    if not rows:
        raise DataConversionError("rows_to_dataproto needs at least one row")
    layouts = _checked_layouts(layouts)
    tensor_keys, object_keys = _split_fields(rows)
    tensor_values = {key: [row[key] for row in rows] for key in tensor_keys}
    prompt_lengths, response_lengths = _row_lengths(tensor_values, layouts)
    spans = _Spans(
        _width(prompt_width, prompt_lengths, "prompt"),
        _width(response_width, response_lengths, "response"),
        prompt_lengths,
        response_lengths,
    )
    pad_values = dict(pad_values or {})
    tensors = {}
    for key, values in tensor_values.items():
        layout = layouts.get(key) or KNOWN_LAYOUTS.get(key) or _layout_by_lengths(values, spans)
        fill = pad_values.get(key, pad_token_id if key in _TOKEN_ID_FIELDS else 0)
        # position_ids' right padding repeats the last position, as the contract's cumsum(mask) - 1 does
        repeat_last = key == "position_ids" and key not in pad_values
        tensors[key] = _pad(key, values, layout, spans, fill, repeat_last_on_right=repeat_last)
    columns = {key: object_column(row[key] for row in rows) for key in object_keys}
    batch = TensorDict(tensors, batch_size=[len(rows)]) if tensors else None
    return DataProto(batch=batch, non_tensor_batch=columns, meta_info={} if meta_info is None else meta_info)


def _split_fields(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    fields = list(rows[0])
    for index, row in enumerate(rows[1:], start=1):
        if set(row) != set(fields):
            raise DataConversionError(
                f"row {index} has fields {sorted(row)} but row 0 has {sorted(fields)}; give every row the same fields"
            )
    tensor_keys, object_keys = [], []
    for key in fields:
        is_tensor = [isinstance(row[key], torch.Tensor) for row in rows]
        if any(is_tensor) and not all(is_tensor):
            raise DataConversionError(
                f"field {key!r} is a tensor in some rows and not in others; make it a tensor in every row or in none"
            )
        dtypes = {row[key].dtype for row in rows} if all(is_tensor) else set()
        if len(dtypes) > 1:
            raise DataConversionError(
                f"field {key!r} has rows of dtypes {sorted(map(str, dtypes))}; cast every row to one dtype"
            )
        (tensor_keys if all(is_tensor) else object_keys).append(key)
    return tensor_keys, object_keys


def _row_lengths(tensor_values: dict[str, list[torch.Tensor]], layouts) -> tuple[list[int], list[int]]:
    """Each row's prompt and response length, read off the fields whose layout is known."""

    def first_field(layout: str, preferred: Sequence[str] = ()) -> str | None:
        ordered = [k for k in preferred if k in tensor_values] + list(tensor_values)
        return next((k for k in ordered if (layouts.get(k) or KNOWN_LAYOUTS.get(k)) == layout), None)

    n_rows = len(next(iter(tensor_values.values()), []))
    response_key = first_field("response", _RESPONSE_LENGTH_FIELDS)
    response_lengths = [len(v) for v in tensor_values[response_key]] if response_key else [0] * n_rows
    prompt_key, sequence_key = first_field("prompt"), first_field("sequence")
    if prompt_key:
        prompt_lengths = [len(v) for v in tensor_values[prompt_key]]
    elif sequence_key:
        prompt_lengths = [len(v) - r for v, r in zip(tensor_values[sequence_key], response_lengths)]
    else:
        prompt_lengths = [0] * n_rows
    if any(length < 0 for length in prompt_lengths):
        raise DataConversionError(
            f"{sequence_key!r} is shorter than {response_key!r} in some row; "
            f"a sequence field must hold the prompt tokens followed by the response tokens"
        )
    return prompt_lengths, response_lengths


def _width(requested: int | None, lengths: list[int], part: str) -> int:
    longest = max(lengths, default=0)
    if requested is None:
        return longest
    if requested < longest:
        raise DataConversionError(
            f"{part}_width={requested} is shorter than the longest {part} ({longest} tokens); raise it or leave it None"
        )
    return requested


def _layout_by_lengths(values: list[torch.Tensor], spans: _Spans) -> FieldLayout:
    lengths = [len(v) if v.dim() else None for v in values]
    for layout, expected in (
        ("response", spans.response_lengths),
        ("sequence", [p + r for p, r in zip(spans.prompt_lengths, spans.response_lengths)]),
        ("prompt", spans.prompt_lengths),
    ):
        if any(expected) and lengths == expected:
            return layout
    return "row" if len({tuple(v.shape) for v in values}) == 1 else "jagged"


def _pad(
    key: str, values: list[torch.Tensor], layout: str, spans: _Spans, fill: float, repeat_last_on_right: bool = False
) -> torch.Tensor:
    """Stack one field's rows into `[B, width, *rest]` (or a jagged / stacked tensor for those layouts).

    Padding is `fill`, except right of a row's real tokens when `repeat_last_on_right`: there the
    row's last value is repeated.
    """
    if layout == "row":
        return torch.stack(values)
    if layout == "jagged":
        return torch.nested.as_nested_tensor(values, layout=torch.jagged)
    p_width, r_width = spans.prompt_width, spans.response_width
    width = {"prompt": p_width, "response": r_width, "sequence": p_width + r_width}[layout]
    first = values[0]
    padded = torch.full((len(values), width, *first.shape[1:]), fill, dtype=first.dtype, device=first.device)
    for index, value in enumerate(values):
        prompt_len, response_len = spans.prompt_lengths[index], spans.response_lengths[index]
        expected = {"prompt": prompt_len, "response": response_len, "sequence": prompt_len + response_len}[layout]
        if len(value) != expected:
            raise DataConversionError(
                f"row {index}: field {key!r} ({layout}) has {len(value)} tokens, expected "
                f"{expected}; its length must match the row's prompt / response"
            )
        if layout == "prompt":
            padded[index, p_width - prompt_len :] = value
        elif layout == "response":
            padded[index, :response_len] = value
        else:
            padded[index, p_width - prompt_len : p_width] = value[:prompt_len]
            padded[index, p_width : p_width + response_len] = value[prompt_len:]
        if repeat_last_on_right and layout != "prompt" and len(value):
            padded[index, (p_width if layout == "sequence" else 0) + response_len :] = value[-1]
    return padded


def _checked_layouts(layouts: Mapping[str, FieldLayout] | None) -> dict[str, FieldLayout]:
    layouts = dict(layouts or {})
    bad = {key: value for key, value in layouts.items() if value not in _LAYOUTS}
    if bad:
        raise DataConversionError(f"unknown layouts {bad}; choose from {list(_LAYOUTS)}")
    return layouts
