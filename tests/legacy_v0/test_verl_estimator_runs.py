"""verl's further estimators train on the tiny model: the optimal token baseline on V0 and V1 `sync`
(number for number), and OPO, TIR-OTB and the vectorised GRPO / RLOO on V1.

One set of V1 components, built with `actor.calculate_sum_pi_squared=true`, serves every V1 run
(an estimator only changes the advantage stage); `optimal_token_baseline` runs first, on the
fresh components, so that it is the run compared with V0. A last run keeps the preset's rollout
importance weights (which the V0/V1 comparison leaves out, see `small_run_overrides`) to show
that the weights on the batch reach the estimator. Every run logs verl's `variance_proxy/*`
metrics, which `calculate_sum_pi_squared` makes possible whatever the estimator.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

STEPS = 2
OTB = ("algorithm.adv_estimator=optimal_token_baseline", "actor_rollout_ref.actor.calculate_sum_pi_squared=true")
ESTIMATORS = ("optimal_token_baseline", "tir_optimal_token_baseline", "opo", "grpo_vectorized", "rloo_vectorized")
WITH_IS_WEIGHTS = "optimal_token_baseline with rollout_is=token"
VARIANCE_PROXIES = tuple(
    f"variance_proxy/{name}"
    for name in (
        "proxy1_signal_strength",
        "proxy2_total_power",
        "proxy3_pure_noise",
        "expected_a_squared",
        "expected_w",
    )
)


@pytest.fixture(scope="module")
def v1_runs(tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.setup import build_components
    from tests.legacy_v0.conftest import small_run_overrides

    base = load_config(
        small_run_overrides(tiny_assets, tmp_path_factory.mktemp("v1otb"), STEPS, *OTB), config_name="quickstart"
    )
    trainer_cls = get_trainer_cls("sync")
    trainer_cls.check_config(base)
    components = build_components(base, replay_buffer_cls=trainer_cls.replay_buffer_cls)
    seen = {}
    try:
        histories = {}
        for name in (*ESTIMATORS, WITH_IS_WEIGHTS):
            algorithm = dataclasses.replace(base.algorithm, adv_estimator=name.split()[0])
            if name == WITH_IS_WEIGHTS:
                algorithm = dataclasses.replace(
                    algorithm, rollout_correction=dataclasses.replace(algorithm.rollout_correction, rollout_is="token")
                )
            config = dataclasses.replace(base, algorithm=algorithm)

            class Recording(trainer_cls):
                def _compute_advantage(self, batch, metrics, name=name):
                    batch = super()._compute_advantage(batch, metrics)
                    padded = self._read(batch, RECORDED)  # the rows as the ranks train on them
                    seen[name] = {key: padded[key].clone() for key in padded.keys() if key in RECORDED}
                    seen[name]["uid"] = [str(uid) for uid in batch.column("uid")]
                    return batch

            histories[name] = Recording(config, components).fit()
        return histories, seen
    finally:
        components.close()


RECORDED = (
    "sum_pi_squared",
    "response_mask",
    "advantages",
    "returns",
    "token_level_rewards",
    "old_log_probs",
    "rollout_is_weights",
)


@pytest.mark.parametrize("estimator", (*ESTIMATORS, WITH_IS_WEIGHTS))
def test_estimator_trains_on_v1(v1_runs, estimator):
    histories, _ = v1_runs
    assert len(histories[estimator]) == STEPS
    for metrics in histories[estimator]:
        assert math.isfinite(metrics["actor/pg_loss"]) and math.isfinite(metrics["critic/advantages/mean"])
        assert all(math.isfinite(metrics[key]) for key in VARIANCE_PROXIES)
        assert metrics["variance_proxy/proxy1_signal_strength"] == pytest.approx(metrics["actor/grad_norm"] ** 2)
        assert metrics["variance_proxy/expected_w"] > 0


def test_otb_reads_sum_pi_squared_and_gives_per_token_advantages(v1_runs):
    _, seen = v1_runs
    otb = seen["optimal_token_baseline"]
    valid = otb["response_mask"].bool()
    assert ((otb["sum_pi_squared"][valid] > 0) & (otb["sum_pi_squared"][valid] <= 1 + 1e-6)).all()
    # a group baseline would give each row one advantage; the optimal baseline varies along the row
    spread = [otb["advantages"][row][valid[row]].unique().numel() for row in range(valid.shape[0])]
    assert max(spread) > 1


def test_the_batch_s_rollout_is_weights_reach_the_estimator(v1_runs):
    from core_v1.algorithms import compute_optimal_token_baseline_advantage

    _, seen = v1_runs
    last = seen[WITH_IS_WEIGHTS]
    assert "rollout_is_weights" not in seen["optimal_token_baseline"]
    advantages, _ = compute_optimal_token_baseline_advantage(
        token_level_rewards=last["token_level_rewards"],
        response_mask=last["response_mask"],
        index=last["uid"],
        old_log_probs=last["old_log_probs"],
        sum_pi_squared=last["sum_pi_squared"],
        rollout_is_weights=last["rollout_is_weights"],
    )
    # In sync the weights are 1 up to float noise (here the advantages without them differ by
    # about 6e-8), so this shows the plumbing bit for bit; the weights' effect is in
    # tests/core_v1/algorithms/test_algo_verl_estimators.py.
    assert torch.equal(advantages, last["advantages"])


def test_the_variance_proxies_are_those_of_the_trained_batch_and_its_is_weights(v1_runs):
    from core_v1.algorithms import variance_proxy_metrics

    histories, seen = v1_runs
    last, logged = seen[WITH_IS_WEIGHTS], histories[WITH_IS_WEIGHTS][-1]
    expected = variance_proxy_metrics(
        advantages=last["advantages"],
        response_mask=last["response_mask"],
        old_log_probs=last["old_log_probs"],
        sum_pi_squared=last["sum_pi_squared"],
        rollout_is_weights=last["rollout_is_weights"],
        grad_norm=logged["actor/grad_norm"],
    )
    assert {key: logged[key] for key in VARIANCE_PROXIES} == expected


def test_otb_on_v1_equals_otb_on_v0(v1_runs, small_config):
    from legacy_v0.main_ppo import run_ppo

    histories, _ = v1_runs
    v0 = run_ppo(small_config(STEPS, *OTB))
    assert len(v0) == STEPS
    for step, (old, new) in enumerate(zip(v0, histories["optimal_token_baseline"]), start=1):
        for key in (
            "critic/score/mean",
            "actor/pg_loss",
            "critic/advantages/mean",
            "critic/returns/mean",
            *VARIANCE_PROXIES,
        ):
            assert math.isclose(old[key], new[key], rel_tol=1e-4, abs_tol=1e-7), (step, key, old[key], new[key])
    assert any(abs(metrics["actor/pg_loss"]) > 1e-6 for metrics in v0)  # the comparison is not of zeros


def test_otb_without_sum_pi_squared_is_refused_before_the_run(small_config):
    from core_v1.trainer.constraints import config_problems

    problems = config_problems(small_config(STEPS, "algorithm.adv_estimator=tir_optimal_token_baseline"))
    assert problems == [
        "algorithm.adv_estimator=tir_optimal_token_baseline needs the sum of squared token "
        "probabilities from the old-log-prob pass: set "
        "actor_rollout_ref.actor.calculate_sum_pi_squared=true"
    ]
