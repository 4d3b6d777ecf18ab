"""The transfer store's bookkeeping: partitions of keyed rows, their tags, counters, versions and
waits, with each row's payload held as it was given and never looked into.

`Ledger` is everything of a store but its payloads. The in-process `TransferStore` (`store`) adds
the payloads (tensors and objects copied in, batches built out, save files); the Ray store's
actor (`actor`) serves a `Ledger` whose payloads are handles on Ray objects or pickled batches.
So this module imports no torch: the actor's process, which only keeps keys and handles, does not
pay torch's import (its process took 2.4 CPU-s a 2-step quickstart run with it, 0.9-1.0 without,
on the 2-core test machine).

One `threading.RLock` guards all state; each partition has a `threading.Condition` on that lock
for blocking waiters and a set of asyncio events for async waiters, and every mutation of a
partition wakes both.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
import itertools
import numbers
import os
import threading
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from core_v1.transfer_store.errors import (
    AccountingError,
    DuplicateKeyError,
    InvalidRowError,
    MissingKeyError,
    StoreStateError,
    StoreTimeoutError,
)
from core_v1.transfer_store.group_index import GroupIndex, indexed_form
from core_v1.transfer_store.schema import RowStatus, parse_key

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

    def require_live(self, keys: Sequence[str], action: str, once: bool = True) -> None:
        """Raise unless every key is live and, with `once`, named once (removing a row twice is the
        bug to catch; a read may name a row twice)."""
        duplicated = sorted(key for key, count in collections.Counter(keys).items() if count > 1) if once else []
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


class Ledger:
    """Keys, tags, counters, versions and waits of every partition; thread-safe. Each row's payload
    is kept as given (`_insert`, `_merge_payloads`) and handed back as is (`_payloads`)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._partitions: dict[str, _Partition] = {}

    # ----------------------------------------------------------------- writes

    def _merge_payloads(
        self, partition: str, additions: Mapping[str, Any], merge: Callable[[str, Any, Any, bool], Any], overwrite: bool
    ) -> list[tuple[int, int]]:
        """Replace each live row's payload by `merge(key, payload, addition, overwrite)`; all or nothing.
        Returns the rows' new versions."""
        with self._lock:
            part = self._partition(partition)
            part.require_live(list(additions), "add fields to", once=False)  # a mapping names each key once
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

    def _payloads(self, partition: str, keys: Sequence[str]) -> list[Any]:
        """The payloads of live rows `keys`, in that order; MissingKeyError names any that is not live."""
        with self._lock:
            part = self._partition(partition)
            part.require_live(keys, "get", once=False)
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

    def _state(self) -> dict[str, Any]:
        """Rows (their payloads as stored) and counters of every partition, in the save-file layout."""
        with self._lock:
            return {
                "format": _SAVE_FORMAT,
                "version": _SAVE_VERSION,
                "partitions": {name: _partition_state(part) for name, part in self._partitions.items()},
            }

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

    def __repr__(self) -> str:
        with self._lock:
            live = {name: len(part.rows) for name, part in self._partitions.items()}
        return f"{type(self).__name__}(live={live})"


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


def check_new_fields(key: str, present: Iterable[str], added: Iterable[str]) -> None:
    """Raise InvalidRowError if row `key` already has one of the fields `added`."""
    clash = sorted(set(present).intersection(added))
    if clash:
        raise InvalidRowError(
            f"row {key!r} already has field(s) {clash}; add_fields adds new fields only "
            f"(pass overwrite=True to replace them)"
        )


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


__all__ = ["Ledger", "PartitionStats", "TagFilter"]
