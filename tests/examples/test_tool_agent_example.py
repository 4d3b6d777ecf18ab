"""The calculator example trains for two steps through `tool_agent`, on CPU, as its README says."""

from __future__ import annotations

import json

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from examples.tiny_model import make_tiny_model
from examples.tool_agent.prepare import TOOL_WORDS, run_overrides, write_data
from tests.conftest import quickstart_overrides


@pytest.fixture(scope="module")
def tool_assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("tool_agent")
    train, val = write_data(root / "data", num_train=8, num_val=4)
    model = make_tiny_model(root / "model", TOOL_WORDS, hidden_size=32, num_layers=2)
    return {"data": root / "data", "model": model, "train": train, "val": val}


@pytest.mark.slow
def test_calculator_example_trains(tool_assets, ray_runtime, tmp_path):
    example = run_overrides(tool_assets["data"], tool_assets["model"])
    config = load_config(
        [
            *example,
            *quickstart_overrides(
                tool_assets,
                tmp_path,
                2,
                "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                "actor_rollout_ref.rollout.n=2",
                "trainer.test_freq=-1",
            ),
        ],
        config_name="quickstart",
    )
    assert config.actor_rollout_ref.rollout.multi_turn.tool_config_path.endswith("tool_config.yaml")
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    assert rows[-1]["rollout/failed_samples"] == 0  # every row ran through tool_agent without error
    assert rows[-1]["response_length/mean"] > 0
    assert {"reward/answered/mean", "reward/tool_rounds/mean"} <= rows[-1].keys()  # the example's reward.py scored
