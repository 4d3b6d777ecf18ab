"""Waits on prompt groups: pure, picklable predicates over a partition's tags.

`wait_for(partition, predicate)` runs its predicate where the rows are; for the Ray store that is
the store actor's process, which unpickles the predicate and so imports the module defining it.
They live here, beside the key schema, because this module imports nothing heavy: defined in the
trainer's modules they pulled the whole trainer, tensordict and torch._dynamo into the store
actor of every run (about 2 s of CPU at start). The replay buffers use them and re-export them.

Each predicate here also has an indexed form (`core_v1.transfer_store.group_index`): the store
answers a wait on it (or on a `functools.partial` of it) from its group index, in time that does
not grow with the live rows, and gets the same value as the predicate over every row's tags.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Optional

from core_v1.transfer_store.group_index import GroupIndex, indexed
from core_v1.transfer_store.schema import RowStatus, group_key, parse_key

STALE, FAILED, FILTERED = "stale", "failed", "filtered"


def complete_groups(tags: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """`{group_key: {trajectory_key: tags}}` for every group whose `n` sessions have all reported."""
    members: dict[str, dict[str, dict]] = defaultdict(dict)
    sessions: dict[str, set] = defaultdict(set)
    groups = {}
    for key, row_tags in tags.items():
        parsed = parse_key(key)
        if parsed.is_group:
            groups[key] = (parsed.uid, row_tags.get("n", 1))
        else:
            members[parsed.uid][key] = row_tags
            sessions[parsed.uid].add(parsed.session_id)
    return {key: members[uid] for key, (uid, n) in groups.items() if len(sessions[uid]) >= n}


def _oldest_complete_from_index(index: GroupIndex, batch_size: int) -> Optional[dict]:
    if not index.ordered:
        return oldest_complete_groups(index.snapshot(), batch_size)
    if index.complete_count < batch_size:
        return None
    return {group_key(uid): index.members(uid) for uid in itertools.islice(index.complete_oldest_first(), batch_size)}


@indexed(_oldest_complete_from_index)
def oldest_complete_groups(tags: dict[str, dict], batch_size: int) -> Optional[dict]:
    """The oldest `batch_size` complete groups (lowest submit step, then submission order), or None
    while fewer are complete: the predicate `sample` waits on."""
    complete = complete_groups(tags)
    if len(complete) < batch_size:
        return None
    oldest = sorted(complete, key=lambda g: (tags[g].get("global_steps", 0), tags[g].get("order", 0)))
    return {g: complete[g] for g in oldest[:batch_size]}


@indexed(lambda index: True if index.complete_count == index.group_count else None)
def every_group_complete(tags: dict[str, dict]) -> Optional[bool]:
    """True once every live group has all `n` sessions in (None before): the predicate of waiting
    for everything submitted to finish generating."""
    groups = sum(1 for key in tags if parse_key(key).is_group)
    return True if len(complete_groups(tags)) == groups else None


def _all_complete_from_index(index: GroupIndex, uids: list[str]):
    # Only the answer is built from every row, once: while any group of `uids` runs it is None.
    return all_complete(index.snapshot(), uids) if all(index.is_complete(uid) for uid in uids) else None


@indexed(_all_complete_from_index)
def all_complete(tags: dict, uids: list[str]):
    """Every group of `uids` once all are complete, else None (a picklable predicate for the store)."""
    complete = complete_groups(tags)
    return complete if all(group_key(uid) in complete for uid in uids) else None


def _admission_from_index(index: GroupIndex, global_steps: int, threshold: int) -> tuple[bool]:
    if not index.ordered:
        return admission_state(index.snapshot(), global_steps, threshold)
    for uid in index.oldest_first():  # oldest first, so the spans only shrink: stop at the first young one
        if group_span(index.group_tags(uid), global_steps) < threshold:
            break
        if not index.is_complete(uid):
            return (False,)
    return (True,)


@indexed(_admission_from_index)
def admission_state(tags: dict[str, dict], global_steps: int, threshold: int) -> tuple[bool]:
    """`(open,)`, never falsy, so a wait returns at once: whether new prompts may be submitted under
    the `wait` strategy, i.e. no group at the staleness threshold is still generating."""
    complete = complete_groups(tags)
    return (
        not any(
            parse_key(key).is_group and key not in complete and group_span(t, global_steps) >= threshold
            for key, t in tags.items()
        ),
    )


def group_span(group_tags: dict, global_steps: int) -> int:
    """Steps between a group's submission and `global_steps`, counting both (same step = 1)."""
    return global_steps - int(group_tags.get("global_steps", global_steps)) + 1


