"""Two training ranks feed a separate rollout pool: the sharded weights are gathered bucket by
bucket and broadcast over gloo (the `separate_async` mode), and the pool samples with them."""

from __future__ import annotations

import pytest

from tests.core_v1.multirank.conftest import train


@pytest.mark.slow
def test_two_ranks_broadcast_weights_to_a_separate_pool(tiny_assets, ray_four_cpus, tmp_path):
    metrics = train(
        tiny_assets,
        tmp_path,
        2,
        2,
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
        "trainer.v1.separate_async.parameter_sync_step=2",
    )
    assert [row["step"] for row in metrics] == [1, 2]
    # Every step ships the whole model, gathered from the two ranks' shards.
    sizes = [row["weight_sync/bytes"] for row in metrics]
    assert len(set(sizes)) == 1 and sizes[0] > 0
    assert all(row["training/off_policy/trajectory_staleness/max"] <= 2 for row in metrics)
