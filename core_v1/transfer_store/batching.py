"""Rows -> one TensorDict, and padding of jagged fields where a consumer asks for it.

`rows_to_tensordict` is the one place where stored rows become a batch. Per field:

- tensors of one shape in every row are stacked into a dense `[B, *shape]` tensor;
- tensors whose first dimension varies (the usual 1-D token fields) become one jagged nested
  tensor (`torch.nested`, `layout=torch.jagged`) of shape `[B, j, *rest]`; no padding is made;
- Python objects become a `NonTensorStack`, one object per row (lists stay lists: they are not
  unpacked into sub-stacks as `NonTensorStack.from_list` would do).

`pad_jagged` turns either tensor kind into a padded tensor and a 0/1 mask, left or right padded.
`take_rows` picks rows of a batch (cheaply, where tensordict's indexing of object columns is slow).
"""

from __future__ import annotations

import pickle
from typing import Literal, Mapping, Sequence

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict

from core_v1.transfer_store.errors import FieldAssemblyError, MissingFieldError


def rows_to_tensordict(
    rows: Sequence[Mapping[str, object]], keys: Sequence[str], fields: Sequence[str], where: str = ""
) -> TensorDict:
    """Batch `fields` of `rows` (row i is stored under `keys[i]`) into a TensorDict of batch size [len(rows)].

    Non-tensor objects are copied (immutable scalars need not be), and tensors are copied by
    stacking / nesting, so the batch shares no mutable state with the stored rows. `where`
    prefixes error messages.
    """
    for key, row in zip(keys, rows):
        absent = [field for field in fields if field not in row]
        if absent:
            raise missing_field_error(where, key, row, absent)
    batch = TensorDict({}, batch_size=[len(rows)])
    for field in fields:
        batch[field] = _batch_field(field, [row[field] for row in rows], where)
    return batch


def missing_field_error(where: str, key: str, row: Mapping[str, object], absent: Sequence[str]) -> MissingFieldError:
    return MissingFieldError(
        f"{where}row {key!r} has no field {absent[0]!r} (it has {sorted(row)}); "
        f"pass fields=[...] naming only fields every requested row has"
    )


def _batch_field(field: str, values: list, where: str):
    tensor_flags = [isinstance(value, torch.Tensor) for value in values]
    if not any(tensor_flags):
        return _object_column(values)
    if not all(tensor_flags):
        raise FieldAssemblyError(
            f"{where}field {field!r} holds tensors in some rows and Python objects in others; "
            f"store it as a tensor in every row or as an object in every row"
        )
    dtypes = {value.dtype for value in values}
    if len(dtypes) > 1:
        raise FieldAssemblyError(
            f"{where}field {field!r} has rows of different dtypes {sorted(map(str, dtypes))}; "
            f"cast every row to one dtype before put"
        )
    shapes = {tuple(value.shape) for value in values}
    if len(shapes) == 1:
        return torch.stack(values)
    trailing = {shape[1:] for shape in shapes}
    if any(len(shape) == 0 for shape in shapes) or len(trailing) > 1:
        raise FieldAssemblyError(
            f"{where}field {field!r} has row shapes {sorted(shapes)}: only the first dimension may vary "
            f"between rows (a jagged batch)"
        )
    return torch.nested.nested_tensor(list(values), layout=torch.jagged)


# Immutable values that a batch can share with the store, and that tensordict wraps on a fast path.
_SCALARS = (str, bytes, int, float, bool, type(None))


def _object_column(values: list) -> NonTensorStack:
    """One object per row, copied: by a pickle round trip per row (every stored object pickles,
    `put` checks it), several times cheaper than a deepcopy, and rows stay unshared.

    The members are scalars or plain NonTensorData and no `batch_size` is passed: tensordict then
    stacks them on its fast path instead of checking each member.
    """
    if not values:
        return NonTensorStack(batch_size=[0])
    return NonTensorStack(
        *(value if type(value) in _SCALARS else NonTensorData(copied_object(value)) for value in values)
    )


def copied_object(value: object) -> object:
    """A stored object as a reader gets it: immutable scalars shared, anything else copied (a pickle
    round trip: every stored object pickles, and it is several times cheaper than a deepcopy)."""
    return value if type(value) in _SCALARS else pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def object_column(values: list) -> NonTensorStack:
    """A per-row object column (one Python object per row) as a batch holds it."""
    return _object_column(values)


