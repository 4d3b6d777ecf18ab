"""The Ray store client's write side: rows (or `add_columns`' padded tensors) checked and stored as one
`StoredBatch` each, in Ray's object store, or pickled when small enough to travel inside the actor
call (see `ray_store`)."""

from __future__ import annotations

import dataclasses
import itertools
import pickle
import threading
from typing import Any, Mapping, Sequence

import ray
import torch

from core_v1.transfer_store.ledger import check_fields, check_rows_mapping
from core_v1.transfer_store.payloads import Column, StoredBatch, TensorBytes
from core_v1.transfer_store.schema import parse_key
from core_v1.transfer_store.store import check_columns, pickled_objects


class _Staging:
    """A reusable buffer this process concatenates columns into before `ray.put` copies them out:
    a fresh buffer for every put would be page-faulted in, which costs more than the copy."""

    limit = 256 * 2**20  # bytes; a larger put concatenates into a buffer of its own

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self._buffer = torch.empty(0, dtype=torch.uint8)

    def take(self, nbytes: int) -> torch.Tensor:
        """`nbytes` of the buffer; call with `lock` held and keep it until the put has copied them."""
        if nbytes > self.limit:
            return torch.empty(nbytes, dtype=torch.uint8)
        if nbytes > len(self._buffer):
            self._buffer = torch.empty(max(nbytes, 2 * len(self._buffer)), dtype=torch.uint8)
        return self._buffer[:nbytes]


_STAGING = _Staging()
_ALIGN = 64  # bytes: each column starts at a multiple, so any dtype can view it
_INLINE_BYTES = 100_000  # a put with less tensor data travels in the actor call (Ray inlines such arguments)


@dataclasses.dataclass(frozen=True)
class Staged:
    """What a client sends the actor for one put or add_fields."""

    keys: list[str]
    names: list[list[tuple[str, ...]]]  # per payload, each row's field names there (equal tuples pickled once)
    stored: list[ray.ObjectRef | bytes]  # in a list: a top-level ref argument would be resolved
    tensor_bytes: int


def stage(rows: Mapping[str, Mapping[str, Any]]) -> Staged:
    """Check `rows` and store their payloads (see `_stored`): the Python objects and the tensors
    apart, so a reader of the objects alone (the trainer's handle on a batch) receives no tensor."""
    check_rows_mapping(rows)
    for key, fields in rows.items():
        parse_key(key)  # fail before copying any bytes
        check_fields(key, fields)
    parts = [
        {
            key: {name: value for name, value in fields.items() if isinstance(value, torch.Tensor) == tensors}
            for key, fields in rows.items()
        }
        for tensors in (True, False)
    ]
    parts = [part for part in parts if any(part.values())] or [dict(rows)]
    interned: dict[tuple[str, ...], tuple[str, ...]] = {}
    names, stored, tensor_bytes = [], [], 0
    for part in parts:
        names.append([interned.setdefault(tuple(fields), tuple(fields)) for fields in part.values()])
        payload, nbytes = _stored(part)
        stored.append(payload)
        tensor_bytes += nbytes
    return Staged(list(rows), names, stored, tensor_bytes)


def column_batch(keys: list[str], lengths: Sequence[int], columns: Mapping[str, torch.Tensor]) -> Staged:
    """`add_columns`' rows as one stored batch: each column's kept entries (`[i, :lengths[i]]`), in row
    order, are one `Column` made by one masked copy of the padded tensor."""
    check_columns(keys, lengths, columns)
    for key in keys:
        parse_key(key)
    counts = torch.as_tensor([int(length) for length in lengths], dtype=torch.long)
    stored, tensor_bytes = {}, 0
    for name, column in columns.items():
        column = column.detach()
        kept = torch.arange(column.shape[1], device=column.device) < counts.to(column.device)[:, None]
        values = column[kept].cpu().contiguous()  # [sum of lengths, ...], rows end to end
        data = values.reshape(-1).view(torch.uint8).numpy()
        stored[name] = Column(
            data, values.dtype, tuple(column.shape[2:]), tuple(itertools.accumulate(counts.tolist(), initial=0))
        )
        tensor_bytes += values.nbytes
    names = tuple(columns)
    batch = StoredBatch({key: i for i, key in enumerate(keys)}, [names] * len(keys), stored, [{} for _ in keys])
    if tensor_bytes < _INLINE_BYTES:
        payload: ray.ObjectRef | bytes = pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)
    else:
        payload = ray.put(batch)
    return Staged(keys, [[names] * len(keys)], [payload], tensor_bytes)


