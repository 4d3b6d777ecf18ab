"""A Ray runtime with room for two CPU training ranks beside the rollout replica, and a helper
that trains the quickstart task for a few steps at a given number of ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from tests.conftest import quickstart_overrides

# 4 prompts x 4 samples, two optimizer steps per PPO step: small enough for CI, big enough that
# every rank holds rows of several groups and each mini-batch splits over the ranks.
SMALL_BATCH = (
    "data.train_batch_size=4",
    "actor_rollout_ref.rollout.n=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    "trainer.test_freq=-1",
    "trainer.logger=[jsonl]",
    "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
    # The rollout IS weights carry the replica's batching noise (not the ranks'): left out.
    "algorithm.rollout_correction.rollout_is=null",
)
# Each estimator's runs. GRPO's take a reward spread by the response's text (spread_reward.py), so
# that every group has advantages a rank pairing them with the wrong rows would show.
ESTIMATOR_OVERRIDES = {
    "grpo": (
        "algorithm.adv_estimator=grpo",
        f"reward.custom_reward_function.path={Path(__file__).with_name('spread_reward.py')}",
    ),
    "gae": ("algorithm.adv_estimator=gae",),
}


@pytest.fixture(scope="package")
def ray_four_cpus():
    """Ray's logical CPUs: 1 replica + 2 ranks need 3; they share the machine's cores."""
    from tests.conftest import local_ray

    with local_ray(num_cpus=4):
        yield


def train(assets, out: Path, ranks: int, steps: int, *extra: str) -> list[dict]:
    """Train `steps` steps on `ranks` CPU ranks; returns each step's logged metrics. One rank runs
    in this process (`trainer.v1.placement=local`: the numbers of Ray actors), more as Ray actors."""
    config = load_config(
        quickstart_overrides(
            assets,
            out,
            steps,
            f"trainer.n_gpus_per_node={ranks}",
            *SMALL_BATCH,
            *extra,
            placement="local" if ranks == 1 else "ray",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


STEPS = 5


@pytest.fixture(scope="package")
def two_rank_runs(tiny_assets, ray_four_cpus, tmp_path_factory):
    """`runs(estimator) -> (out_dir, metrics)`: 5 steps on 2 ranks, checkpoints every 2 steps; each
    estimator trains once per session (the parity and the resume tests share it)."""
    cache: dict[str, tuple[Path, list[dict]]] = {}

    def runs(estimator: str):
        if estimator not in cache:
            out = tmp_path_factory.mktemp(f"two_ranks_{estimator}")
            cache[estimator] = (
                out,
                train(tiny_assets, out, 2, STEPS, *ESTIMATOR_OVERRIDES[estimator], "trainer.save_freq=2"),
            )
        return cache[estimator]

    return runs
