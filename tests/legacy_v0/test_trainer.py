"""The V0 trainer end to end on a tiny model: metrics file, checkpoints, exact resume, estimators."""

from __future__ import annotations

import math
import shutil

import pytest

from core_v1.config import load_config
from core_v1.utils.tracking import read_metrics
from legacy_v0.main_ppo import run_ppo

GAE = ("algorithm.adv_estimator=gae", "trainer.test_freq=2")
# A constant rate: a decaying schedule spans total_training_steps, which differs between the runs.
RESUMABLE_GAE = (*GAE, "actor_rollout_ref.actor.optim.lr_scheduler_type=constant")


@pytest.fixture(scope="module")
def two_saved_steps(tiny_assets, ray_runtime, tmp_path_factory):
    """Two GAE steps, checkpointed at step 2: the run the resume test continues (from a copy) and
    the metrics test reads (one run for both)."""
    from tests.legacy_v0.conftest import small_run_overrides

    out = tmp_path_factory.mktemp("two_saved_steps")
    run_ppo(
        load_config(
            small_run_overrides(tiny_assets, out, 2, *RESUMABLE_GAE, "trainer.save_freq=2"), config_name="quickstart"
        )
    )
    return out


def test_checkpoint_and_resume_continue_the_uninterrupted_run(small_config, two_saved_steps, tmp_path):
    straight = run_ppo(small_config(3, *RESUMABLE_GAE, out=tmp_path / "straight"))
    resumed_dir = tmp_path / "resumed"
    shutil.copytree(two_saved_steps, resumed_dir)  # the metrics test reads the original's two steps
    assert (resumed_dir / "latest_checkpointed_iteration.txt").read_text() == "2"
    for part in ("actor", "critic", "trainer_state.pt"):
        assert (resumed_dir / "global_step_2" / part).exists(), part

    after_resume = run_ppo(small_config(3, *RESUMABLE_GAE, "trainer.resume_mode=auto", out=resumed_dir))
    assert len(after_resume) == 1  # only step 3 was left to run
    logged = read_metrics(resumed_dir / "metrics.jsonl")
    assert [row["step"] for row in logged] == [1, 2, 3]
    # Model, optimizer, LR schedule, data position and prompt numbering all came back.
    for key in ("critic/score/mean", "actor/pg_loss", "critic/vf_loss"):
        assert math.isclose(after_resume[0][key], straight[2][key], rel_tol=1e-5, abs_tol=1e-8), key


def test_metrics_jsonl_has_the_documented_keys_and_validation(two_saved_steps):
    rows = read_metrics(two_saved_steps / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for key in (
        "critic/score/mean",
        "response_length/mean",
        "actor/pg_loss",
        "actor/entropy",
        "timing_s/gen",
        "timing_s/step",
        "perf/throughput",
        "critic/vf_loss",
        "critic/values/mean",
        "timing_s/update_critic",
        "training/global_step",
        "reward/digits/mean",
        "val/score/mean",
        "val-core/arithmetic/reward/mean@1",
    ):
        assert key in rows[-1], key
    assert "val/score/mean" not in rows[0]  # test_freq=2


@pytest.mark.parametrize("estimator", ["rloo", "reinforce_plus_plus", "remax", "grpo_passk"])
def test_critic_free_estimators_train(small_config, tmp_path, estimator):
    history = run_ppo(small_config(2, f"algorithm.adv_estimator={estimator}", out=tmp_path))
    assert len(history) == 2
    assert all(math.isfinite(m["actor/pg_loss"]) and math.isfinite(m["critic/advantages/mean"]) for m in history)
    assert "critic/vf_loss" not in history[-1]


def test_critic_warmup_holds_the_actor_back(small_config, tmp_path):
    history = run_ppo(small_config(2, "algorithm.adv_estimator=gae", "trainer.critic_warmup=1", out=tmp_path))
    assert "actor/pg_loss" not in history[0] and "critic/vf_loss" in history[0]
    assert "actor/pg_loss" in history[1]


def test_kl_in_reward_uses_the_reference_worker(small_config, tmp_path):
    history = run_ppo(small_config(2, "algorithm.use_kl_in_reward=true", out=tmp_path))
    assert {"actor/reward_kl_penalty", "actor/reward_kl_penalty_coeff", "timing_s/ref"} <= set(history[-1])
    # The first step samples from the reference weights themselves: the penalty starts at zero.
    assert history[0]["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-6)
    assert history[-1]["critic/rewards/mean"] != history[-1]["critic/score/mean"]


def test_rollout_correction_applies_as_on_v1(small_config, tmp_path):
    history = run_ppo(small_config(1, "algorithm.rollout_correction.rollout_is=token", out=tmp_path))
    assert any(key.startswith("rollout_corr/") for key in history[0])
    # In-process rollout and trainer run the same weights: the policies agree to float noise.
    assert history[0]["training/rollout_actor_logprob_diff/mean"] < 1e-4


def test_agent_loops_v0_cannot_run_are_refused(small_config, tmp_path):
    # V0 runs V1's agent loops (tests/legacy_v0/test_agent_loops.py); what V1 would refuse at start-up
    # V0 refuses too, with V1's line: here an interaction config whose rows name no interaction.
    from core_v1.agent_loop import AgentLoopConfigError

    interactions = tmp_path / "interactions.yaml"
    interactions.write_text(
        "interaction:\n  - name: gsm8k\n    class_name: "
        "core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction\n    config: {}\n"
    )
    config = small_config(
        1, f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={interactions}", out=tmp_path / "run"
    )
    with pytest.raises(
        AgentLoopConfigError, match="interaction_config_path is set, so every row needs interaction_kwargs"
    ):
        run_ppo(config)
