"""ReplayBufferAsync: the sampling plan (pure), then real async pipelines (generation, aborts,
partial rollout, refills) checked for the staleness bound and for exact accounting."""

from __future__ import annotations

import pytest
import torch

from core_v1.trainer.modes.colocate_async import ColocateAsyncTrainer
from core_v1.trainer.modes.separate_async import SeparateAsyncTrainer
from core_v1.trainer.replay_buffer import every_group_complete
from core_v1.trainer.replay_buffer_async import STALE, ReplayBufferAsync, plan_sample
from tests.core_v1.trainer._async_harness import LongTailAgentLoop, build_pipeline, close, pipeline_config, run_steps


# ------------------------------------------------------------------------------ the plan, pure
def _group(uid: str, submitted: int, n: int = 2, order: int = 0) -> dict:
    return {uid: {"status": "running", "n": n, "global_steps": submitted, "order": order}}


def _done(uid: str, sessions: range = range(2), status: str = "finished", submitted: int = 0) -> dict:
    return {f"{uid}_{s}_0": {"status": status, "global_steps": submitted} for s in sessions}


def _plan(tags: dict, **kwargs):
    options = dict(need=2, batch_size=2, global_steps=5, threshold=3, strategy="drop")
    return plan_sample(tags, **{**options, **kwargs})


def test_plan_takes_oldest_complete_groups_first():
    tags = {
        **_group("a1", 4, order=0),
        **_done("a1"),
        **_group("b2", 3, order=1),
        **_done("b2"),
        **_group("c3", 4, order=2),
        **_done("c3"),
        **_group("d4", 3, order=3),
    }
    plan = _plan(tags)
    assert list(plan.take) == ["b2", "a1"] and not plan.evict  # d4 is older but still generating


@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_in_submission_order_the_oldest_groups_are_waited_for(strategy):
    # reproducible=true: c3 finished first but b2 and a1 were submitted before it.
    tags = {
        **_group("a1", 4, order=0),
        **_done("a1"),
        **_group("b2", 4, order=1),
        **_done("b2", range(1)),
        **_group("c3", 5, order=2),
        **_done("c3"),
    }
    assert list(_plan(tags, strategy=strategy).take) == ["a1", "c3"]
    assert _plan(tags, strategy=strategy, in_order=True) is None
    tags.update(_done("b2", range(1, 2)))
    assert list(_plan(tags, strategy=strategy, in_order=True).take) == ["a1", "b2"]


def test_every_group_complete_waits_for_every_session():
    tags = {**_group("a1", 4), **_done("a1"), **_group("b2", 4, order=1), **_done("b2", range(1))}
    assert every_group_complete(tags) is None
    tags.update(_done("b2", range(1, 2)))
    assert every_group_complete(tags) is True
    assert every_group_complete({}) is True  # nothing in flight


def test_staleness_metrics_count_off_policy_tokens_and_mixed_versions():
    # At step 5 the trained policy is version 4: a trajectory begun by version 3 is off-policy,
    # and one whose tokens came from versions 3 and 4 is both off-policy and mixed.
    trained = {
        "g": {
            "g_0_0": {"min_global_steps": 4, "max_global_steps": 4, "response_len": 6},
            "g_1_0": {"min_global_steps": 3, "max_global_steps": 3, "response_len": 2},
            "g_2_0": {"min_global_steps": 3, "max_global_steps": 4, "response_len": 2},
            "g_3_0": {"status": "failed", "response_len": 90},
        }
    }
    metrics = ReplayBufferAsync.staleness_metrics(trained, 5)
    assert metrics["training/off_policy/trajectory_staleness/max"] == 1
    assert metrics["training/off_policy/off_policy_token_fraction"] == pytest.approx(4 / 10)
    assert metrics["training/off_policy/mixed_version_fraction"] == pytest.approx(1 / 3)


def test_plan_waits_until_enough_groups_are_complete():
    assert _plan({**_group("a1", 5), **_done("a1"), **_group("b2", 5), **_done("b2", range(1))}) is None


def test_drop_evicts_groups_beyond_the_threshold_and_their_late_trajectories():
    # At step 5 with threshold 3, a group submitted at step 2 has span 4: dropped, finished or not.
    tags = {**_group("a1", 2), **_done("a1", range(1)), **_group("b2", 3), **_done("b2"), **_done("ee", range(1))}
    plan = _plan(tags)
    assert sorted(plan.evict[STALE]) == sorted(["a1", "a1_0_0", "ee_0_0"])  # ee: group already dropped
    assert plan.evicted_groups == {STALE: 1}


