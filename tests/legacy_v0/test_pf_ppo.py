"""PF-PPO on V0 and V1: the same resampled training, number for number, and not plain PPO.

Both trainers draw step N's rows from a generator seeded by (trainer.seed, N) after the
advantages (`core_v1.algorithms.pf_ppo`), so with the same seed they train on the same rows. At
step 1 a plain run has generated exactly the same batch with exactly the same weights, so any
difference in its policy loss is the resampling's doing.
"""

from __future__ import annotations

import math

import pytest

from legacy_v0.main_ppo import run_ppo
from tests.legacy_v0.conftest import run_v1_sync

STEPS = 3
PF_PPO = ("algorithm.adv_estimator=grpo", "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=pow",
          "algorithm.pf_ppo.weight_pow=2.0")
COMPARED = ("critic/score/mean", "actor/pg_loss", "pf_ppo/unique_row_fraction")


@pytest.fixture(scope="module")
def runs(tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides

    def config(name: str, *overrides: str):
        out = tmp_path_factory.mktemp(name)
        return load_config(small_run_overrides(tiny_assets, out, STEPS, *overrides), config_name="quickstart")

    return {"v0": run_ppo(config("pf-v0", *PF_PPO)),
            "v1": run_v1_sync(config("pf-v1", *PF_PPO)),
            "plain": run_ppo(config("plain-v0", "algorithm.adv_estimator=grpo"))}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7)


def test_v0_and_v1_agree_number_for_number(runs):
    assert len(runs["v0"]) == len(runs["v1"]) == STEPS
    for step, (old, new) in enumerate(zip(runs["v0"], runs["v1"]), start=1):
        for key in COMPARED:
            assert _close(old[key], new[key]), f"step {step} {key}: V0 {old[key]} != V1 {new[key]}"


def test_resampling_changes_the_update(runs):
    pf, plain = runs["v0"][0], runs["plain"][0]
    assert "pf_ppo/unique_row_fraction" not in plain
    assert pf["pf_ppo/unique_row_fraction"] < 1.0  # rows were repeated (and others dropped)
    # Same generation and weights at step 1: only the resampled rows differ.
    assert not _close(pf["actor/pg_loss"], plain["actor/pg_loss"])
    assert not _close(pf["critic/score/mean"], plain["critic/score/mean"])
