"""The in-process transfer store: partitions of keyed rows, their counters, waits, save and load.

One `threading.RLock` guards all state; each partition has a `threading.Condition` on that lock
for blocking waiters and a set of asyncio events for async waiters, and every mutation of a
partition wakes both. Row payloads are copied on the way in (tensors cloned, objects round-
tripped through pickle, which also proves they can be saved and shipped to Ray) and on the way
out, so producers and consumers never share mutable state with the store.

The Ray store's actor reuses this class for everything but the payloads (keys, tags, counters,
waits, save and load): it stores a handle on a Ray object as each row's payload
(`_insert` / `_payloads`), and the client assembles batches itself (`assemble_batch`).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import itertools
import numbers
import os
import pickle
import tempfile
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import torch

from core_v1.transfer_store import traffic
from core_v1.transfer_store.group_index import GroupIndex, indexed_form
from core_v1.transfer_store.errors import (
    AccountingError,
    DuplicateKeyError,
    InvalidRowError,
    MissingKeyError,
    StoreStateError,
    StoreTimeoutError,
)
from core_v1.transfer_store.schema import RowStatus, parse_key

if TYPE_CHECKING:  # tensordict is imported where batches are built: its import (torch._dynamo) cost
    from tensordict import TensorDict  # every store actor and agent-loop worker ~2 s of CPU at start

TagFilter = Callable[[Mapping[str, Any]], Any] | Mapping[str, Any]
"""A `where=` filter: a predicate on one row's tags, or a mapping that every tag must equal."""

_ROW_SERIALS = itertools.count(1)  # store-wide, so a row moved between partitions gets a new one too

_SAVE_FORMAT = "rlbridge.transfer_store"
_SAVE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class PartitionStats:
    """Counters of one partition. Invariant: `put == consumed + evicted_total + live`.

    `put` counts distinct rows (an overwrite replaces a live row and is counted in `overwritten`
    only); `evicted` maps each eviction reason to its count.
    """

    partition: str
    put: int = 0
    consumed: int = 0
    evicted: Mapping[str, int] = dataclasses.field(default_factory=dict)
    live: int = 0
    overwritten: int = 0

    @property
    def evicted_total(self) -> int:
        return sum(self.evicted.values())

    @property
    def balanced(self) -> bool:
        return self.put == self.consumed + self.evicted_total + self.live

    def describe(self) -> str:
        evicted = ", ".join(f"{reason}={count}" for reason, count in sorted(self.evicted.items())) or "none"
        return (
            f"partition {self.partition!r}: put={self.put} consumed={self.consumed} "
            f"evicted={self.evicted_total} ({evicted}) live={self.live} overwritten={self.overwritten}"
        )


@dataclasses.dataclass
class _Row:
    # `{field: value}` copied on put, or (in the Ray store's actor) a handle on where the fields are.
    # Replaced wholesale, never mutated in place: get() and save() hold references past the lock.
    payload: Any
    tags: dict[str, Any]


class _Partition:
    """Rows and counters of one partition. Every method expects the store lock to be held."""

    def __init__(self, name: str, lock: threading.RLock):
        self.name = name
        self.rows: dict[str, _Row] = {}
        self.versions: dict[str, tuple[int, int]] = {}  # see TransferStore.row_versions
        self.put = 0
        self.consumed = 0
        self.evicted: collections.Counter[str] = collections.Counter()
        self.overwritten = 0
        self.changed = threading.Condition(lock)
        self.async_waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()
        self.groups = GroupIndex(self.tags_snapshot)

    def set_row(self, key: str, row: _Row, *, added: bool = False) -> None:
        """Put or overwrite row `key` (the caller counts it); `added`: the same row with fields added."""
        old = self.rows.get(key)
        self.rows[key] = row
        serial, additions = self.versions[key] if added else (next(_ROW_SERIALS), -1)
        self.versions[key] = (serial, additions + 1)
        if old is None or old.tags is not row.tags:
            self.groups.added(key, row.tags, None if old is None else old.tags)

    def remove_row(self, key: str) -> None:
        """Take live row `key` out (the caller counts it)."""
        self.groups.removed(key, self.rows.pop(key).tags)
        del self.versions[key]

    def evaluate(self, predicate: Callable[[dict[str, dict[str, Any]]], Any]) -> Any:
        """A wait predicate's value now: from the group index when it has an indexed form, else over
        a snapshot of every row's tags."""
        form = indexed_form(predicate)
        return predicate(self.tags_snapshot()) if form is None else form(self.groups)

    def tags_snapshot(self) -> dict[str, dict[str, Any]]:
        # Tag values are immutable (checked on write), so a shallow copy per row is a true snapshot.
        return {key: dict(row.tags) for key, row in self.rows.items()}

    def stats(self) -> PartitionStats:
        return PartitionStats(self.name, self.put, self.consumed, dict(self.evicted), len(self.rows), self.overwritten)

    def is_pristine(self) -> bool:
        return not self.rows and not self.put and not self.consumed and not self.evicted and not self.overwritten

    def require_live(self, keys: Sequence[str], action: str) -> None:
        """Raise unless every key is live and named once (removing a row twice is the bug to catch)."""
        duplicated = sorted(key for key, count in collections.Counter(keys).items() if count > 1)
        if duplicated:
            raise DuplicateKeyError(
                f"{action} on partition {self.name!r} names keys more than once: "
                f"{_preview(duplicated)}; pass each key once"
            )
        missing = [key for key in keys if key not in self.rows]
        if missing:
            raise MissingKeyError(
                f"cannot {action} {_preview(missing)} in partition {self.name!r}: not live "
                f"(never put, or already consumed/evicted); see list({self.name!r})"
            )

    def notify(self) -> None:
        self.changed.notify_all()
        for waiter in list(self.async_waiters):
            loop, event = waiter
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that event loop is closed; its waiter can never run again
                self.async_waiters.discard(waiter)

    def status_summary(self) -> str:
        counts = collections.Counter(str(row.tags.get("status", "no status")) for row in self.rows.values())
        return ", ".join(f"{count} {status}" for status, count in sorted(counts.items())) or "none"


