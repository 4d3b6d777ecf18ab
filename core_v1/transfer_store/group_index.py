"""A partition's prompt groups, kept up to date on every put / consume / evict / overwrite, so that a
wait on groups costs the same at 500 live rows as at 17,000.

A wait predicate is a pure function of `{key: tags}`; re-run over every live row on every change
it made each put cost O(live rows) while a `sample` waited (27 ms at 17,408 rows for
`oldest_complete_groups`). The store keeps this index beside each partition's rows instead, and a
predicate that carries an *indexed form* (`@indexed(form)`: `form(index, *args, **kwargs)` returns
what `predicate(tags, *args, **kwargs)` would) is answered from it; `functools.partial`s of such a
predicate are too. Any other predicate still sees a snapshot of every row's tags.

What the index holds per `uid`: the group row's tags (`{uid}`, while live), its trajectory rows'
tags, how many rows each session has, and how many are not `failed`. Derived and updated on each
change to that uid: *complete* (the group row is live and at least `n` distinct sessions have a
row), *all failed* (complete, and no row that is not failed), *orphan* (rows but no live group
row). Live group rows are kept sorted oldest first, by `(global_steps, order)` tags and then
by when the row was first put (as a sort over the rows dict orders them), complete ones in a list
of their own; and the live groups are counted per submit step (`global_steps`).
A group whose `global_steps` or `order` tag is not a number is *unordered*: it is kept out of the
sorted lists and the indexed forms fall back to the snapshot while any is live (as do those that
need whole-number steps while a group lacks one).
"""

from __future__ import annotations

import bisect
import collections
import numbers
from typing import Any, Callable, Iterator

from core_v1.transfer_store.schema import RowStatus, parse_key

_FAILED = RowStatus.FAILED.value


def indexed(form: Callable[..., Any]) -> Callable[[Callable], Callable]:
    """Give a wait predicate its indexed form (see the module docstring)."""

    def attach(predicate: Callable) -> Callable:
        predicate.over_index = form
        return predicate

    return attach


def indexed_form(predicate: Callable) -> Callable[[GroupIndex], Any] | None:
    """`index -> result` for a predicate that has an indexed form (or a partial of one), else None."""
    args, keywords = (), {}
    if hasattr(predicate, "func") and hasattr(predicate, "keywords"):  # functools.partial
        predicate, args, keywords = predicate.func, predicate.args, predicate.keywords
    form = getattr(predicate, "over_index", None)
    if form is None:
        return None
    return lambda index: form(index, *args, **keywords)


class _Group:
    __slots__ = ("tags", "sort_key", "members", "sessions", "not_failed", "complete", "all_failed")

    def __init__(self) -> None:
        self.tags: dict | None = None  # the group row's tags while it is live
        self.sort_key: tuple | None = None  # (global_steps, order, first put) when ordered
        self.members: dict[str, dict] = {}
        self.sessions: collections.Counter = collections.Counter()
        self.not_failed = 0
        self.complete = False
        self.all_failed = False


