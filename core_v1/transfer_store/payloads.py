"""What the Ray store keeps of one put (or `add_fields`), a row read back out of such records, and a batch

A put's rows travel as one `StoredBatch`: each tensor field that every row holds with one dtype and
one trailing shape is a `Column` (the rows' bytes end to end, with row offsets), any other tensor
is a `TensorBytes` of its own and Python objects stay as they are. A row's payload in the store's
actor is a tuple of segments (see `actor`), each naming one such batch.

`gathered_batch` builds a get's batch when its rows are spread over several segments in any order
(a training rank's shard: rows of several agent-loop puts, in the batch's order, with the per-token
outputs of earlier stages in one segment per stage). The rows a stage wrote together share their
segments, so a field's rows come from a few columns: each column's rows are copied out with one
indexed copy, instead of the row-by-row merge costing a Python dict and a tensor view per row and
segment (a 256-row shard over 3 segments: 27 -> 2 ms on the quickstart's machine).
"""

from __future__ import annotations

import dataclasses
import pickle
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

import numpy as np
import ray
import torch

if TYPE_CHECKING:
    from tensordict import TensorDict

# Tensors viewed on the object store's read-only buffers are copied into the batch before anyone
# can write to them; torch's warning about non-writable numpy arrays does not apply.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning, module=__name__
)


@dataclasses.dataclass(frozen=True)
class TensorBytes:
    """A CPU tensor as the flat bytes Ray stores out of band, with what rebuilds the tensor."""

    data: np.ndarray  # uint8, one dimension
    dtype: torch.dtype
    shape: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Column:
    """One tensor field of every row of a put, its rows concatenated along the first dimension."""

    data: np.ndarray  # uint8, the concatenated rows' bytes
    dtype: torch.dtype
    trailing: tuple[int, ...]  # the rows' shape after the first dimension
    offsets: tuple[int, ...]  # row i is entries offsets[i]:offsets[i + 1] of the first dimension

    def values(self) -> torch.Tensor:
        """All rows as one read-only view of the stored bytes (zero-copy)."""
        return torch.from_numpy(self.data).view(self.dtype).reshape(self.offsets[-1], *self.trailing)


@dataclasses.dataclass(frozen=True)
class StoredBatch:
    """What one put stores: its rows' fields, tensor fields by column. (These records are dataclasses,
    not NamedTuples: Ray packs the tuples inside a call's arguments as plain lists.)"""

    position: dict[str, int]  # key -> row number in the put
    names: list[tuple[str, ...]]  # each row's field names, in the order they were put
    columns: dict[str, Column]
    other: list[dict[str, Any]]  # each row's other fields: objects, and tensors as TensorBytes


def stored_tensor(stored: TensorBytes) -> torch.Tensor:
    """A read-only view of the stored bytes (zero-copy): copy it before writing to it."""
    return torch.from_numpy(stored.data).view(stored.dtype).reshape(stored.shape)


_Source = tuple[int, int]  # (index of the segment's batch, the row's position in it)


def gathered_batch(
    batches: Sequence[StoredBatch], keys: Sequence[str], picks: Sequence[Sequence[int]], fields: Sequence[str] | None
) -> TensorDict | None:
    """The batch of rows `keys` (row i over the segments `picks[i]`, indices into `batches`, later ones
    winning), the same batch the row-by-row merge builds, gathered field by field. None where that
    merge must decide: a field missing from a row, a tensor field that is not a column in every
    segment holding it, or columns that disagree on dtype or trailing shape (it builds or refuses)."""
    if not keys:
        return None
    owners = _field_owners(batches, keys, picks)
    wanted = list(fields) if fields is not None else list(dict.fromkeys(name for owner in owners for name in owner))
    from tensordict import TensorDict  # imported where batches are built (see store.py)

    from core_v1.transfer_store.batching import object_column

    out = TensorDict({}, batch_size=[len(keys)])
    for name in wanted:
        sources = [owner.get(name) for owner in owners]
        if None in sources:
            return None
        columns = {batches[index].columns.get(name) is not None for index, _ in sources}
        if columns == {True}:
            value = _gathered_column([batches[index].columns[name] for index, _ in sources], sources, len(keys))
        elif columns == {False}:
            objects = [batches[index].other[position][name] for index, position in sources]
            value = None if any(isinstance(v, (TensorBytes, torch.Tensor)) for v in objects) else object_column(objects)
        else:
            value = None
        if value is None:
            return None
        out[name] = value
    return out


