"""V0 and V1 `sync` are the same training: same seed and config, same per-step numbers.

Both trainers load the same tiny model, number prompts the same way (uids from the run seed
and the submission counter), seed every sample from (seed, uid, session), build the same padded
batch in the same row order, and call the same engines and `core_v1.algorithms`. So for GRPO and
for PPO with a critic (GAE, here with the KL loss to a reference policy as well), and for LoRA
(the KL loss to the base model under the adapters) the per-step score and policy loss agree to
1e-4 relative. (ReMax parity: test_v1_estimators.py.)

With a grader that raises on some responses (`flaky`), both trainers fail the same samples, train
on the rest, and report the same `rollout/failed_samples` and staleness, step by step.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from legacy_v0.main_ppo import run_ppo
from core_v1.utils.loading import load_object
from tests.legacy_v0.conftest import DENSE_REWARD, run_v1_sync

FLAKY_REWARD = Path(__file__).with_name("flaky_reward.py")

STEPS = 5
CASES = {  # small_run_overrides turns the preset's rollout importance weights off (see there)
    # GRPO validates after its last step too, so that both trainers' validation files compare.
    "grpo": (
        "algorithm.adv_estimator=grpo",
        f"trainer.test_freq={STEPS}",
        "trainer.validation_data_dir=${trainer.default_local_dir}/validation",
    ),
    "gae": ("algorithm.adv_estimator=gae", "actor_rollout_ref.actor.use_kl_loss=true"),
    # LoRA: only the adapter trains; the reference is the base model with the adapters disabled.
    "lora": (
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.model.lora_rank=8",
        "actor_rollout_ref.model.lora_alpha=16",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.optim.lr=5e-3",
    ),
    "flaky": ("algorithm.adv_estimator=grpo", f"reward.custom_reward_function.path={FLAKY_REWARD}"),
}
COMPARED = ("critic/score/mean", "actor/pg_loss")
DUMPS = ("trainer.rollout_data_dir=${trainer.default_local_dir}/rollouts",)  # every case writes verl's rollout files


@pytest.fixture(scope="module", params=sorted(CASES))
def both_runs(request, tiny_assets, ray_runtime, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides

    overrides = CASES[request.param]

    outs = {trainer: tmp_path_factory.mktemp(f"{request.param}-{trainer}") for trainer in ("v0", "v1")}

    def config(trainer: str):
        return load_config(
            small_run_overrides(tiny_assets, outs[trainer], STEPS, *overrides, *DUMPS), config_name="quickstart"
        )

    return request.param, run_ppo(config("v0")), run_v1_sync(config("v1")), outs


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-7)


def test_per_step_score_and_policy_loss_agree(both_runs):
    name, v0, v1, _ = both_runs
    assert len(v0) == len(v1) == STEPS
    for step, (old, new) in enumerate(zip(v0, v1), start=1):
        for key in COMPARED:
            assert _close(old[key], new[key]), f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"
    if name == "gae":
        for old, new in zip(v0, v1):
            assert _close(old["critic/vf_loss"], new["critic/vf_loss"])
    if name in ("gae", "lora"):
        for old, new in zip(v0, v1):
            assert _close(old["actor/kl_loss"], new["actor/kl_loss"])


def test_the_comparison_is_not_trivial(both_runs):
    # A reward that is always 0 would make every loss 0 and parity meaningless.
    _, v0, _, _ = both_runs
    assert len({round(m["critic/score/mean"], 6) for m in v0}) > 1
    assert any(abs(m["actor/pg_loss"]) > 1e-5 for m in v0)


def test_v0_reports_the_v1_metric_keys(both_runs):
    _, v0, v1, _ = both_runs
    # Waiting for the replay buffer is a V1-only phase; V0 generates the batch itself, without agent loops.
    v1_only = {key for key in set(v1[-1]) - set(v0[-1]) if not key.startswith("rollout/agent_loop/")}
    assert v1_only <= {"timing_s/wait_for_batch"}
    assert set(v0[-1]) <= set(v1[-1])


REPORTED = (
    "rollout/failed_samples",
    "training/off_policy/trajectory_staleness/mean",
    "training/off_policy/trajectory_staleness/max",
    "training/off_policy/off_policy_token_fraction",
    "training/off_policy/mixed_version_fraction",
)


def test_v0_reports_the_failed_samples_and_staleness_v1_reports(both_runs):
    name, v0, v1, _ = both_runs
    for step, (old, new) in enumerate(zip(v0, v1), start=1):
        for key in REPORTED:
            assert old[key] == new[key], f"{name} step {step} {key}: V0 {old[key]} != V1 {new[key]}"
    failed = [m["rollout/failed_samples"] for m in v0]
    if name == "flaky":  # the grader raised on some samples of every step, never on a whole batch
        assert all(0 < count < 16 for count in failed), failed
    else:
        assert failed == [0] * STEPS


def test_v0_and_v1_write_the_same_generation_files(both_runs, tiny_assets):
    """verl's `trainer.rollout_data_dir` (and, for GRPO, `validation_data_dir`) files: the same on both
    trainers, and on V0 the samples it trained on (its logged mean score, the data's truths, each
    response's score by the run's reward function)."""
    name, v0, _, outs = both_runs
    folders = ("rollouts", "validation") if name == "grpo" else ("rollouts",)
    for folder in folders:
        files = {trainer: sorted(path.name for path in (outs[trainer] / folder).iterdir()) for trainer in outs}
        expected = [f"{step}.jsonl" for step in range(1, STEPS + 1)] if folder == "rollouts" else [f"{STEPS}.jsonl"]
        assert files["v0"] == files["v1"] == expected, folder
        for file in expected:
            assert (outs["v0"] / folder / file).read_text() == (outs["v1"] / folder / file).read_text(), file
    truths = {
        (row["prompt"][0]["content"], row["reward_model"]["ground_truth"])
        for row in pd.read_parquet(tiny_assets["train"]).to_dict("records")
    }
    dense_score = load_object(f"{DENSE_REWARD}:compute_score")  # the flaky grader's score where it scores
    for step, metrics in enumerate(v0, start=1):
        lines = [json.loads(line) for line in (outs["v0"] / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(lines) == 16 - metrics["rollout/failed_samples"] and {line["step"] for line in lines} == {step}
        assert math.isclose(
            sum(line["score"] for line in lines) / len(lines), metrics["critic/score/mean"], rel_tol=1e-6, abs_tol=1e-7
        )
        for line in lines:  # "user\n1+2=\nassistant\n": the chat text of a data row, with that row's truth
            assert (line["input"].split("\n")[1], line["gts"]) in truths
            expected = dense_score("arithmetic", line["output"], line["gts"])
            assert math.isclose(line["score"], expected["score"], rel_tol=1e-6) and line["digits"] == expected["digits"]