def take_rows(batch: TensorDict, rows: Sequence[int]) -> TensorDict:
    """`batch[rows]` (rows may repeat or reorder): tensors indexed into new tensors, each object
    column a new stack over the same per-row members (tensordict's own indexing rebuilds every
    member, about a hundred times slower for a batch of a hundred rows)."""
    index = torch.tensor(list(rows), dtype=torch.long)
    fields = {}
    for name, value in batch.items():
        if isinstance(value, NonTensorStack) and value.batch_dims == 1 and len(index):
            fields[name] = NonTensorStack(*[value.tensordicts[row] for row in rows])
        elif isinstance(value, torch.Tensor) and not value.is_nested:
            # The rows `value[index]` takes; advanced indexing can cost milliseconds in torch's
            # thread pool on a busy machine where index_select costs microseconds.
            fields[name] = value.index_select(0, index)
        else:
            fields[name] = value[index]
    return TensorDict(fields, batch_size=[len(index)], device=batch.device)


def row_lengths(batch_field: torch.Tensor) -> torch.Tensor:
    """Length of each row's first dimension, for a jagged nested tensor or a dense `[B, L, ...]` tensor."""
    if batch_field.is_nested:
        return batch_field.offsets().diff()
    if batch_field.dim() < 2:
        raise ValueError(f"a dense field needs shape [B, L, ...] to have row lengths, got {tuple(batch_field.shape)}")
    return torch.full((batch_field.shape[0],), batch_field.shape[1], dtype=torch.long, device=batch_field.device)


def pad_jagged(
    batch_field: torch.Tensor, side: Literal["right", "left"] = "right", pad_value: float = 0, length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad a jagged field (as returned by `get`) to `[B, L, *rest]`; return `(padded, mask)`.

    `mask` is `[B, L]` int64, 1 where a real entry is and 0 at padding (the `attention_mask`
    convention). `side="left"` puts the padding before each row (prompts), `"right"` after
    (responses). `L` is the longest row, or `length` when given (it must fit the longest row).
    A dense field (every row had the same length, so `get` stacked it) is accepted too.
    """
    if side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    lengths = row_lengths(batch_field)
    longest = int(lengths.max()) if lengths.numel() else 0
    target = longest if length is None else length
    if target < longest:
        raise ValueError(f"cannot pad to length {target}: the longest row has {longest} entries")
    if batch_field.is_nested and batch_field.device.type == "cpu":
        return _pad_jagged_cpu(batch_field, lengths, side, pad_value, target)
    if batch_field.is_nested:
        rest = tuple(batch_field.shape[2:])
        padded = torch.nested.to_padded_tensor(batch_field, pad_value, output_size=(len(lengths), target, *rest))
    else:
        padded = _pad_dense(batch_field, target, pad_value)
    if side == "left":
        return _right_to_left(padded, lengths, pad_value)
    positions = torch.arange(target, device=padded.device)
    return padded, (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()


def _pad_jagged_cpu(
    batch_field: torch.Tensor, lengths: torch.Tensor, side: str, pad_value: float, target: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`pad_jagged` of a jagged tensor on the CPU: one scatter of its values into the padded tensor
    (torch's `to_padded_tensor` and the left shift cost ~2 ms a field for a few hundred short rows)."""
    counts = lengths.numpy()
    rows = len(counts)
    values = batch_field.values()
    ends = np.cumsum(counts)
    within = np.arange(int(ends[-1]) if rows else 0) - np.repeat(ends - counts, counts)  # each entry's place in its row
    if side == "left":
        within += np.repeat(target - counts, counts)
    flat = np.repeat(np.arange(rows) * target, counts) + within
    padded = values.new_full((rows * target, *values.shape[1:]), pad_value)
    padded.index_copy_(0, torch.from_numpy(flat), values)
    mask = torch.zeros(rows * target, dtype=torch.long)
    mask[torch.from_numpy(flat)] = 1
    return padded.reshape(rows, target, *values.shape[1:]), mask.reshape(rows, target)


def _pad_dense(batch_field: torch.Tensor, target: int, pad_value: float) -> torch.Tensor:
    extra = target - batch_field.shape[1]
    if extra == 0:
        return batch_field.clone()
    filler = batch_field.new_full((batch_field.shape[0], extra, *batch_field.shape[2:]), pad_value)
    return torch.cat([batch_field, filler], dim=1)


def _right_to_left(padded: torch.Tensor, lengths: torch.Tensor, pad_value: float) -> tuple[torch.Tensor, torch.Tensor]:
    # Row i moves right by (L - len_i): left position p reads right position p - shift_i.
    target = padded.shape[1]
    shift = (target - lengths).unsqueeze(1)
    source = torch.arange(target, device=padded.device).unsqueeze(0) - shift
    left_mask = (source >= 0).long()
    index = source.clamp(min=0).view(*source.shape, *([1] * (padded.dim() - 2))).expand_as(padded)
    shifted = torch.gather(padded, 1, index)
    keep = left_mask.bool().view(*left_mask.shape, *([1] * (padded.dim() - 2)))
    return torch.where(keep, shifted, torch.full_like(shifted, pad_value)), left_mask
