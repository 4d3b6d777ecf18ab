"""A plug-in advantage estimator joins a run with two config lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core_v1.algorithms import get_adv_estimator_fn
from core_v1.config import load_config
from core_v1.main_ppo import main, run_v1
from core_v1.utils.plugins import PluginError, import_plugin
from tests.conftest import quickstart_overrides

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "custom_estimator" / "my_estimator.py"


def test_plugin_registers_the_estimator_and_its_math_is_right():
    import_plugin(str(PLUGIN))
    import_plugin(str(PLUGIN))  # a second import reuses the module instead of re-registering
    estimator = get_adv_estimator_fn("median_baseline")
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0], [0.0, 0.3], [0.0, 0.9]])
    advantages, _ = estimator(token_level_rewards=rewards, response_mask=torch.ones(4, 2),
                              index=["a", "a", "a", "b"])
    # group a: scores 1.0, 0.0, 0.3 -> median 0.3; group b alone -> 0
    assert torch.allclose(advantages[:, 0], torch.tensor([0.7, -0.3, 0.0, 0.0]))


def test_missing_plugin_is_a_one_line_error(tmp_path, capsys, tiny_assets):
    with pytest.raises(PluginError, match="does not exist"):
        import_plugin(str(tmp_path / "nope.py"))
    code = main(["--config-name=quickstart", *quickstart_overrides(tiny_assets, tmp_path, 1),
                 f"trainer.v1.plugins=[{tmp_path}/nope.py]"])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_plugin_estimator_trains(tiny_assets, ray_runtime, tmp_path):
    config = load_config(quickstart_overrides(
        tiny_assets, tmp_path, 2, f"trainer.v1.plugins=[{PLUGIN}]", "algorithm.adv_estimator=median_baseline",
        "data.train_batch_size=4", "actor_rollout_ref.actor.ppo_mini_batch_size=4", "trainer.test_freq=-1"),
        config_name="quickstart")
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and "critic/advantages/mean" in rows[-1]