@dataclass
class SamplePlan:
    """What `plan_sample` decided: rows to evict now (and how many groups to refill), or a batch."""

    evict: dict[str, list[str]] = field(default_factory=dict)  # reason -> keys
    evicted_groups: Counter = field(default_factory=Counter)  # reason -> groups (refilled)
    take: dict[str, dict[str, dict]] = field(default_factory=dict)  # group key -> {trajectory key: tags}


def _plan_sample_from_index(
    index: GroupIndex,
    *,
    need: int,
    batch_size: int,
    global_steps: int,
    threshold: int,
    strategy: str,
    exclude: frozenset = frozenset(),
    in_order: bool = False,
) -> Optional[SamplePlan]:
    """`plan_sample` from the group index: it reads the oldest groups up to the batch it plans, the
    complete ones up to `need`, the per-step counts and the (rare) failed and orphaned groups."""
    if not index.ordered or index.stepless:
        return plan_sample(
            index.snapshot(),
            need=need,
            batch_size=batch_size,
            global_steps=global_steps,
            threshold=threshold,
            strategy=strategy,
            exclude=exclude,
            in_order=in_order,
        )
    all_failed = sorted((uid for uid in index.all_failed if uid not in exclude), key=index.sort_key)
    skip = set(exclude).union(all_failed)

    def candidates() -> Iterable[str]:
        return (uid for uid in index.oldest_first() if uid not in skip)

    if strategy == "drop":
        stale = list(
            itertools.takewhile(lambda uid: group_span(index.group_tags(uid), global_steps) > threshold, candidates())
        )
        mandatory = 0
    else:
        counts = Counter(index.step_counts)
        counts.subtract(index.group_tags(uid)["global_steps"] for uid in skip if index.is_group(uid))
        mandatory = _due_by_step(counts, need, batch_size, global_steps, threshold)
        stale = list(itertools.islice(candidates(), need, mandatory)) if mandatory > need else []
    if in_order:
        mandatory = max(mandatory, need)
    plan = SamplePlan()
    for reason, uids in ((STALE, stale), (FAILED, all_failed)):
        if uids:
            plan.evict.setdefault(reason, []).extend(k for uid in uids for k in [uid, *index.member_keys(uid)])
            plan.evicted_groups[reason] += len(uids)
    if index.orphans:
        plan.evict.setdefault(STALE, []).extend(k for uid in index.orphans for k in index.member_keys(uid))
    if plan.evict:
        return plan
    due = list(itertools.islice(candidates(), mandatory))
    if not all(index.is_complete(uid) for uid in due):
        return None
    if index.complete_count - sum(index.is_complete(uid) for uid in skip) < need:
        return None
    skip.update(due)
    later = (uid for uid in index.complete_oldest_first() if uid not in skip)
    chosen = list(itertools.islice(itertools.chain(due, later), need))
    plan.take = {uid: index.members(uid) for uid in chosen}
    return plan


