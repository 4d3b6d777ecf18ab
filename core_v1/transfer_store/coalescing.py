"""`aput`s started in the same event-loop turn travel as one put.

A put to the Ray store has a fixed cost (an object-store write and an actor call, about as much as
moving a few hundred kilobytes) that one small trajectory pays alone. Producers on one event loop
(the sessions of an agent-loop worker, the benchmark's writers) often start their puts together;
`TurnCoalescer` holds each `aput` until the loop's other ready callbacks have run, then sends
every pending put of that partition (and `overwrite` flag) as one.

The contract of each `aput` is kept: a combined put is all or nothing, so when it fails (a key
already live, a field that cannot be pickled, a malformed tag), each caller's put is sent again
on its own and each caller gets its own outcome. Puts naming the same key, or tagging rows they
do not put, never combine (merging them would change what each one means).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any, Awaitable, Callable, Mapping

Rows = Mapping[str, Mapping[str, Any]]
Tags = Mapping[str, Mapping[str, Any]] | None
Send = Callable[[str, Rows, Tags, bool], Awaitable[None]]


class _Pending:
    __slots__ = ("rows", "tags", "done")

    def __init__(self, rows: Rows, tags: Tags, done: asyncio.Future):
        self.rows, self.tags, self.done = rows, tags, done


class TurnCoalescer:
    """Coalesces the `aput`s of one event-loop turn per (loop, partition, overwrite) into one `send`."""

    def __init__(self, send: Send):
        self._send = send
        self._pending: dict[tuple, list[_Pending]] = {}

    async def put(self, partition: str, rows: Rows, tags: Tags, overwrite: bool) -> None:
        loop = asyncio.get_running_loop()
        slot = (loop, partition, overwrite)
        waiting = self._pending.get(slot)
        if waiting is None:
            waiting = self._pending[slot] = []
            loop.create_task(self._flush(slot))  # runs after the callbacks already ready in this turn
        entry = _Pending(rows, tags, loop.create_future())
        waiting.append(entry)
        await asyncio.shield(entry.done)

    async def _flush(self, slot: tuple) -> None:
        _, partition, overwrite = slot
        entries = self._pending.pop(slot)
        combinable, alone = _split_combinable(entries)
        if len(combinable) > 1:
            rows = {key: fields for entry in combinable for key, fields in entry.rows.items()}
            tags = {key: value for entry in combinable for key, value in (entry.tags or {}).items()}
            try:
                await self._send(partition, rows, tags, overwrite)
            except Exception:  # all or nothing: each caller's put alone tells whose it was
                alone.extend(combinable)
            else:
                for entry in combinable:
                    _resolve(entry.done, None)
        else:
            alone.extend(combinable)
        for entry in alone:
            try:
                await self._send(partition, entry.rows, entry.tags, overwrite)
            except Exception as error:
                _resolve(entry.done, error)
            else:
                _resolve(entry.done, None)


def _split_combinable(entries: list[_Pending]) -> tuple[list[_Pending], list[_Pending]]:
    """The puts that may travel together, and those that must go alone (keys named twice, tags of
    rows not put, or arguments that are not mappings: their own put raises the usual error)."""
    plain = [
        entry
        for entry in entries
        if isinstance(entry.rows, Mapping)
        and (entry.tags is None or (isinstance(entry.tags, Mapping) and set(entry.tags) <= set(entry.rows)))
    ]
    counts = collections.Counter(key for entry in plain for key in entry.rows)
    together = [entry for entry in plain if all(counts[key] == 1 for key in entry.rows)]
    chosen = {id(entry) for entry in together}
    return together, [entry for entry in entries if id(entry) not in chosen]


def _resolve(done: asyncio.Future, error: BaseException | None) -> None:
    if done.cancelled():
        return
    if error is None:
        done.set_result(None)
    else:
        done.set_exception(error)
