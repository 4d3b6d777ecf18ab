"""The in-process transfer store: a `Ledger` (keys, tags, counters, waits) whose row payloads are
the rows' fields, copied on the way in (tensors cloned, objects round-tripped through pickle,
which also proves they can be saved and shipped to Ray) and on the way out (`get` builds a new
batch), so producers and consumers never share mutable state with the store; and the save file
both stores write and read (`read_state`, `write_state`).
"""

from __future__ import annotations

import collections
import os
import pickle
import tempfile
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import torch

from core_v1.transfer_store import traffic
from core_v1.transfer_store.errors import DuplicateKeyError, InvalidRowError, StoreStateError
from core_v1.transfer_store.ledger import (
    _SAVE_FORMAT,
    _SAVE_VERSION,
    Ledger,
    PartitionStats,
    TagFilter,
    _key_list,
    _prepare_rows,
    _preview,
    check_fields,
    check_new_fields,
    check_rows_mapping,
)

if TYPE_CHECKING:  # tensordict is imported where batches are built: its import (torch._dynamo) cost
    from tensordict import TensorDict  # every store actor and agent-loop worker ~2 s of CPU at start


class TransferStore(Ledger):
    """In-process, thread-safe transfer store. See the package docstring for the full contract.

    All methods may be called from any thread. In asyncio code, `aput` never blocks the event loop
    for longer than one short critical section, and `await_rows` waits without holding a thread.
    Pass a store across processes with `make_transfer_store("ray")`.
    """

    # ----------------------------------------------------------------- writes

    def put(
        self,
        partition: str,
        rows: Mapping[str, Mapping[str, Any]],
        tags: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        overwrite: bool = False,
    ) -> None:
        """Add rows `{key: {field: value}}` with optional `{key: tags}`; all or nothing.

        A key that is already live raises DuplicateKeyError unless `overwrite=True`, which
        replaces that row's fields and tags and counts it in `overwritten` (not again in `put`).
        """
        prepared = _prepare_rows(rows, tags, _copied_fields)
        self._insert(partition, prepared, overwrite)
        traffic.count_put(traffic.rows_tensor_bytes(row.payload for row in prepared.values()))

    async def aput(
        self,
        partition: str,
        rows: Mapping[str, Mapping[str, Any]],
        tags: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        overwrite: bool = False,
    ) -> None:
        """`put` for asyncio producers (agent loops); it holds the lock for one short critical section."""
        self.put(partition, rows, tags, overwrite=overwrite)

    def add_fields(
        self, partition: str, rows: Mapping[str, Mapping[str, Any]], *, overwrite: bool = False
    ) -> list[tuple[int, int]]:
        """Add fields `{key: {field: value}}` to live rows; all or nothing.

        Not a put: tags and counters stay as they are, and waiters are not woken (they see tags
        only). A key that is not live raises MissingKeyError; a field the row already has raises
        InvalidRowError unless `overwrite=True`, which replaces it. Values are copied as on `put`.
        Returns the rows' new `row_versions`, in `rows`' order (each one addition on from before,
        unless another write came in between).
        """
        check_rows_mapping(rows)
        copied = {key: _copied_fields(key, fields) for key, fields in rows.items()}
        versions = self._merge_payloads(partition, copied, _merged_fields, overwrite)
        traffic.count_put(traffic.rows_tensor_bytes(copied.values()))
        return versions

    async def aadd_fields(
        self, partition: str, rows: Mapping[str, Mapping[str, Any]], *, overwrite: bool = False
    ) -> list[tuple[int, int]]:
        """`add_fields` for asyncio code; it holds the lock for one short critical section."""
        return self.add_fields(partition, rows, overwrite=overwrite)

    def add_columns(
        self,
        partition: str,
        keys: Sequence[str],
        lengths: Sequence[int],
        columns: Mapping[str, torch.Tensor],
        *,
        overwrite: bool = False,
        wait: bool = True,
    ) -> list[tuple[int, int]] | None:
        """`add_fields` from padded tensors: row `keys[i]` gets `column[i, :lengths[i]]` of each
        `[B, L, ...]` column (a rank's per-token outputs, each row trimmed to its response length).
        Keys must be distinct. Returns the rows' new `row_versions`. `wait=False` lets a store in
        another process send the write with this thread's next call (see `flush`); in process
        the write is done at once either way."""
        check_columns(keys, lengths, columns)
        rows = {
            key: {name: column[i, : int(length)] for name, column in columns.items()}
            for i, (key, length) in enumerate(zip(keys, lengths))
        }
        return self.add_fields(partition, rows, overwrite=overwrite)

    # ----------------------------------------------------------------- reads

    def get(self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None) -> TensorDict:
        """Rows `keys` (in that order) as a TensorDict of batch size `[len(keys)]`.

        `fields=None` means every field any of these rows has; each requested row must have each
        requested field. Variable-length tensors come back jagged (pad them with `pad_jagged`),
        same-shape tensors stacked, Python objects as a NonTensorStack. Rows stay live. A key may
        be named more than once (a resampled batch): its row comes back once per mention.
        """
        keys = _key_list(keys)
        batch = assemble_batch(partition, keys, self._payloads(partition, keys), fields)
        traffic.count_got(traffic.batch_tensor_bytes(batch))
        return batch

    def get_versioned(
        self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None
    ) -> tuple[TensorDict, list[tuple[int, int]]]:
        """`(get(...), row_versions(...))` of the same moment: a reader that keeps the batch checks
        later with `row_versions` that nobody wrote onto the rows since (one call in the Ray store)."""
        with self._lock:
            return self.get(partition, keys, fields), self.row_versions(partition, keys)

    def flush(self) -> None:
        """Nothing to send: in process every write is done when its call returns (see `add_columns`)."""

    def get_objects(self, partition: str, keys: Sequence[str], fields: Sequence[str]) -> dict[str, list]:
        """The Python-object `fields` of rows `keys` as plain lists, one copied value per row, in key
        order: what a batch handle's columns read, without building a batch (`get` wraps objects
        in a NonTensorStack, which costs far more than the values for hundreds of small rows)."""
        keys = _key_list(keys)
        return object_columns(partition, keys, self._payloads(partition, keys), fields)

    # ----------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write every partition (rows and counters) to `path` atomically (temp file + os.replace)."""
        write_state(self._state(), path)

    def load(self, path: str | os.PathLike) -> None:
        """Restore a `save`d state into this store, which must not have been used yet.

        The file holds pickled Python objects: load only files you wrote.
        """
        self._restore(read_state(path), path)

    def __reduce__(self):
        raise TypeError(
            "a TransferStore lives in one process and cannot be pickled; share one across processes "
            "with make_transfer_store(backend='ray')"
        )