def _stored(rows: Mapping[str, Mapping[str, Any]]) -> tuple[ray.ObjectRef | bytes, int]:
    """The rows as a `StoredBatch` and their tensor bytes: the batch put into the object store, or, under
    `_INLINE_BYTES` of tensor data, pickled (it then travels inside the actor call, which costs less
    than an object-store round trip)."""
    for key, fields in rows.items():
        check_fields(key, fields)
        pickled_objects(key, {name: value for name, value in fields.items() if not isinstance(value, torch.Tensor)})
    keys = list(rows)
    column_rows = {name: [rows[key][name].detach().cpu().contiguous() for key in keys] for name in _column_names(rows)}
    other = [
        {
            name: _tensor_bytes(value) if isinstance(value, torch.Tensor) else value
            for name, value in rows[key].items()
            if name not in column_rows
        }
        for key in keys
    ]
    sizes = {
        name: -(-sum(t.nbytes for t in tensors) // _ALIGN) * _ALIGN if len(tensors) > 1 else 0
        for name, tensors in column_rows.items()
    }
    tensor_bytes = sum(t.nbytes for tensors in column_rows.values() for t in tensors) + sum(
        value.data.nbytes for row in other for value in row.values() if isinstance(value, TensorBytes)
    )

    def batch(space: torch.Tensor) -> StoredBatch:
        columns, start = {}, 0
        for name, tensors in column_rows.items():
            columns[name] = _column(tensors, space[start : start + sizes[name]])
            start += sizes[name]
        return StoredBatch({key: i for i, key in enumerate(keys)}, [tuple(rows[key]) for key in keys], columns, other)

    if tensor_bytes < _INLINE_BYTES:  # pickled here: the actor keeps and returns opaque bytes
        space = torch.empty(sum(sizes.values()), dtype=torch.uint8)
        return pickle.dumps(batch(space), pickle.HIGHEST_PROTOCOL), tensor_bytes
    with _STAGING.lock:
        return ray.put(batch(_STAGING.take(sum(sizes.values())))), tensor_bytes  # copied out under the lock


def _column_names(rows: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Fields that every row holds as a dense tensor of at least one dimension, one dtype and one
    shape after the first dimension: those are stored as one column."""
    values = list(rows.values())
    names = []
    for name in values[0] if values else ():
        tensors = [fields.get(name) for fields in values]
        if (
            all(
                isinstance(t, torch.Tensor) and t.layout is torch.strided and not t.is_nested and t.dim() >= 1
                for t in tensors
            )
            and len({(t.dtype, tuple(t.shape[1:])) for t in tensors}) == 1
        ):
            names.append(name)
    return names


def _column(tensors: list[torch.Tensor], space: torch.Tensor) -> Column:
    """The rows concatenated into `space`, unless they already lie end to end in one buffer (rows
    split from one batch tensor, a lone row): Ray then copies them from where they are."""
    flat = [t.reshape(-1).view(torch.uint8) for t in tensors]
    data = _adjacent_span(flat)
    if data is None:
        data = space[: sum(t.nbytes for t in tensors)]
        torch.cat(flat, out=data)
    offsets = tuple(itertools.accumulate((t.shape[0] for t in tensors), initial=0))
    return Column(data.numpy(), tensors[0].dtype, tuple(tensors[0].shape[1:]), offsets)


def _adjacent_span(flat: list[torch.Tensor]) -> torch.Tensor | None:
    """The one byte view covering `flat` (1-D uint8 tensors) when each starts where the previous
    ends in the same storage; else None."""
    storage = flat[0].untyped_storage()
    for previous, current in zip(flat, flat[1:]):
        if (
            current.untyped_storage().data_ptr() != storage.data_ptr()
            or current.data_ptr() != previous.data_ptr() + previous.nbytes
        ):
            return None
    start = flat[0].data_ptr() - storage.data_ptr()
    return torch.empty(0, dtype=torch.uint8).set_(storage, start, (sum(t.nbytes for t in flat),))


def _tensor_bytes(tensor: torch.Tensor) -> TensorBytes | torch.Tensor:
    tensor = tensor.detach()
    if tensor.layout is not torch.strided or tensor.is_nested:
        return tensor.cpu()  # sparse or nested: Ray pickles it whole (slow but correct)
    flat = tensor.cpu().contiguous().reshape(-1)
    return TensorBytes(flat.view(torch.uint8).numpy(), tensor.dtype, tuple(tensor.shape))
