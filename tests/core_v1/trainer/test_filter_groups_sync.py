"""DAPO dynamic sampling (`algorithm.filter_groups`) in the sync mode, as old DAPO scripts use it.

The reward makes half of the prompts uninformative on purpose: a prompt whose answer is even
scores 0 whatever the response (every group of it has zero variance), one whose answer is odd
scores by the response text (its samples differ). With filtering on, the trainer must only ever
see groups whose samples differ, and must have thrown uninformative ones away to get there.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from core_v1.trainer.replay_buffer_async import ReplayBufferAsync
from tests.conftest import quickstart_overrides

HALF_UNINFORMATIVE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if int(ground_truth) % 2 == 0:
        return 0.0
    return sum(ord(ch) for ch in solution_str) % 11 / 10
"""


def test_sync_with_filter_groups_trains_only_informative_groups(tiny_assets, ray_runtime, tmp_path, monkeypatch):
    reward = tmp_path / "half_uninformative.py"
    reward.write_text(HALF_UNINFORMATIVE)
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            "algorithm.filter_groups.enable=true",
            "algorithm.filter_groups.metric=score",
            f"reward.custom_reward_function.path={reward}",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=4",
            "trainer.test_freq=-1",
        ),
        config_name="quickstart",
    )
    trained: list[dict[str, list[float]]] = []  # per step: uid -> the trained samples' scores
    real_sample = ReplayBufferAsync.sample

    def watched_sample(self, global_steps, partition_id, batch_size):
        batch, metrics = real_sample(self, global_steps, partition_id, batch_size)
        if partition_id == "train":
            groups = defaultdict(list)
            for uid, score in zip(batch.column("uid"), batch.column("score")):
                groups[uid].append(score)
            trained.append(dict(groups))
        return batch, metrics

    monkeypatch.setattr(ReplayBufferAsync, "sample", watched_sample)
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == len(trained) == 2
    for groups in trained:  # a full batch of groups, each with a learning signal
        assert len(groups) == 4 and all(len(scores) == 4 for scores in groups.values())
        assert all(statistics.pvariance(scores) > 0 for scores in groups.values()), groups
    assert sum(row["training/off_policy/evicted_samples/filtered"] for row in rows) > 0  # some were thrown away
    for row in rows:
        assert row["training/off_policy/trajectory_staleness/max"] == 0  # refills are generated on-policy
        assert row["critic/score/zero_variance_group_fraction"] == 0.0
