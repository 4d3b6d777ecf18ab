"""The seed note's custom agent loop, registered by YAML, drives a real training run: the step metrics
name the loop that made each trajectory, so a run that fell back to the default loop fails."""

from __future__ import annotations

import json
from pathlib import Path

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from tests.conftest import quickstart_overrides

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_agent_loop"


def test_seed_agent_loop_trains(tiny_assets, ray_runtime, tmp_path):
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={EXAMPLE / 'my_agents.yaml'}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=my_agent",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "trainer.test_freq=-1",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:  # every trained trajectory came from the YAML-registered loop, none from the default
        loops = {key for key in row if key.startswith("rollout/agent_loop/")}
        assert loops == {"rollout/agent_loop/my_agent/share"} and row["rollout/agent_loop/my_agent/share"] == 1.0
        assert row["rollout/failed_samples"] == 0 and row["response_length/mean"] > 0