class TransferStore:
    """In-process, thread-safe transfer store. See the package docstring for the full contract.

    All methods may be called from any thread. In asyncio code, `aput` never blocks the event loop
    for longer than one short critical section, and `await_rows` waits without holding a thread.
    Pass a store across processes with `make_transfer_store("ray")`.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}

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

    def _merge_payloads(
        self, partition: str, additions: Mapping[str, Any], merge: Callable[[str, Any, Any, bool], Any], overwrite: bool
    ) -> list[tuple[int, int]]:
        """Replace each live row's payload by `merge(key, payload, addition, overwrite)`; all or nothing.
        Returns the rows' new versions."""
        with self._lock:
            part = self._partition(partition)
            missing = [key for key in additions if key not in part.rows]
            if missing:
                raise MissingKeyError(
                    f"cannot add fields to {_preview(missing)} in partition {partition!r}: not "
                    f"live (never put, or already consumed/evicted); put the row first"
                )
            merged = {
                key: merge(key, part.rows[key].payload, addition, overwrite) for key, addition in additions.items()
            }
            for key, payload in merged.items():
                part.set_row(key, _Row(payload, part.rows[key].tags), added=True)
            return [part.versions[key] for key in merged]

    def _insert(self, partition: str, prepared: Mapping[str, _Row], overwrite: bool) -> None:
        with self._lock:
            part = self._partition(partition)
            if not overwrite:
                taken = [key for key in prepared if key in part.rows]
                if taken:
                    raise DuplicateKeyError(
                        f"cannot put {_preview(taken)} into partition {partition!r}: already "
                        f"live; consume or evict those rows first, or pass overwrite=True"
                    )
            for key, row in prepared.items():
                if key in part.rows:
                    part.overwritten += 1
                else:
                    part.put += 1
                part.set_row(key, row)
            part.notify()

    def consume(self, partition: str, keys: Iterable[str], *, wait: bool = True) -> None:
        """Remove rows because they were trained on (counted in `consumed`); all or nothing.
        `wait`: as `add_columns`'."""
        keys = _key_list(keys)
        with self._lock:
            part = self._partition(partition)
            part.require_live(keys, "consume")
            for key in keys:
                part.remove_row(key)
            part.consumed += len(keys)
            part.notify()

    def move(self, source: str, target: str, keys: Iterable[str], *, wait: bool = True) -> None:
        """Take live rows out of `source` (counted there as consumed) into `target` (counted there as
        put), payloads and tags as they are, no bytes copied; all or nothing. The replay buffer moves
        a sampled batch's rows into the step's partition, where the training ranks read and write
        them until the step consumes them. `wait`: as `add_columns`'."""
        keys = _key_list(keys)
        with self._lock:
            origin, destination = self._partition(source), self._partition(target)
            origin.require_live(keys, "move")
            taken = [key for key in keys if key in destination.rows]
            if taken:
                raise DuplicateKeyError(f"cannot move {_preview(taken)} into partition {target!r}: already live there")
            for key in keys:
                row = origin.rows[key]
                origin.remove_row(key)
                destination.set_row(key, row)
            origin.consumed += len(keys)
            destination.put += len(keys)
            origin.notify()
            destination.notify()

    def evict(self, partition: str, keys: Iterable[str], reason: str) -> None:
        """Remove rows without training on them (counted in `evicted[reason]`); all or nothing."""
        if not isinstance(reason, str) or not reason:
            raise ValueError(f"evict needs a non-empty reason string (e.g. 'stale', 'failed'), got {reason!r}")
        keys = _key_list(keys)
        with self._lock:
            part = self._partition(partition)
            part.require_live(keys, "evict")
            for key in keys:
                part.remove_row(key)
            part.evicted[reason] += len(keys)
            part.notify()

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

    def _payloads(self, partition: str, keys: Sequence[str]) -> list[Any]:
        """The payloads of live rows `keys`, in that order; MissingKeyError names any that is not live."""
        with self._lock:
            part = self._partition(partition)
            missing = [key for key in keys if key not in part.rows]
            if missing:
                raise MissingKeyError(
                    f"cannot get {_preview(missing)} from partition {partition!r}: not live "
                    f"(never put, or already consumed/evicted)"
                )
            return [part.rows[key].payload for key in keys]

    def row_versions(self, partition: str, keys: Sequence[str]) -> list[tuple[int, int]]:
        """Each live row's version `(serial, additions)`, which changes whenever anything replaces the
        row's fields or tags: `serial` is new with each put, overwrite and move (never repeating in
        this store), `additions` counts the `add_fields` since. A reader that kept what it read (a
        training rank across the stages of a step) checks with it that the rows are still as it
        read them, and a writer whose `add_fields` returns `additions` one on from the version it
        knew knows nobody else wrote in between. MissingKeyError names any key that is not live."""
        keys = _key_list(keys)
        with self._lock:
            part = self._partition(partition)
            part.require_live(list(dict.fromkeys(keys)), "read the versions of")
            return [part.versions[key] for key in keys]

    def list(self, partition: str, where: TagFilter | None = None) -> dict[str, dict[str, Any]]:
        """`{key: tags}` of the live rows whose tags pass `where` (all rows when None)."""
        keep = _tag_filter(where)
        with self._lock:
            snapshot = self._partition(partition).tags_snapshot()
        return {key: tags for key, tags in snapshot.items() if keep(tags)}

    def stats(self, partition: str) -> PartitionStats:
        with self._lock:
            return self._partition(partition).stats()

    def check_accounting(self, partition: str | None = None, *, require_drained: bool = False) -> None:
        """Raise AccountingError unless `put == consumed + evicted + live` (for one or all partitions).

        With `require_drained=True` live rows are an error too: at the end of a run every row put
        must have been consumed or evicted exactly once.
        """
        with self._lock:
            names = sorted(self._partitions) if partition is None else [partition]
            stats = [self._partition(name).stats() for name in names]
        broken = [s.describe() for s in stats if not s.balanced]
        if broken:
            raise AccountingError(
                "transfer-store counters do not balance (put != consumed + evicted + live): " + "; ".join(broken)
            )
        undrained = [s.describe() for s in stats if require_drained and s.live]
        if undrained:
            raise AccountingError(
                "rows are still live at the end (consume or evict them, or clear() the "
                "partition): " + "; ".join(undrained)
            )

    # ----------------------------------------------------------------- waits

    def wait_for(
        self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any], timeout: float | None = None
    ) -> Any:
        """Block until `predicate({key: tags})` is truthy and return that value.

        The predicate runs under the store lock, once now and once after every change to the
        partition (no polling); it must not block. Raises StoreTimeoutError after `timeout`
        seconds. On a thread that runs an event loop it would stall the loop (and any producer on
        it), so there it raises StoreStateError instead of waiting: use `await_rows`.
        """
        deadline = _deadline(timeout, time.monotonic)
        with self._lock:
            part = self._partition(partition)
            while True:
                result = part.evaluate(predicate)
                if result:
                    return result
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise _timeout_error(part, timeout)
                refuse_to_block_event_loop("wait_for")
                part.changed.wait(remaining)

    async def await_rows(
        self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any], timeout: float | None = None
    ) -> Any:
        """Async `wait_for`: the coroutine sleeps on an asyncio event that every change sets."""
        loop = asyncio.get_running_loop()
        deadline = _deadline(timeout, loop.time)
        waiter = (loop, asyncio.Event())
        with self._lock:
            part = self._partition(partition)
            # Registered before the first check, so a change between check and await still wakes us.
            part.async_waiters.add(waiter)
        try:
            while True:
                waiter[1].clear()
                with self._lock:
                    result = part.evaluate(predicate)
                if result:
                    return result
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    with self._lock:
                        raise _timeout_error(part, timeout)
                try:
                    await asyncio.wait_for(waiter[1].wait(), remaining)
                except TimeoutError:
                    pass  # checked once more above before raising
        finally:
            with self._lock:
                part.async_waiters.discard(waiter)

    # ----------------------------------------------------------------- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write every partition (rows and counters) to `path` atomically (temp file + os.replace)."""
        write_state(self._state(), path)

    def _state(self) -> dict[str, Any]:
        """Rows (their payloads as stored) and counters of every partition, in the save-file layout."""
        with self._lock:
            return {
                "format": _SAVE_FORMAT,
                "version": _SAVE_VERSION,
                "partitions": {name: _partition_state(part) for name, part in self._partitions.items()},
            }

    def load(self, path: str | os.PathLike) -> None:
        """Restore a `save`d state into this store, which must not have been used yet.

        The file holds pickled Python objects: load only files you wrote.
        """
        self._restore(read_state(path), path)

    def _restore(self, state: Mapping[str, Any], path: str | os.PathLike) -> None:
        """Install a state read by `read_state` (row payloads already in this store's form)."""
        with self._lock:
            used = [name for name, part in self._partitions.items() if not part.is_pristine()]
            if used:
                raise StoreStateError(
                    f"load() needs a fresh store, but partitions {used} already hold rows or "
                    f"counts; create a new store and load into it"
                )
            _check_saved_counters(path, state["partitions"])
            for name, saved in state["partitions"].items():
                part = self._partition(name)
                _restore_partition(part, saved)
                part.notify()

    # ----------------------------------------------------------------- internals

    def _partition(self, name: str) -> _Partition:
        part = self._partitions.get(name)
        if part is None:
            if not isinstance(name, str) or not name:
                raise ValueError(f"partition name must be a non-empty string such as 'train', got {name!r}")
            part = self._partitions[name] = _Partition(name, self._lock)
        return part

    def __reduce__(self):
        raise TypeError(
            "a TransferStore lives in one process and cannot be pickled; share one across processes "
            "with make_transfer_store(backend='ray')"
        )

    def __repr__(self) -> str:
        with self._lock:
            live = {name: len(part.rows) for name, part in self._partitions.items()}
        return f"TransferStore(live={live})"