def _due_by_step(counts: Counter, need: int, batch_size: int, global_steps: int, threshold: int) -> int:
    """`_groups_due_now` from the number of candidate groups per submit step: groups of one step
    share a deadline, so the bound is tightest at the last group of each step."""
    must_take = position = 0
    for steps in sorted(step for step, count in counts.items() if count > 0):
        position += counts[steps]
        steps_left = threshold - (global_steps - steps + 1)
        must_take = max(must_take, position - max(steps_left, 0) * batch_size)
    return min(must_take, position) if need else 0


@indexed(_plan_sample_from_index)
def plan_sample(
    tags: dict[str, dict],
    *,
    need: int,
    batch_size: int,
    global_steps: int,
    threshold: int,
    strategy: str,
    exclude: frozenset = frozenset(),
    in_order: bool = False,
) -> Optional[SamplePlan]:
    """The store-side wait predicate of `ReplayBufferAsync.sample` (pure, picklable).

    Returns a plan that evicts (stale, orphaned or wholly failed rows) whenever there is any,
    else the `need` groups to train once they are complete, else None (keep waiting). Groups in
    `exclude` were already taken by this `sample` call. `in_order`: the `need` oldest groups, only
    them, once complete.
    """
    groups, members, sessions = {}, defaultdict(dict), defaultdict(set)
    for key, row_tags in tags.items():
        parsed = parse_key(key)
        if parsed.is_group:
            groups[parsed.uid] = row_tags
        else:
            members[parsed.uid][key] = row_tags
            sessions[parsed.uid].add(parsed.session_id)
    candidates = sorted(
        (uid for uid in groups if uid not in exclude),
        key=lambda uid: (groups[uid].get("global_steps", 0), groups[uid].get("order", 0)),
    )
    complete = {uid for uid in candidates if len(sessions[uid]) >= groups[uid].get("n", 1)}
    all_failed = [
        uid
        for uid in candidates
        if uid in complete and all(t.get("status") == RowStatus.FAILED.value for t in members[uid].values())
    ]
    candidates = [uid for uid in candidates if uid not in all_failed]
    if strategy == "drop":
        stale = [uid for uid in candidates if group_span(groups[uid], global_steps) > threshold]
        mandatory = 0
    else:
        mandatory = _groups_due_now(candidates, groups, need, batch_size, global_steps, threshold)
        stale = candidates[need:mandatory]  # more are due than fit: only after refills of failed groups
    if in_order:
        mandatory = max(mandatory, need)
    plan = SamplePlan()
    for reason, uids in ((STALE, stale), (FAILED, all_failed)):
        if uids:
            plan.evict.setdefault(reason, []).extend(k for uid in uids for k in [uid, *members[uid]])
            plan.evicted_groups[reason] += len(uids)
    orphans = [key for uid, rows in members.items() if uid not in groups for key in rows]
    if orphans:  # trajectories of a group dropped as stale while they were generating
        plan.evict.setdefault(STALE, []).extend(orphans)
    if plan.evict:
        return plan
    if any(uid not in complete for uid in candidates[:mandatory]):
        return None  # a group that cannot wait any longer is still generating
    chosen = candidates[:mandatory] + [uid for uid in candidates[mandatory:] if uid in complete]
    if len(chosen) < need:
        return None
    plan.take = {uid: members[uid] for uid in chosen[:need]}
    return plan


def _groups_due_now(
    oldest_first: list[str], groups: dict[str, dict], need: int, batch_size: int, global_steps: int, threshold: int
) -> int:
    """How many of the oldest groups this batch must take so that, at `batch_size` groups per later
    step, no group is trained beyond the threshold (earliest-deadline-first feasibility).

    Group i (oldest first) must be trained by step `submit + threshold - 1`; after this batch, the
    steps before that deadline can absorb `steps_left * batch_size` of the groups up to it.
    """
    must_take = 0
    for position, uid in enumerate(oldest_first, start=1):
        steps_left = threshold - group_span(groups[uid], global_steps)  # later steps it may still wait
        must_take = max(must_take, position - max(steps_left, 0) * batch_size)
    return min(must_take, len(oldest_first)) if need else 0