def test_wholly_failed_groups_are_evicted_and_refilled_partly_failed_ones_train():
    tags = {
        **_group("a1", 5),
        **_done("a1", status="failed"),
        **_group("b2", 5, order=1),
        **_done("b2", range(1), status="failed"),
        **_done("b2", range(1, 2)),
    }
    plan = _plan(tags)
    assert plan.evict == {"failed": ["a1", "a1_0_0", "a1_1_0"]} and plan.evicted_groups == {"failed": 1}
    del tags["a1"], tags["a1_0_0"], tags["a1_1_0"]
    assert list(_plan(tags, need=1).take) == ["b2"]


def test_wait_takes_due_groups_before_younger_complete_ones():
    # Threshold 3 at step 5: a group from step 3 has span 3 -- due now, so the batch waits for it.
    tags = {
        **_group("a1", 3),
        **_done("a1", range(1)),
        **_group("b2", 5, order=1),
        **_done("b2"),
        **_group("c3", 5, order=2),
        **_done("c3"),
    }
    assert _plan(tags, strategy="wait") is None
    assert list(_plan(tags, strategy="drop").take) == ["b2", "c3"]  # drop does not wait (span 3 is allowed)
    tags.update(_done("a1", range(1, 2)))
    assert list(_plan(tags, strategy="wait").take) == ["a1", "b2"]


def test_wait_counts_deadlines_ahead():
    # Four groups from step 4 (span 2 at step 5, threshold 3): at two per step, the two oldest must go
    # now or the other two cannot all be trained by step 6.
    tags = {}
    for order, uid in enumerate(["a1", "b2", "c3", "d4"]):
        tags.update(_group(uid, 4, order=order))
    tags.update({**_done("c3"), **_done("d4"), **_group("e5", 5, order=9), **_done("e5")})
    assert _plan(tags, strategy="wait", threshold=3) is None
    tags.update({**_done("a1"), **_done("b2")})
    assert list(_plan(tags, strategy="wait", threshold=3).take) == ["a1", "b2"]
    assert list(_plan(tags, strategy="wait", threshold=4).take) == ["a1", "b2"]  # oldest complete first anyway


# ----------------------------------------------------------------------- real async pipelines
@pytest.fixture
def make_pipeline(tiny_assets, tmp_path):
    built = []

    def make(trainer_cls, *overrides):
        config = pipeline_config(tiny_assets, tmp_path, *overrides)
        trainer, record = build_pipeline(trainer_cls, config, str(tiny_assets["model"]))
        built.append(trainer)
        return trainer, record

    yield make
    for trainer in built:
        close(trainer)


def _max_span(record) -> float:
    return max(m["training/off_policy/trajectory_spans/max"] for m in record.metrics)


@pytest.mark.parametrize("strategy", ["drop", "wait"])
def test_staleness_never_exceeds_the_threshold(make_pipeline, strategy):
    trainer, record = make_pipeline(
        ColocateAsyncTrainer,
        "trainer.v1.colocate_async.num_warmup_batches=2",
        "trainer.v1.sampler.max_off_policy_threshold=3",
        f"trainer.v1.sampler.max_off_policy_strategy={strategy}",
    )
    run_steps(trainer, record, 10)
    assert _max_span(record) <= 3
    staleness = max(m["training/off_policy/trajectory_staleness/max"] for m in record.metrics)
    assert staleness <= 2  # a span of 3 steps is at most 2 weight versions
    stale = sum(m["training/off_policy/evicted_samples/stale"] for m in record.metrics)
    if strategy == "drop":
        assert stale > 0  # the long tail did outlive the threshold: the bound was enforced, not idle
    else:
        assert stale == 0  # wait never drops for age without failures


def test_accounting_over_a_long_randomized_run_with_aborts(make_pipeline, monkeypatch):
    monkeypatch.setattr(LongTailAgentLoop, "failure_rate", 0.08)
    trainer, record = make_pipeline(
        ColocateAsyncTrainer,
        "trainer.v1.colocate_async.num_warmup_batches=2",
        "trainer.v1.sampler.max_off_policy_threshold=3",
    )
    store = trainer.components.store
    run_steps(trainer, record, 16)  # every step aborts mid-generation and resumes after a weight update
    assert sum(m["harness/requests_in_flight_at_sample_end"] > 0 for m in record.metrics) >= 8  # real aborts

    trained = [uid for step in record.trained for uid in step]
    assert len(trained) == len(set(trained)) == 16 * trainer.train_batch_size  # nothing trained twice
    live = {key for key in store.list("train") if "_" not in key}
    evicted = sum(m["training/off_policy/evicted_samples"] for m in record.metrics)
    assert len(record.submitted) == len(set(record.submitted))
    assert set(trained) | live <= set(record.submitted) and not set(trained) & live
    assert len(record.submitted) == len(trained) + len(live) + evicted  # the rest were evicted: none lost
    assert sum(m["training/off_policy/evicted_samples/failed"] for m in record.metrics) > 0
    store.check_accounting("train")

    trainer.agent_loop_manager.drain()  # what is still generating lands; then it is all accounted for
    store.evict("train", list(store.list("train")), reason="end_of_run")
    store.check_accounting("train", require_drained=True)
    stats = store.stats("train")
    assert stats.put == stats.consumed + stats.evicted_total