# --------------------------------------------------------------------- row validation


def _prepare_rows(
    rows: Mapping[str, Any], tags: Mapping[str, Mapping[str, Any]] | None, payload_of: Callable[[str, Any], Any]
) -> dict[str, _Row]:
    """Validate keys and tags outside the lock; return `{key: _Row(payload_of(key, value), tags)}`."""
    check_rows_mapping(rows)
    tags = {} if tags is None else tags
    if not isinstance(tags, Mapping):
        raise InvalidRowError(f"put takes tags as {{key: {{tag: value}}}}, got {type(tags).__name__}")
    stray = [key for key in tags if key not in rows]
    if stray:
        raise InvalidRowError(
            f"tags given for keys that are not being put: {_preview(stray)}; "
            f"tag only the rows of this put (put a live row again with overwrite=True "
            f"to change its tags)"
        )
    prepared = {}
    for key, value in rows.items():
        parse_key(key)
        prepared[key] = _Row(payload_of(key, value), _checked_tags(key, tags.get(key, {})))
    return prepared


def check_rows_mapping(rows: Any) -> None:
    if not isinstance(rows, Mapping):
        raise InvalidRowError(f"put takes rows as {{key: {{field: value}}}}, got {type(rows).__name__}")


def check_fields(key: str, fields: Any) -> None:
    """Raise InvalidRowError unless `fields` is a `{non-empty str: value}` mapping."""
    if not isinstance(fields, Mapping):
        raise InvalidRowError(f"row {key!r} must be a mapping {{field: value}}, got {type(fields).__name__}")
    bad_names = [name for name in fields if not isinstance(name, str) or not name]
    if bad_names:
        raise InvalidRowError(f"row {key!r} has field names that are not non-empty strings: {bad_names!r}")


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