def check_columns(keys: Sequence[str], lengths: Sequence[int], columns: Mapping[str, Any]) -> None:
    """Raise unless `add_columns`' arguments fit: distinct keys, one length each, `[B, L, ...]` tensors
    under non-empty string names with L at least the longest length."""
    _key_list(keys)
    repeated = sorted(key for key, count in collections.Counter(keys).items() if count > 1)
    if repeated:
        raise DuplicateKeyError(f"add_columns names keys more than once: {_preview(repeated)}; pass each key once")
    if len(lengths) != len(keys):
        raise InvalidRowError(f"add_columns got {len(lengths)} lengths for {len(keys)} keys; pass one per key")
    longest = max((int(length) for length in lengths), default=0)
    for name, column in columns.items():
        if not isinstance(name, str) or not name:
            raise InvalidRowError(f"add_columns field names must be non-empty strings, got {name!r}")
        if not isinstance(column, torch.Tensor) or column.dim() < 2 or column.shape[0] != len(keys):
            shape = tuple(column.shape) if isinstance(column, torch.Tensor) else type(column).__name__
            raise InvalidRowError(
                f"add_columns field {name!r} must be a [B, L, ...] tensor with B = {len(keys)} keys, got {shape}"
            )
        if column.shape[1] < longest:
            raise InvalidRowError(
                f"add_columns field {name!r} has {column.shape[1]} entries a row, fewer than the longest length {longest}"
            )


