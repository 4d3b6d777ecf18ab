"""GRPO runs of a tiny Qwen2-VL on images (examples/vision_count: verl's multimodal parquet
format), on V1 (Ray, the transfer store, the training ranks) and on V0 (`trainer.use_v1=false`).

What they pin: both train, and their forwards take the rows' images. The recomputed log-probs of
the sampled tokens match the rollout's to float noise only when the actor sees the images the
engine saw (without them the gap was 0.024 per token on this task). V0 and V1 run the same
training: per-step score, policy loss and gradient norm agree.
"""

from __future__ import annotations

import json
import math

import pytest

from core_v1.main_ppo import main
from examples.tiny_vlm import make_tiny_vlm
from examples.vision_count.prepare import TASK_WORDS, write_data

# A score that varies with the sampled text, so that every group has a policy-gradient signal
# (the tiny random policy rarely answers with a digit, which the task's own scorer needs).
TEXT_SCORE = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return sum(ord(ch) for ch in solution_str) % 7 / 6
"""


def _run(tmp_path, name: str, use_v1: bool) -> list[dict]:
    train, val = write_data(tmp_path / "data")
    model = tmp_path / "model"
    if not model.is_dir():
        make_tiny_vlm(model, TASK_WORDS[2:], vocab_size=40, base_words=TASK_WORDS)
    reward = tmp_path / "text_score.py"
    reward.write_text(TEXT_SCORE)
    out = tmp_path / name
    code = main([
        "--config-name=quickstart", f"trainer.use_v1={str(use_v1).lower()}", f"data.train_files={train}", f"data.val_files={val}", f"actor_rollout_ref.model.path={model}",
        f"trainer.default_local_dir={out}", "trainer.total_training_steps=2", "trainer.progress_bar=false",
        "trainer.test_freq=-1", "data.train_batch_size=4", "data.max_prompt_length=32",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4", "actor_rollout_ref.rollout.n=4",
        f"reward.custom_reward_function.path={reward}", "actor_rollout_ref.actor.freeze_vision_tower=true"])
    assert code == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_a_vision_language_model_trains_on_images_on_v1_and_v0_alike(ray_runtime, tmp_path):
    v1, v0 = _run(tmp_path, "v1", use_v1=True), _run(tmp_path, "v0", use_v1=False)
    assert len(v1) == len(v0) == 2
    for row in v1 + v0:
        assert row["training/rollout_actor_logprob_diff/mean"] < 1e-5
        assert math.isfinite(row["actor/grad_norm"]) and row["actor/grad_norm"] > 0
    assert any(row["actor/pg_loss"] != 0 for row in v1)
    for new, old in zip(v1, v0):
        for key in ("critic/score/mean", "actor/pg_loss", "actor/grad_norm"):
            assert new[key] == pytest.approx(old[key], abs=1e-4), key