def check_new_fields(key: str, present: Iterable[str], added: Iterable[str]) -> None:
    """Raise InvalidRowError if row `key` already has one of the fields `added`."""
    clash = sorted(set(present).intersection(added))
    if clash:
        raise InvalidRowError(
            f"row {key!r} already has field(s) {clash}; add_fields adds new fields only "
            f"(pass overwrite=True to replace them)"
        )


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


def _checked_tags(key: str, tags: Mapping[str, Any]) -> dict[str, Any]:
    if not isinstance(tags, Mapping):
        raise InvalidRowError(f"tags of row {key!r} must be a dict, got {type(tags).__name__}")
    checked = {}
    for name, value in tags.items():
        if not isinstance(name, str) or not name:
            raise InvalidRowError(f"tag names of row {key!r} must be non-empty strings, got {name!r}")
        if not _is_immutable_tag_value(value):
            raise InvalidRowError(
                f"tag {name!r} of row {key!r} is a {type(value).__name__}; tags hold numbers, "
                f"strings, None or tuples of them (put larger data in a field)"
            )
        checked[name] = value
    if "status" in checked:
        checked["status"] = _checked_status(key, checked["status"])
    return checked


def _checked_status(key: str, status: Any) -> str:
    try:
        return RowStatus(status).value
    except ValueError:
        known = ", ".join(repr(s.value) for s in RowStatus)
        raise InvalidRowError(f"row {key!r} has unknown status {status!r}; use one of {known}") from None


