"""The optimal token baseline on two gloo ranks: `sum_pi_squared` comes back from the ranks through
the store beside the log-probs, and the run trains as one rank does (tolerances: test_parity.py),
with the same `variance_proxy/*` metrics in metrics.jsonl."""

from __future__ import annotations

import math

import pytest

from tests.core_v1.multirank.conftest import train
from tests.core_v1.multirank.test_parity import TOLERANCE

OTB = ("algorithm.adv_estimator=optimal_token_baseline", "actor_rollout_ref.actor.calculate_sum_pi_squared=true")
STEPS = 2
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


@pytest.mark.slow
def test_otb_on_two_ranks_trains_as_on_one(tiny_assets, ray_four_cpus, tmp_path):
    one = train(tiny_assets, tmp_path / "one", 1, STEPS, *OTB)
    two = train(tiny_assets, tmp_path / "two", 2, STEPS, *OTB)
    assert len(one) == len(two) == STEPS
    for step, (single, double) in enumerate(zip(one, two), start=1):
        assert double["critic/score/mean"] == single["critic/score/mean"], step
        assert double["critic/advantages/mean"] == pytest.approx(single["critic/advantages/mean"], **TOLERANCE), step
        assert double["actor/pg_loss"] == pytest.approx(single["actor/pg_loss"], **TOLERANCE), step
        for key in VARIANCE_PROXIES:
            assert math.isfinite(double[key]), (step, key)
            assert double[key] == pytest.approx(single[key], **TOLERANCE), (step, key)
