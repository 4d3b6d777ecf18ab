"""RLOO, REINFORCE++ and ReMax train on V1 `sync` (ReMax through `core_v1.trainer.remax`).

One set of V1 components (replicas, store, agent loops, engines) serves the three trainers in
turn: each estimator only changes the advantage stage (and, for ReMax, the reward stage), so a
fresh Ray deployment per estimator would test nothing more. ReMax runs first, on the fresh
components, so it is also compared with a V0 ReMax run from the same start (parity).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from core_v1.config import ConfigError
from core_v1.trainer import get_trainer_cls

ESTIMATORS = ("remax", "rloo", "reinforce_plus_plus")  # remax first: it starts from fresh components
STEPS = 2


def _with_estimator(config, name):
    return dataclasses.replace(config, algorithm=dataclasses.replace(config.algorithm, adv_estimator=name))


@pytest.fixture(scope="module")
def v1_runs(tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from core_v1.trainer.setup import build_components
    from tests.legacy_v0.conftest import small_run_overrides

    base = load_config(
        small_run_overrides(tiny_assets, tmp_path_factory.mktemp("v1est"), STEPS, "algorithm.adv_estimator=remax"),
        config_name="quickstart",
    )
    components = build_components(base)
    seen_baselines = {}
    try:
        histories = {}
        for name in ESTIMATORS:
            config = _with_estimator(base, name)
            trainer_cls = get_trainer_cls("sync")

            class Recording(trainer_cls):
                def _compute_advantage(self, batch, metrics):
                    seen_baselines[name] = batch.columns.get("reward_baselines")
                    return super()._compute_advantage(batch, metrics)

            histories[name] = Recording(config, components).fit()
        return histories, seen_baselines
    finally:
        components.close()


@pytest.mark.parametrize("estimator", ESTIMATORS)
def test_estimator_trains_on_v1(v1_runs, estimator):
    histories, _ = v1_runs
    assert len(histories[estimator]) == STEPS
    for metrics in histories[estimator]:
        assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["critic/advantages/mean"])


def test_remax_on_v1_equals_remax_on_v0(v1_runs, small_config):
    from legacy_v0.main_ppo import run_ppo

    histories, _ = v1_runs
    v0 = run_ppo(small_config(STEPS, "algorithm.adv_estimator=remax"))
    for old, new in zip(v0, histories["remax"]):
        for key in ("critic/score/mean", "actor/pg_loss", "critic/advantages/mean"):
            assert math.isclose(old[key], new[key], rel_tol=1e-4, abs_tol=1e-7), (key, old[key], new[key])


def test_remax_gets_one_greedy_baseline_per_prompt_group(v1_runs):
    _, baselines = v1_runs
    assert baselines["rloo"] is None
    remax = torch.tensor(baselines["remax"])
    assert remax.shape == (16,) and torch.all((remax >= 0) & (remax <= 1))
    assert all(torch.unique(group).numel() == 1 for group in remax.view(4, 4))  # groups are adjacent rows


def test_remax_refuses_an_async_mode(small_config):
    config = small_config(1, "algorithm.adv_estimator=remax", "trainer.v1.trainer_mode=colocate_async")
    with pytest.raises(ConfigError, match="remax needs trainer.v1.trainer_mode=sync"):
        get_trainer_cls("colocate_async").check_config(config)