def _copied_fields(key: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    check_fields(key, fields)
    copied = {name: value.detach().clone() for name, value in fields.items() if isinstance(value, torch.Tensor)}
    objects = {name: value for name, value in fields.items() if not isinstance(value, torch.Tensor)}
    copied.update(_pickle_copy(key, objects))
    return {name: copied[name] for name in fields}


def _merged_fields(key: str, fields: Mapping[str, Any], added: Mapping[str, Any], overwrite: bool) -> dict[str, Any]:
    """A row's fields with `added` (a new dict: payloads are replaced, never mutated)."""
    if not overwrite:
        check_new_fields(key, fields, added)
    return {**fields, **added}


def _pickle_copy(key: str, objects: dict[str, Any]) -> dict[str, Any]:
    # A pickle round trip both copies and proves the objects can be saved and shipped to Ray.
    return pickle.loads(pickled_objects(key, objects))


def pickled_objects(key: str, objects: dict[str, Any]) -> bytes:
    """`objects` pickled; InvalidRowError names the field that cannot be (a file could not hold it)."""
    try:
        return pickle.dumps(objects, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        for name, value in objects.items():
            try:
                pickle.dumps(value)
            except Exception as error:
                raise InvalidRowError(
                    f"field {name!r} of row {key!r} cannot be pickled ({error}); store "
                    f"tensors or picklable Python objects only"
                ) from None
        raise


def assemble_batch(
    partition: str, keys: Sequence[str], rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | str | None
) -> TensorDict:
    """`get`'s batch from row field dicts: `fields=None` means every field any row has."""
    from core_v1.transfer_store.batching import rows_to_tensordict

    if fields is None:
        fields = list(dict.fromkeys(field for row in rows for field in row))
    else:
        fields = [fields] if isinstance(fields, str) else list(fields)
    return rows_to_tensordict(rows, keys, fields, where=f"partition {partition!r}: ")


def object_columns(
    partition: str, keys: Sequence[str], rows: Sequence[Mapping[str, Any]], fields: Sequence[str]
) -> dict[str, list]:
    """`get_objects`' columns from row field dicts; each value copied as a batch copies it."""
    from core_v1.transfer_store.batching import copied_object, missing_field_error

    columns = {}
    for field in fields:
        values = []
        for key, row in zip(keys, rows):
            if field not in row:
                raise missing_field_error(f"partition {partition!r}: ", key, row, [field])
            values.append(copied_object(row[field]))
        columns[field] = values
    return columns


def read_state(path: str | os.PathLike) -> dict[str, Any]:
    """A `save` file's state (its rows' fields as plain `{field: value}` dicts), format-checked.

    The file holds pickled Python objects: load only files you wrote.
    """
    state = torch.load(os.fspath(path), map_location="cpu", weights_only=False)
    if not isinstance(state, dict) or state.get("format") != _SAVE_FORMAT:
        raise StoreStateError(f"{os.fspath(path)!r} is not a transfer-store save file")
    if state.get("version") != _SAVE_VERSION:
        raise StoreStateError(
            f"{os.fspath(path)!r} has save format version {state.get('version')!r}; "
            f"this rlbridge reads version {_SAVE_VERSION}"
        )
    return state


def write_state(state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write a state (rows' fields as `{field: value}` dicts) atomically: temp file, fsync, os.replace."""
    _atomic_torch_save(state, os.fspath(path))


def _atomic_torch_save(state: Any, path: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    descriptor, temp_path = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
    try:
        with os.fdopen(descriptor, "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp_path, path)
    except BaseException:
        os.unlink(temp_path)
        raise


__all__ = ["PartitionStats", "TagFilter", "TransferStore", "read_state", "write_state"]
