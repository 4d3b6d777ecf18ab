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
PF_PPO = ("algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=pow", "algorithm.pf_ppo.weight_pow=2.0")
ESTIMATORS = {"grpo": ("algorithm.adv_estimator=grpo",), "gae": ("algorithm.adv_estimator=gae",)}  # gae: verl's case
COMPARED = ("critic/score/mean", "actor/pg_loss", "pf_ppo/unique_row_fraction")


@pytest.fixture(scope="module")
def run(tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides

    done: dict[tuple, list[dict]] = {}  # each distinct run once per module

    def run_one(trainer, *overrides: str) -> list[dict]:
        if (trainer, overrides) not in done:
            out = tmp_path_factory.mktemp("run")
            done[trainer, overrides] = trainer(
                load_config(small_run_overrides(tiny_assets, out, STEPS, *overrides), config_name="quickstart")
            )
        return done[trainer, overrides]

    return run_one


@pytest.fixture(scope="module", params=sorted(ESTIMATORS))
def both_runs(request, run):
    overrides = (*ESTIMATORS[request.param], *PF_PPO)
    return request.param, run(run_ppo, *overrides), run(run_v1_sync, *overrides)


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7)


def test_v0_and_v1_agree_number_for_number(both_runs):
    name, v0, v1 = both_runs
    assert len(v0) == len(v1) == STEPS
    compared = COMPARED + (("critic/vf_loss",) if name == "gae" else ())
    for step, (old, new) in enumerate(zip(v0, v1), start=1):
        for key in compared:
            assert _close(old[key], new[key]), f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"


def test_resampling_changes_the_update(run):
    pf = run(run_ppo, *ESTIMATORS["grpo"], *PF_PPO)[0]
    plain = run(run_ppo, *ESTIMATORS["grpo"])[0]
    assert "pf_ppo/unique_row_fraction" not in plain
    assert pf["pf_ppo/unique_row_fraction"] < 1.0  # rows were repeated (and others dropped)
    # Same generation and weights at step 1: only the resampled rows differ.
    assert not _close(pf["actor/pg_loss"], plain["actor/pg_loss"])
    assert not _close(pf["critic/score/mean"], plain["critic/score/mean"])