def gathered_objects(
    batches: Sequence[StoredBatch], keys: Sequence[str], picks: Sequence[Sequence[int]], fields: Sequence[str]
) -> dict[str, list] | None:
    """`{field: [each row's stored object]}` of Python-object `fields` (not copied), the values the
    row-by-row merge finds; None where it must decide (a field missing from a row, or a tensor)."""
    owners = _field_owners(batches, keys, picks)
    columns = {}
    for name in fields:
        values = []
        for owner in owners:
            source = owner.get(name)
            if source is None or name in batches[source[0]].columns:
                return None
            values.append(batches[source[0]].other[source[1]][name])
        if any(isinstance(value, (TensorBytes, torch.Tensor)) for value in values):
            return None
        columns[name] = values
    return columns


def _field_owners(
    batches: Sequence[StoredBatch], keys: Sequence[str], picks: Sequence[Sequence[int]]
) -> list[dict[str, _Source]]:
    """For each row, `{field: (segment, position)}` of the newest segment holding the field, fields in
    the order the row-by-row merge meets them. Rows with the same segments and field names (the
    rows a stage wrote together) share the work: the per-row cost is a few dict lookups."""
    resolved: dict[tuple, dict[str, int]] = {}
    owners = []
    for key, pick in zip(keys, picks):
        positions = [batches[index].position[key] for index in pick]
        layout = tuple((index, batches[index].names[position]) for index, position in zip(pick, positions))
        segment_of = resolved.get(layout)
        if segment_of is None:
            segment_of = {name: slot for slot, (_, names) in enumerate(layout) for name in names}
            resolved[layout] = segment_of
        owners.append({name: (pick[slot], positions[slot]) for name, slot in segment_of.items()})
    return owners


def _gathered_column(columns: Sequence[Column], sources: Sequence[_Source], rows: int) -> torch.Tensor | None:
    """Row i's entries of `columns[i]` (at `sources[i]`'s position), all rows in one new tensor: stacked if
    equally long, else jagged. One indexed copy per distinct column; None if their dtypes or shapes differ.
    The indices are worked out in numpy: a few hundred rows' worth of small torch ops cost milliseconds."""
    if len({(column.dtype, column.trailing) for column in columns}) > 1:
        return None
    slot_of: dict[int, int] = {}
    distinct: list[Column] = []
    slots = np.empty(rows, dtype=np.int64)
    positions = np.fromiter((position for _, position in sources), dtype=np.int64, count=rows)
    for row, column in enumerate(columns):
        slot = slot_of.get(id(column))
        if slot is None:
            slot = slot_of[id(column)] = len(distinct)
            distinct.append(column)
        slots[row] = slot
    starts = np.empty(rows, dtype=np.int64)
    lengths = np.empty(rows, dtype=np.int64)
    members = [np.flatnonzero(slots == slot) for slot in range(len(distinct))]
    for column, mine in zip(distinct, members):
        offsets = np.asarray(column.offsets, dtype=np.int64)
        starts[mine] = offsets[positions[mine]]
        lengths[mine] = offsets[positions[mine] + 1] - starts[mine]
    out_offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    first = columns[0]
    values = torch.empty((int(out_offsets[-1]), *first.trailing), dtype=first.dtype)
    for column, mine in zip(distinct, members):
        counts = lengths[mine]
        taken = column.values().index_select(0, torch.from_numpy(_entries(starts[mine], counts)))
        values.index_copy_(0, torch.from_numpy(_entries(out_offsets[mine], counts)), taken)
    if rows and bool((lengths == lengths[0]).all()):
        return values.reshape(rows, int(lengths[0]), *first.trailing)
    return torch.nested.nested_tensor_from_jagged(values, torch.from_numpy(out_offsets))


def _entries(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The indices starts[0]..starts[0]+counts[0]-1, starts[1].., ... as one array, without a Python loop."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if len(ends) else 0, dtype=np.int64) + np.repeat(starts - (ends - counts), counts)


def batch_of(payload: ray.ObjectRef | bytes, fetched: Mapping[ray.ObjectRef, StoredBatch]) -> StoredBatch:
    """A row payload's batch: fetched from the object store already, or unpickled from the actor's bytes."""
    return fetched[payload] if isinstance(payload, ray.ObjectRef) else pickle.loads(payload)


def _row(batch: StoredBatch, key: str) -> dict[str, Any]:
    """Row `key`'s fields; tensors are read-only views of the stored bytes (zero-copy)."""
    i = batch.position[key]
    fields = {}
    for name in batch.names[i]:
        column = batch.columns.get(name)
        if column is not None:
            fields[name] = column.values()[column.offsets[i] : column.offsets[i + 1]]
        else:
            value = batch.other[i][name]
            fields[name] = stored_tensor(value) if isinstance(value, TensorBytes) else value
    return fields


def merged_row(batches: Sequence[StoredBatch], key: str, segments: Iterable[int]) -> dict[str, Any]:
    """Row `key`'s fields over its `segments` (indices into `batches`), later segments winning."""
    fields: dict[str, Any] = {}
    for index in segments:
        fields.update(_row(batches[index], key))
    return fields