def _is_immutable_tag_value(value: Any) -> bool:
    if value is None or isinstance(value, (str, bytes, numbers.Number, enum.Enum)):
        return True
    return isinstance(value, tuple) and all(_is_immutable_tag_value(item) for item in value)


def _tag_filter(where: TagFilter | None) -> Callable[[Mapping[str, Any]], Any]:
    if where is None:
        return lambda tags: True
    if isinstance(where, Mapping):
        wanted = dict(where)
        return lambda tags: all(name in tags and tags[name] == value for name, value in wanted.items())
    if callable(where):
        return where
    raise TypeError(f"where must be a predicate on tags or a {{tag: value}} mapping, got {type(where).__name__}")


def _key_list(keys: Iterable[str]) -> list[str]:
    if isinstance(keys, str):
        raise TypeError(f"keys must be a list of keys, got the single string {keys!r}; wrap it in a list")
    return list(keys)


def _preview(keys: Sequence[str], limit: int = 5) -> str:
    shown = ", ".join(repr(key) for key in list(keys)[:limit])
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return f"{len(keys)} key(s) [{shown}{more}]"


# --------------------------------------------------------------------- waits and persistence


def _deadline(timeout: float | None, clock: Callable[[], float]) -> float | None:
    if timeout is None:
        return None
    if not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"timeout must be None or a non-negative number of seconds, got {timeout!r}")
    return clock() + timeout


def refuse_to_block_event_loop(method: str) -> None:
    """Raise if the calling thread runs an asyncio loop: a blocking wait there could never be woken."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise StoreStateError(
        f"{method} would block the running asyncio event loop; in async code use "
        f"`await store.await_rows(...)` (in-process store) or "
        f"`await asyncio.to_thread(store.wait_for, ...)` (either store)"
    )


def _timeout_error(part: _Partition, timeout: float | None) -> StoreTimeoutError:
    return StoreTimeoutError(
        f"timed out after {timeout} s waiting on transfer-store partition {part.name!r}: the "
        f"predicate stayed falsy over {len(part.rows)} live rows ({part.status_summary()})"
    )


def _partition_state(part: _Partition) -> dict[str, Any]:
    return {
        "rows": {key: {"fields": row.payload, "tags": dict(row.tags)} for key, row in part.rows.items()},
        "put": part.put,
        "consumed": part.consumed,
        "evicted": dict(part.evicted),
        "overwritten": part.overwritten,
    }


def _restore_partition(part: _Partition, saved: Mapping[str, Any]) -> None:
    for key, row in saved["rows"].items():
        part.set_row(key, _Row(row["fields"], dict(row["tags"])))
    part.put, part.consumed, part.overwritten = saved["put"], saved["consumed"], saved["overwritten"]
    part.evicted = collections.Counter(saved["evicted"])


def _check_saved_counters(path: str | os.PathLike, partitions: Mapping[str, Mapping[str, Any]]) -> None:
    for name, saved in partitions.items():
        stats = PartitionStats(
            name, saved["put"], saved["consumed"], dict(saved["evicted"]), len(saved["rows"]), saved["overwritten"]
        )
        if not stats.balanced:
            raise AccountingError(
                f"{os.fspath(path)!r} is inconsistent, its counters do not balance: {stats.describe()}"
            )


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


__all__ = ["PartitionStats", "TagFilter", "TransferStore"]
