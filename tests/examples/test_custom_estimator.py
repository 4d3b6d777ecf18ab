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
    advantages, _ = estimator(token_level_rewards=rewards, response_mask=torch.ones(4, 2), index=["a", "a", "a", "b"])
    # group a: scores 1.0, 0.0, 0.3 -> median 0.3; group b alone -> 0
    assert torch.allclose(advantages[:, 0], torch.tensor([0.7, -0.3, 0.0, 0.0]))


def test_missing_plugin_is_a_one_line_error(tmp_path, capsys, tiny_assets):
    with pytest.raises(PluginError, match="does not exist"):
        import_plugin(str(tmp_path / "nope.py"))
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 1),
            f"trainer.v1.plugins=[{tmp_path}/nope.py]",
        ]
    )
    assert code == 2 and "does not exist" in capsys.readouterr().err


# A score that differs between almost any two responses, so most groups have a better and a worse sample.
SPREAD_REWARD = """
import hashlib

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return int(hashlib.sha1(solution_str.encode()).hexdigest(), 16) % 997 / 997
"""


def test_plugin_estimator_trains(tiny_assets, ray_runtime, tmp_path):
    reward = tmp_path / "spread_reward.py"
    reward.write_text(SPREAD_REWARD)
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            f"trainer.v1.plugins=[{PLUGIN}]",
            "algorithm.adv_estimator=median_baseline",
            f"reward.custom_reward_function.path={reward}",
            "actor_rollout_ref.rollout.n=2",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "trainer.test_freq=-1",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    # With two samples per prompt the median is the lower score, so median_baseline gives the worse
    # sample exactly 0 and the better one a positive advantage; GRPO, RLOO and the other built-ins
    # centre the group and give the worse sample a negative one.
    assert [r["critic/advantages/min"] for r in rows] == [0.0, 0.0]
    assert max(r["critic/advantages/max"] for r in rows) > 0
