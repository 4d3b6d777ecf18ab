"""The dry-run plan's training line is the placement a run makes: the test starts the worker group
for a 2-rank config and compares what it started (processes, roles, device) with the plan."""

from __future__ import annotations

import os

import pytest

from core_v1.config import load_config
from core_v1.trainer.plan import describe_plan, describe_training, training_placement
from core_v1.transfer_store import make_transfer_store
from core_v1.workers.group import WorkerGroup
from tests.conftest import quickstart_overrides_on_ray


@pytest.mark.slow
@pytest.mark.parametrize("ranks,estimator", [(2, "gae"), (1, "grpo")])
def test_plan_matches_the_started_ranks(ranks, estimator, tiny_assets, ray_four_cpus, tmp_path):
    config = load_config(
        quickstart_overrides_on_ray(
            tiny_assets, tmp_path, 1, f"trainer.n_gpus_per_node={ranks}", f"algorithm.adv_estimator={estimator}"
        ),
        config_name="quickstart",
    )
    planned = training_placement(config)
    assert describe_training(planned) in describe_plan(config)
    group = WorkerGroup(config, make_transfer_store("ray"), "cpu")
    try:
        assert group.layout() == planned
        pids = {rank["pid"] for rank in group.placement}
        assert len(pids) == (ranks if ranks > 1 else 1)
        assert (os.getpid() in pids) == (ranks == 1)
        for pid in pids:
            os.kill(pid, 0)  # a live process on this machine
    finally:
        group.shutdown()
