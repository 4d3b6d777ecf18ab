"""A V1 GRPO run of a tiny Qwen2-VL on images (examples/vision_count: verl's multimodal parquet
format), through Ray, the transfer store and the training ranks.

What it pins: the run trains, and the ranks' forwards take the rows' images. The recomputed
log-probs of the sampled tokens match the rollout's to float noise only when the actor sees the
same images the engine saw (without them the gap was 0.024 per token on this task).
"""

from __future__ import annotations

import json
import math

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from examples.tiny_vlm import make_tiny_vlm
from examples.vision_count.prepare import TASK_WORDS, write_data


@pytest.mark.slow
def test_a_vision_language_model_trains_on_images(ray_runtime, tmp_path):
    train, val = write_data(tmp_path / "data")
    model = make_tiny_vlm(tmp_path / "model", TASK_WORDS[2:], vocab_size=40, base_words=TASK_WORDS)
    config = load_config([
        f"data.train_files={train}", f"data.val_files={val}", f"actor_rollout_ref.model.path={model}",
        f"trainer.default_local_dir={tmp_path / 'out'}", "trainer.total_training_steps=2", "trainer.progress_bar=false",
        "trainer.test_freq=-1", "data.train_batch_size=4", "data.max_prompt_length=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        "actor_rollout_ref.actor.freeze_vision_tower=true"], config_name="quickstart")
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["training/rollout_actor_logprob_diff/mean"] < 1e-5
        assert math.isfinite(row["actor/grad_norm"]) and row["actor/grad_norm"] > 0
