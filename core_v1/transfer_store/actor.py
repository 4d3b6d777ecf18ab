"""The Ray transfer store's actor: a `Ledger` of keys, tags, counters and waits whose row payloads
are segments, each a handle on a put's `StoredBatch` (an object ref, or the batch pickled when
small), kept without being looked into (see `ray_store` for the whole design).

The actor's process imports this module and what it imports, and no call of the store's own makes
it import more: keep torch and tensordict out of that chain (with torch the actor's process took
2.4 CPU-s a 2-step quickstart run on the 2-core test machine, without 0.9-1.0). The actor never
opens a batch; even `save` and `load` are done by the client (`RayTransferStore.save`, `.load`).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import ray

from core_v1.transfer_store.ledger import Ledger, _prepare_rows, check_new_fields

# Metadata methods the actor serves from its Ledger as they are.
_FORWARDED = frozenset({"list", "consume", "evict", "move", "stats", "check_accounting", "row_versions"})


class _TransferStoreActor:
    """Ray actor body; an async actor, so waits and writes interleave on one event loop."""

    def __init__(self) -> None:
        self._store = Ledger()  # its row payloads are segments (see `_Segment`)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method not in _FORWARDED:
            raise AttributeError(f"the transfer-store actor has no method {method!r}")
        return getattr(self._store, method)(*args, **kwargs)

    async def put(
        self,
        partition: str,
        keys: list[str],
        names: list[tuple[str, ...]],
        stored: list[ray.ObjectRef | bytes],
        tags: Mapping[str, Mapping[str, Any]] | None,
        overwrite: bool,
    ) -> None:
        """Rows `keys` with fields `names[i]`, held by the `StoredBatch` that `stored[0]` refers to or pickles."""
        rows = dict(zip(keys, _segments(names, stored)))
        self._store._insert(partition, _prepare_rows(rows, tags, _as_is), overwrite)

    async def add_fields(
        self,
        partition: str,
        keys: list[str],
        names: list[tuple[str, ...]],
        stored: list[ray.ObjectRef | bytes],
        overwrite: bool,
    ) -> list[tuple[int, int]]:
        """One more segment on each live row `keys` (see `_Segment`); returns their new versions."""
        return self._store._merge_payloads(
            partition, dict(zip(keys, _segments(names, stored))), _merged_segments, overwrite
        )

    async def payloads(
        self, partition: str, keys: list[str], fields: list[str] | None
    ) -> tuple[list[ray.ObjectRef | bytes], list[list[int]]]:
        """The distinct segments' payloads (refs, or small batches pickled) holding `fields` (all when
        None) of rows `keys`, and for each key the indices of its segments in that list, oldest first."""
        wanted = None if fields is None else frozenset(fields)
        distinct: list[ray.ObjectRef | bytes] = []
        index_of: dict[int, int] = {}
        picks = []
        for segments in self._store._payloads(partition, keys):
            pick = []
            for names, payload in segments:
                if wanted is None or not names.isdisjoint(wanted):
                    if id(payload) not in index_of:
                        index_of[id(payload)] = len(distinct)
                        distinct.append(payload)
                    pick.append(index_of[id(payload)])
            picks.append(pick)
        return distinct, picks

    async def payloads_and_versions(
        self, partition: str, keys: list[str], fields: list[str] | None
    ) -> tuple[tuple[list[ray.ObjectRef | bytes], list[list[int]]], list[tuple[int, int]]]:
        """`payloads` and the rows' `row_versions` of the same moment (`get_versioned`)."""
        return await self.payloads(partition, keys, fields), self._store.row_versions(partition, keys)

    async def wait_for(self, partition: str, predicate: Callable, timeout: float | None = None) -> Any:
        return await self._store.await_rows(partition, predicate, timeout)

    async def after(self, writes: list[tuple[str, tuple]], method: str | None, args: tuple, kwargs: dict) -> Any:
        """A client's queued writes `[(method, args)]` in the order it made them, then its call
        `method(*args, **kwargs)` (None: none): one round trip. A write that fails raises its own
        error, and what follows it is not done."""
        for name, write_args in writes:
            await getattr(self, name)(*write_args)
        return None if method is None else await getattr(self, method)(*args, **kwargs)

    async def state(self) -> dict[str, Any]:
        """Every partition's rows (tags, segments) and counters, for `RayTransferStore.save`."""
        return self._store._state()

    async def restore(self, state: dict[str, Any], staged: dict[str, tuple[list, list]], path: str) -> None:
        """Install a save file's `state` that `RayTransferStore.load` read, the rows' fields staged as a
        put's: `staged[partition] = (names, stored)`, rows in the state's order."""
        for partition, (names, stored) in staged.items():
            for row, segments in zip(state["partitions"][partition]["rows"].values(), _segments(names, stored)):
                row["fields"] = segments
        self._store._restore(state, path)


_Segment = tuple  # (frozenset of field names, payload): part of a row's fields, from one put or add_fields
"""A row's payload in the actor is a tuple of segments, oldest first: its put's, then one per
`add_fields` (a later segment's field shadows an earlier one's). A get fetches only the segments
holding the fields it asks for."""


def _segments(names: list[list[tuple[str, ...]]], payloads: list[ray.ObjectRef | bytes]) -> list[tuple[_Segment, ...]]:
    """Each row's payload, a tuple of one segment per payload holding any of its fields, for rows with
    field names `names[p]` in `payloads[p]` (a row with no field at all keeps one empty segment)."""
    sets: dict[tuple[str, ...], frozenset] = {}
    per_row = zip(
        *([(sets.setdefault(row, frozenset(row)), payload) for row in part] for part, payload in zip(names, payloads))
    )
    return [tuple(segment for segment in segments if segment[0]) or segments[:1] for segments in per_row]


def _merged_segments(
    key: str, segments: tuple[_Segment, ...], added: tuple[_Segment], overwrite: bool
) -> tuple[_Segment, ...]:
    """A row's segments with `added` last; with `overwrite`, segments it shadows wholly are dropped (freed)."""
    names = frozenset().union(*(present for present, _ in added))
    if not overwrite:
        check_new_fields(key, (name for present, _ in segments for name in present), names)
        return segments + added
    return tuple(segment for segment in segments if not segment[0] <= names) + added


def _as_is(key: str, payload: Any) -> Any:
    return payload
