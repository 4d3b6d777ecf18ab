"""V0 and V1 `sync` run the same agent-loop training: same seed and config, same per-step numbers.

As test_parity.py does for single-turn runs, for `tool_agent` (one Gsm8kTool round per session
with budget left, tool tokens masked out of the loss, see test_agent_loops.py), for a loop that
fails session 0 of each group and scores odd sessions itself (agent_loop_plugins.py), and for rows
that pick their loop (`agent_name` "tool_agent" or None for the default `single_turn_agent`): per step,
the score and the policy loss agree to 1e-4 relative, and so do the loop's own metrics
(`agent/*/mean`, `num_turns/*`); the failed samples and staleness are equal; V0 reports V1's keys.
"""

from __future__ import annotations

import math

import pytest

from core_v1.utils.plugins import import_plugin
from legacy_v0.main_ppo import run_ppo
from tests.legacy_v0.conftest import AGENT_LOOP_PLUGINS, run_v1_sync, tool_agent_overrides

import_plugin(str(AGENT_LOOP_PLUGINS))  # V0 runs in this process: as the V0 entry imports trainer.v1.plugins

STEPS = 2
CASES = {
    "tool_agent": "tool_agent",
    "flaky_self_scoring": "flaky_self_scoring_for_v0_test",
    "per_row_loops": "single_turn_agent",
}  # the last: half the rows name tool_agent
COMPARED = ("critic/score/mean", "actor/pg_loss", "num_turns/mean", "response_length/mean")
EQUAL = (
    "rollout/failed_samples",
    "training/off_policy/trajectory_staleness/mean",
    "training/off_policy/trajectory_staleness/max",
    "training/off_policy/mixed_version_fraction",
)
TIMINGS = ("agent/generate_seconds/mean", "agent/tool_seconds/mean")  # wall-clock: never equal


@pytest.fixture(scope="module", params=sorted(CASES))
def both_runs(request, tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides, with_agent_names

    def config(trainer: str):
        out = tmp_path_factory.mktemp(f"{request.param}-{trainer}")
        assets = with_agent_names(tiny_assets, out) if request.param == "per_row_loops" else tiny_assets
        return load_config(
            small_run_overrides(assets, out / "run", STEPS, *tool_agent_overrides(out, CASES[request.param])),
            config_name="quickstart",
        )

    return request.param, run_ppo(config("v0")), run_v1_sync(config("v1"))


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7)


@pytest.mark.slow
def test_per_step_scores_losses_and_loop_metrics_agree(both_runs):
    name, v0, v1 = both_runs
    assert len(v0) == len(v1) == STEPS
    for step, (old, new) in enumerate(zip(v0, v1), start=1):
        loop_metrics = sorted(key for key in new if key.startswith("agent/") and key not in TIMINGS)
        assert "agent/num_tool_calls/mean" in loop_metrics
        for key in (*COMPARED, *loop_metrics):
            assert _close(old[key], new[key]), f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"
        for key in EQUAL:
            assert old[key] == new[key], f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"


@pytest.mark.slow
def test_the_comparison_is_not_trivial(both_runs):
    name, v0, _ = both_runs
    assert any(abs(m["actor/pg_loss"]) > 1e-5 for m in v0)
    assert all(m["num_turns/max"] > 2 for m in v0)  # tool rounds happened
    failed = [m["rollout/failed_samples"] for m in v0]
    assert failed == ([4] * STEPS if name == "flaky_self_scoring" else [0] * STEPS)
    if name == "flaky_self_scoring":  # the loop's own scores (10 and up) are in the mean
        assert all(m["critic/score/max"] > 10 for m in v0)
    if name == "per_row_loops":
        assert all(0 < m["rollout/agent_loop/tool_agent/share"] < 1 for m in v0)


@pytest.mark.slow
def test_v0_reports_the_v1_metric_keys(both_runs):
    _, v0, v1 = both_runs
    # Waiting for the replay buffer is a V1-only phase; V0 generates the batch itself.
    assert set(v1[-1]) - set(v0[-1]) <= {"timing_s/wait_for_batch"}
    assert set(v0[-1]) <= set(v1[-1])