class GroupIndex:
    """Prompt groups of one partition (see the module docstring). The store calls `added` and
    `removed` under its lock; waits read the rest under the same lock."""

    def __init__(self, snapshot: Callable[[], dict[str, dict]]):
        self.snapshot = snapshot  # every live row's tags: what a predicate without an indexed form sees
        self._groups: dict[str, _Group] = {}
        self._first_put: dict[str, int] = {}  # group key -> when it was first put (kept on overwrite)
        self._puts = 0
        self._oldest: list[tuple] = []  # sort keys (with the uid last) of live, ordered group rows
        self._complete: list[tuple] = []  # the same, of complete groups
        self.step_counts: collections.Counter = collections.Counter()  # global_steps -> live groups
        self.group_count = 0
        self.complete_count = 0
        self.unordered = 0  # live group rows whose sort tags are not numbers
        self.stepless = 0  # live group rows without a whole-number global_steps tag
        self.all_failed: set[str] = set()
        self.orphans: set[str] = set()

    # ----------------------------------------------------------------- updates

    def added(self, key: str, tags: dict, replaced: dict | None = None) -> None:
        """Row `key` went live with `tags` (replacing a live row's `replaced` tags on overwrite)."""
        parsed = parse_key(key)
        group = self._groups.setdefault(parsed.uid, _Group())
        self._unindex(parsed.uid, group)
        if parsed.is_group:
            if replaced is not None:
                self._remove_group_row(group, replaced)
            self._add_group_row(key, group, tags)
        else:
            if replaced is None:
                group.sessions[parsed.session_id] += 1
            else:
                group.not_failed -= replaced.get("status") != _FAILED
            group.members[key] = tags  # an overwritten row keeps its place, as in the rows dict
            group.not_failed += tags.get("status") != _FAILED
        self._reindex(parsed.uid, group)

    def removed(self, key: str, tags: dict) -> None:
        """Row `key` (with `tags`) left the store."""
        parsed = parse_key(key)
        group = self._groups[parsed.uid]
        self._unindex(parsed.uid, group)
        if parsed.is_group:
            self._remove_group_row(group, tags)
            del self._first_put[key]
        else:
            del group.members[key]
            group.sessions[parsed.session_id] -= 1
            if not group.sessions[parsed.session_id]:
                del group.sessions[parsed.session_id]
            group.not_failed -= tags.get("status") != _FAILED
        if group.tags is None and not group.members:
            del self._groups[parsed.uid]
        else:
            self._reindex(parsed.uid, group)

    def _add_group_row(self, key: str, group: _Group, tags: dict) -> None:
        if key not in self._first_put:
            self._first_put[key] = self._puts
            self._puts += 1
        group.tags = tags
        steps, order = tags.get("global_steps", 0), tags.get("order", 0)
        ordered = all(isinstance(v, numbers.Real) and v == v for v in (steps, order))  # NaN sorts nowhere
        group.sort_key = (steps, order, self._first_put[key]) if ordered else None
        self.unordered += not ordered
        self.group_count += 1
        self.stepless += not _whole_steps(tags)
        self.step_counts[_steps_of(tags)] += 1

    def _remove_group_row(self, group: _Group, tags: dict) -> None:
        self.unordered -= group.sort_key is None
        self.group_count -= 1
        self.stepless -= not _whole_steps(tags)
        self.step_counts[_steps_of(tags)] -= 1
        if not self.step_counts[_steps_of(tags)]:
            del self.step_counts[_steps_of(tags)]
        group.tags = group.sort_key = None

    def _unindex(self, uid: str, group: _Group) -> None:
        """Take the group out of the derived lists and sets (`_reindex` puts it back)."""
        if group.sort_key is not None:
            _discard(self._oldest, (*group.sort_key, uid))
            if group.complete:
                _discard(self._complete, (*group.sort_key, uid))
        self.complete_count -= group.complete
        self.all_failed.discard(uid)
        self.orphans.discard(uid)

    def _reindex(self, uid: str, group: _Group) -> None:
        live = group.tags is not None
        group.complete = live and len(group.sessions) >= group.tags.get("n", 1)
        group.all_failed = group.complete and not group.not_failed
        self.complete_count += group.complete
        if group.all_failed:
            self.all_failed.add(uid)
        if not live and group.members:
            self.orphans.add(uid)
        if group.sort_key is not None:
            bisect.insort(self._oldest, (*group.sort_key, uid))
            if group.complete:
                bisect.insort(self._complete, (*group.sort_key, uid))

    # ----------------------------------------------------------------- reads

    @property
    def ordered(self) -> bool:
        """Every live group row is in the sorted lists (else an indexed form uses the snapshot)."""
        return not self.unordered

    def oldest_first(self) -> Iterator[str]:
        """uids of live group rows, oldest first (lazily: callers stop early)."""
        return (entry[-1] for entry in self._oldest)

    def complete_oldest_first(self) -> Iterator[str]:
        """uids of complete groups, oldest first (lazily)."""
        return (entry[-1] for entry in self._complete)

    def is_complete(self, uid: str) -> bool:
        group = self._groups.get(uid)
        return group is not None and group.complete

    def is_group(self, uid: str) -> bool:
        group = self._groups.get(uid)
        return group is not None and group.tags is not None

    def sort_key(self, uid: str) -> tuple:
        """`(global_steps, order, first put)` of a live, ordered group row: its place oldest first."""
        return self._groups[uid].sort_key

    def group_tags(self, uid: str) -> dict:
        return self._groups[uid].tags

    def members(self, uid: str) -> dict[str, dict]:
        """`{trajectory key: tags}` of the group, copied (as a tags snapshot is)."""
        return {key: dict(tags) for key, tags in self._groups[uid].members.items()}

    def member_keys(self, uid: str) -> list[str]:
        return list(self._groups[uid].members)


def _whole_steps(tags: dict) -> bool:
    steps = tags.get("global_steps")
    return isinstance(steps, int) and not isinstance(steps, bool)


def _steps_of(tags: dict) -> Any:
    return tags.get("global_steps")


def _discard(entries: list[tuple], entry: tuple) -> None:
    position = bisect.bisect_left(entries, entry)
    assert position < len(entries) and entries[position] == entry, "group index out of step with its rows"
    del entries[position]
