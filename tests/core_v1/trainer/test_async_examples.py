"""The seed note's custom trainer mode and custom sampler, as shipped in examples/, drive real runs."""

from __future__ import annotations

import json
from pathlib import Path

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from core_v1.trainer import get_trainer_cls
from core_v1.trainer.setup import load_custom_sampler
from tests.conftest import quickstart_overrides

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SMALL = (
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.rollout.n=2",
    "trainer.test_freq=-1",
)


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_seed_trainer_mode_syncs_weights_every_second_step(tiny_assets, ray_runtime, tmp_path):
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            3,
            f"trainer.v1.plugins=[{EXAMPLES / 'custom_trainer_mode/my_trainer.py'}]",
            "trainer.v1.trainer_mode=my_mode",
            *SMALL,
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0  # the plug-in registered my_mode before the run looked it up
    assert get_trainer_cls("my_mode").__name__ == "MyTrainer"
    # Step 2 samples with the weights of step 0 (no update after step 1): one version behind.
    assert [r["training/off_policy/trajectory_staleness/max"] for r in _rows(tmp_path)] == [0, 1, 0]


def test_seed_sampler_is_loaded_from_its_path_and_samples_in_an_async_mode(
    tiny_assets, ray_runtime, tmp_path, monkeypatch
):
    overrides = quickstart_overrides(
        tiny_assets,
        tmp_path,
        2,
        f"trainer.v1.sampler.custom_sampler.path={EXAMPLES / 'custom_sampler/my_sampler.py'}",
        "trainer.v1.sampler.custom_sampler.name=MyReplayBuffer",
        "trainer.v1.sampler.max_off_policy_threshold=8",
        "trainer.v1.trainer_mode=colocate_async",
        *SMALL,
    )
    config = load_config(overrides, config_name="quickstart")
    sampler_cls = load_custom_sampler(config)
    assert sampler_cls.__name__ == "MyReplayBuffer"
    # The loader gives the run this same class (one module per file), so its own `sample` can be
    # watched: a spy that records each call and returns what the real method returns.
    calls = []
    real_sample = sampler_cls.sample

    def watched_sample(self, global_steps, partition_id, batch_size):
        batch, metrics = real_sample(self, global_steps, partition_id, batch_size)
        calls.append((type(self).__name__, global_steps, partition_id, batch_size, len(batch)))
        return batch, metrics

    monkeypatch.setattr(sampler_cls, "sample", watched_sample)
    assert run_v1(config) == 0
    rows = _rows(tmp_path)
    assert len(rows) == 2 and rows[-1]["rollout/failed_samples"] == 0
    # One training batch per step came out of MyReplayBuffer.sample: 4 prompts x 2 samples each.
    assert calls == [("MyReplayBuffer", step, "train", 4, 8) for step in (1, 2)]
    assert rows[-1]["training/off_policy/trajectory_staleness/max"] <= 1  # the warm-up batch, one step ahead