def test_separate_async_pipeline_keeps_generating_through_weight_syncs(make_pipeline):
    trainer, record = make_pipeline(
        SeparateAsyncTrainer,
        "trainer.v1.separate_async.parameter_sync_step=1",
        "trainer.v1.sampler.max_off_policy_threshold=2",
    )
    run_steps(trainer, record, 6)
    assert _max_span(record) <= 2
    assert trainer.checkpoint_manager.weight_version == 6 and not trainer.checkpoint_manager.asleep


# -------------------------------------------------------------------- DAPO dynamic sampling
class _ScriptedGroups:
    """Puts prompt groups with given scores into a real store; the buffer's generation pipeline,
    which replaces each evicted group with the next scripted one."""

    def __init__(self, store, scripts: list[list[float]]):
        self.store, self.scripts, self.order, self.trained = store, list(scripts), 0, 0

    def put(self, global_steps: int) -> str:
        scores = self.scripts.pop(0)
        uid = f"{self.order + 10:x}a"
        rows = {uid: {"row": {}}}
        tags = {uid: {"status": "running", "n": len(scores), "global_steps": global_steps, "order": self.order}}
        for session, score in enumerate(scores):
            key = f"{uid}_{session}_0"
            rows[key] = {
                "prompt_ids": torch.tensor([5, 6]),
                "response_ids": torch.tensor([7, 8, 9]),
                "response_mask": torch.ones(3, dtype=torch.long),
                "reward_score": score,
                "reward_extra": {"exact": float(score == 1.0), "pred": str(score)},
                "uid": uid,
            }
            tags[key] = {"status": "finished", "global_steps": global_steps, "min_global_steps": global_steps - 1}
        self.store.put("train", rows, tags)
        self.order += 1
        return uid

    def record_evicted(self, groups, global_steps: int) -> None:
        for _ in range(sum(groups.values())):
            self.put(global_steps)

    def record_trained(self, num_groups: int) -> None:
        self.trained += num_groups


def _filtering_buffer(tiny_assets, tmp_path, scripts, *overrides):
    from core_v1.trainer.replay_buffer_async import ReplayBufferAsync
    from core_v1.transfer_store import make_transfer_store

    config = pipeline_config(tiny_assets, tmp_path, "algorithm.filter_groups.enable=true", *overrides)
    store = make_transfer_store("local")
    groups = _ScriptedGroups(store, scripts)
    return ReplayBufferAsync(store, config, pad_token_id=0, wait_timeout=5, pipeline=groups), groups


def test_filter_groups_drops_groups_without_signal_and_refills_until_a_full_batch(tiny_assets, tmp_path):
    buffer, groups = _filtering_buffer(
        tiny_assets, tmp_path, [[1.0, 1.0], [0.0, 1.0], [0.4, 0.4], [1.0, 0.2]], "algorithm.filter_groups.metric=exact"
    )
    first, second = groups.put(1), groups.put(1)
    batch, metrics = buffer.sample(1, "train", 2)
    trained = set(batch.column("uid"))
    # [0.4, 0.4] differ in score but not in `exact` (both 0): no signal for this metric, dropped too.
    assert second in trained and first not in trained and len(trained) == 2
    assert metrics["training/off_policy/evicted_samples/filtered"] == 2 and groups.trained == 2
    groups.store.check_accounting("train", require_drained=True)


def test_filter_groups_gives_up_after_max_num_gen_batches(tiny_assets, tmp_path):
    from core_v1.trainer.replay_buffer_async import FilterGroupsExhaustedError

    buffer, groups = _filtering_buffer(
        tiny_assets, tmp_path, [[1.0, 1.0]] * 6, "algorithm.filter_groups.max_num_gen_batches=1"
    )
    groups.put(1), groups.put(1)
    with pytest.raises(FilterGroupsExhaustedError, match="max_num_gen_batches=1"):
        buffer.sample(1, "train", 2)


def test_filter_groups_on_a_text_extra_is_one_config_error(tiny_assets, tmp_path):
    from core_v1.config import ConfigError

    buffer, groups = _filtering_buffer(tiny_assets, tmp_path, [[1.0, 0.0]], "algorithm.filter_groups.metric=pred")
    groups.put(1)
    with pytest.raises(ConfigError, match="metric='pred'.*returns text there.*pick a numeric key"):
        buffer.sample(1, "train", 1)
