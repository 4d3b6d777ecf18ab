"""The group index answers the group predicates as a scan of every row's tags would, through any
sequence of puts, overwrites, consumes, evicts, moves and loads."""

import functools
import random
import uuid

import pytest

from core_v1.transfer_store import TransferStore, group_key, trajectory_key
from core_v1.transfer_store.group_index import indexed, indexed_form
from core_v1.transfer_store.groups import (
    admission_state,
    all_complete,
    every_group_complete,
    oldest_complete_groups,
    plan_sample,
)


def predicates(uids):
    yield every_group_complete
    for batch_size in (1, 3):
        yield functools.partial(oldest_complete_groups, batch_size=batch_size)
    yield functools.partial(all_complete, uids=uids[:2])
    for global_steps, threshold in ((6, 3), (6, 1), (2, 2)):
        yield functools.partial(admission_state, global_steps=global_steps, threshold=threshold)
    for strategy in ("drop", "wait"):
        for need, exclude, in_order in (
            (2, frozenset(), False),
            (3, frozenset(uids[:2]), False),
            (2, frozenset(), True),
        ):
            yield functools.partial(
                plan_sample,
                need=need,
                batch_size=3,
                global_steps=6,
                threshold=3,
                strategy=strategy,
                exclude=exclude,
                in_order=in_order,
            )


def normalised(value):
    """Plans evict the same keys in any order; everything else must be equal, group order included."""
    if hasattr(value, "evict"):
        return (
            {reason: sorted(keys) for reason, keys in value.evict.items()},
            value.evicted_groups,
            list(value.take.items()),
        )
    return list(value.items()) if isinstance(value, dict) else value


def assert_index_agrees(store, partition, uids):
    part = store._partition(partition)
    tags = store.list(partition)
    live_groups = [key for key in tags if "_" not in key]
    for predicate in predicates(live_groups[-2:] + uids):
        expected = predicate(tags)
        assert normalised(part.evaluate(predicate)) == normalised(expected), predicate


def random_step(store, partition, uids, rng):
    live = list(store.list(partition))
    groups = [key for key in live if "_" not in key]
    # Mostly rows of live groups; now and then an orphan (a trajectory of a group dropped meanwhile).
    uid = rng.choice(groups) if groups and rng.random() < 0.97 else rng.choice(uids)
    action = rng.random()
    if action < 0.25 or not groups:
        tags = {
            "status": "running",
            "n": rng.choice([1, 2, 3]),
            "global_steps": rng.randint(4, 6),
            "order": rng.randint(0, 3),
        }
        store.put(partition, {group_key(uid): {}}, {group_key(uid): tags}, overwrite=True)
    elif action < 0.65:
        key = trajectory_key(uid, rng.randint(0, 2), rng.choice([0, 0, 1]))
        status = rng.choice(["finished"] * 5 + ["failed"])
        store.put(partition, {key: {}}, {key: {"status": status, "global_steps": 1}}, overwrite=True)
    elif live and action < 0.8:
        # Mostly a whole group, as the replay buffers take them; sometimes rows of any group.
        whole = [key for key in live if key.split("_")[0] == uid]
        keys = whole if whole and rng.random() < 0.97 else rng.sample(live, rng.randint(1, min(3, len(live))))
        if action < 0.7:
            store.consume(partition, keys)
        else:
            store.evict(partition, keys, reason="stale")
    elif live and action < 0.85:
        moved = rng.sample(live, 1)
        store.move(partition, "elsewhere", moved)
        store.move("elsewhere", partition, moved)


@pytest.mark.parametrize("seed", range(4))
def test_indexed_forms_equal_the_scan_through_random_changes(seed, tmp_path):
    rng = random.Random(seed)
    uids = [uuid.uuid4().hex for _ in range(8)]
    store = TransferStore()
    for step in range(300):
        random_step(store, "train", uids, rng)
        assert_index_agrees(store, "train", uids)
        if step % 100 == 99:  # a loaded store rebuilds its index
            store.save(tmp_path / "state.pt")
            store = TransferStore()
            store.load(tmp_path / "state.pt")
            assert_index_agrees(store, "train", uids)


@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_indexed_plans_equal_the_scan_through_an_async_run(strategy):
    """Groups submitted every step, their sessions finishing at random, batches sampled as the async
    replay buffer does (evicting what a plan evicts, consuming what it takes)."""
    rng = random.Random(strategy)
    store, part = TransferStore(), None
    running = []  # (uid, sessions not yet put)
    taken = evicted = 0
    for global_steps in range(1, 30):
        for order in range(3):
            uid = uuid.uuid4().hex
            store.put(
                "train", {uid: {}}, {uid: {"status": "running", "n": 2, "global_steps": global_steps, "order": order}}
            )
            running.append((uid, [0, 1]))
        rng.shuffle(running)
        for uid, sessions in running[:4]:
            session = sessions.pop()
            key = trajectory_key(uid, session)
            status = "failed" if rng.random() < 0.1 else "finished"
            store.put("train", {key: {}}, {key: {"status": status, "global_steps": global_steps}})
        running = [(uid, sessions) for uid, sessions in running if sessions]
        part = store._partition("train")
        accepted = frozenset()
        while len(accepted) < 2:
            predicate = functools.partial(
                plan_sample,
                need=2 - len(accepted),
                batch_size=2,
                global_steps=global_steps,
                threshold=3,
                strategy=strategy,
                exclude=accepted,
            )
            plan = part.evaluate(predicate)
            assert normalised(plan) == normalised(predicate(store.list("train")))
            if plan is None:
                break
            for reason, keys in plan.evict.items():
                store.evict("train", keys, reason)
                evicted += 1
            accepted |= frozenset(plan.take)
        if len(accepted) == 2:
            store.consume("train", [k for uid in accepted for k in [uid, *part.groups.member_keys(uid)]])
            taken += 1
        running = [(uid, sessions) for uid, sessions in running if uid in store.list("train")]
    assert taken > 5 and evicted > 0, "the run exercised both takes and evictions"


def test_groups_whose_order_tags_are_not_numbers_fall_back_to_the_scan():
    store = TransferStore()
    uids = [uuid.uuid4().hex for _ in range(3)]
    for position, uid in enumerate(uids):
        steps = "late" if position == 1 else position
        store.put("train", {group_key(uid): {}}, {group_key(uid): {"n": 1, "global_steps": steps}})
        store.put("train", {trajectory_key(uid, 0): {}}, {trajectory_key(uid, 0): {"status": "finished"}})
    with pytest.raises(TypeError):  # the scan cannot sort them either: same answer, same error
        store._partition("train").evaluate(functools.partial(oldest_complete_groups, batch_size=2))
    store.consume("train", [group_key(uids[1]), trajectory_key(uids[1], 0)])
    assert_index_agrees(store, "train", uids)


def test_a_user_predicate_may_carry_an_indexed_form():
    @indexed(lambda index, at_least: index.group_count >= at_least or None)
    def groups_at_least(tags, at_least):
        return sum(1 for key in tags if "_" not in key) >= at_least or None

    store = TransferStore()
    store.put("train", {group_key(uuid.uuid4().hex): {}})
    predicate = functools.partial(groups_at_least, at_least=1)
    assert indexed_form(predicate) is not None and indexed_form(lambda tags: True) is None
    assert store.wait_for("train", predicate, timeout=0) is True
