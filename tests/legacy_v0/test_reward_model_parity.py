"""A served reward model trains the same on V0 and V1, number for number (GRPO, and ReMax, whose
greedy baseline the reward model scores too), with either way of combining it with the rule."""

from __future__ import annotations

import math

import pytest

from legacy_v0.main_ppo import run_ppo
from tests.legacy_v0.conftest import run_v1_sync

STEPS = 2
CASES = {
    "grpo-replace": ("algorithm.adv_estimator=grpo",),
    "remax-add": ("algorithm.adv_estimator=remax", "reward.reward_model.combine=add"),
}
COMPARED = ("critic/score/mean", "actor/pg_loss", "reward_model/score/mean", "reward_model/rule_score/mean")


@pytest.fixture(scope="module")
def reward_model_dir(tiny_assets, tmp_path_factory):
    """A random one-label Qwen2ForSequenceClassification with the policy's tokenizer."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tiny_assets["model"])
    torch.manual_seed(3)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    out = tmp_path_factory.mktemp("rm")
    Qwen2ForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module", params=sorted(CASES))
def both_runs(request, tiny_assets, reward_model_dir, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides

    overrides = (
        *CASES[request.param],
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={reward_model_dir}",
        "reward.reward_model.micro_batch_size_per_gpu=5",
    )

    def config(trainer: str):
        out = tmp_path_factory.mktemp(f"{request.param}-{trainer}")
        return load_config(small_run_overrides(tiny_assets, out, STEPS, *overrides), config_name="quickstart")

    return request.param, run_ppo(config("v0")), run_v1_sync(config("v1"))


def test_v0_and_v1_agree_number_for_number(both_runs):
    name, v0, v1 = both_runs
    assert len(v0) == len(v1) == STEPS
    for step, (old, new) in enumerate(zip(v0, v1), start=1):
        for key in COMPARED:
            assert math.isclose(old[key], new[key], rel_tol=1e-4, abs_tol=1e-6), (
                f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"
            )


def test_the_reward_is_the_models(both_runs):
    name, v0, _ = both_runs
    for row in v0:
        rule, model = row["reward_model/rule_score/mean"], row["reward_model/score/mean"]
        expected = model if name.endswith("replace") else rule + model
        assert math.isclose(row["critic/score/mean"], expected, rel_tol=1e-4, abs_tol=1e-6)
        assert not math.isclose(model, rule, abs_tol=1e-3)  # the two scores are really different
