"""DAPO dynamic sampling (`algorithm.filter_groups`) in the sync mode, as old DAPO scripts use it."""

from __future__ import annotations

import json

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from tests.conftest import quickstart_overrides


def test_sync_with_filter_groups_trains_only_informative_groups(tiny_assets, ray_runtime, tmp_path):
    config = load_config(quickstart_overrides(
        tiny_assets, tmp_path, 2, "algorithm.filter_groups.enable=true", "algorithm.filter_groups.metric=score",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "trainer.test_freq=-1"), config_name="quickstart")
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["training/off_policy/trajectory_staleness/max"] == 0  # refills are generated on-policy
        assert "training/off_policy/evicted_samples/filtered" in row
