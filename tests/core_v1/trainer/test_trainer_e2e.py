"""The sync V1 trainer end to end on a tiny model: stage order, hooks, metrics, checkpoints,
generation dumps."""

from __future__ import annotations

import json
import shutil
from statistics import mean

import pandas as pd
import pytest

from core_v1.agent_loop.base import encode_chat
from core_v1.config import load_config
from core_v1.reward.scorers.arithmetic import compute_score
from core_v1.main_ppo import run_v1
from core_v1.trainer import TRAINER_MODES, register_trainer
from core_v1.trainer.modes.sync import SyncTrainer
from tests.conftest import quickstart_overrides

STAGES = [
    "_add_batch_to_generate",
    "_compute_reward_colocate",
    "_balance_batch",
    "_compute_old_log_prob",
    "_compute_values",
    "_compute_advantage",
    "_update_critic",
    "_update_actor",
]
# Resume is compared with an uninterrupted run of a different length: a decaying schedule would differ.
_CONSTANT_LR = "actor_rollout_ref.actor.optim.lr_scheduler_type=constant"
# verl's generation dumps, beside the checkpoints
_DUMPS = (
    "trainer.rollout_data_dir=${trainer.default_local_dir}/rollouts",
    "trainer.validation_data_dir=${trainer.default_local_dir}/validation",
)
HOOKS = ["on_train_begin", "on_step_begin", "on_sample_begin", "on_sample_end", "on_step_end"]


def _recording(name: str):
    def method(self, *args, **kwargs):
        self.calls.append(name)
        return getattr(SyncTrainer, name)(self, *args, **kwargs)

    return method


class RecordingTrainer(SyncTrainer):
    """Records every stage and hook call, then does what sync does."""

    def __init__(self, *args, **kwargs):
        self.calls: list[str] = []
        super().__init__(*args, **kwargs)
        RecordingTrainer.last = self

    def fit(self):
        history = super().fit()
        # Read before the run shuts its components down (the store's actor goes with them).
        self.final_stats = {name: self.components.store.stats(name) for name in ("train", "step")}
        return history


for _name in STAGES + HOOKS:
    setattr(RecordingTrainer, _name, _recording(_name))

if "recording_test" not in TRAINER_MODES:
    register_trainer("recording_test")(RecordingTrainer)


@pytest.fixture(scope="module")
def gae_run(tiny_assets, ray_runtime, tmp_path_factory):
    out = tmp_path_factory.mktemp("gae_run")
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            out,
            2,
            "trainer.v1.trainer_mode=recording_test",
            "algorithm.adv_estimator=gae",
            "trainer.save_freq=2",
            "trainer.test_freq=2",
            "data.train_batch_size=4",
            _CONSTANT_LR,
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            *_DUMPS,
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    return out, RecordingTrainer.last


def test_step_runs_stages_in_order_between_hooks(gae_run):
    _, trainer = gae_run
    first_step = trainer.calls[trainer.calls.index("on_step_begin") : trainer.calls.index("on_step_end") + 1]
    assert first_step == [
        "on_step_begin",
        "_add_batch_to_generate",
        "on_sample_begin",
        "on_sample_end",
        "_compute_reward_colocate",
        "_balance_batch",
        "_compute_old_log_prob",
        "_compute_values",
        "_compute_advantage",
        "_update_critic",
        "_update_actor",
        "on_step_end",
    ]
    assert trainer.calls[0] == "on_train_begin" and trainer.calls.count("on_step_end") == 2


def test_metrics_jsonl_has_the_documented_keys(gae_run):
    out, _ = gae_run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in (
        "critic/score/mean",
        "response_length/mean",
        "actor/pg_loss",
        "actor/entropy",
        "timing_s/gen",
        "timing_s/step",
        "perf/throughput",
        "critic/vf_loss",
        "training/off_policy/trajectory_staleness/mean",
    ):
        assert key in rows[-1], key
    assert "val/score/mean" in rows[-1]
    assert rows[-1]["training/off_policy/trajectory_staleness/mean"] == 0  # sync is on-policy


def test_checkpoint_written_and_store_drained(gae_run):
    out, trainer = gae_run
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "2"
    assert (out / "global_step_2" / "actor").is_dir() and (out / "global_step_2" / "critic").is_dir()
    for stats in trainer.final_stats.values():  # the step partition too: every step released its rows
        assert stats.live == 0 and stats.put == stats.consumed + stats.evicted_total


def test_generation_dumps_hold_the_samples_the_run_trained_on_and_validated(gae_run, tiny_assets):
    out, trainer = gae_run
    logged = {row["step"]: row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    rollouts = {path.name: _lines(path) for path in (out / "rollouts").iterdir()}
    validations = {path.name: _lines(path) for path in (out / "validation").iterdir()}
    assert sorted(rollouts) == ["1.jsonl", "2.jsonl"] and sorted(validations) == ["2.jsonl"]  # test_freq=2
    truths = _prompt_texts(tiny_assets["train"], trainer.components.tokenizer)
    for step, lines in [(1, rollouts["1.jsonl"]), (2, rollouts["2.jsonl"]), (2, validations["2.jsonl"])]:
        assert {line["step"] for line in lines} == {step}
        for line in lines:  # the data's prompt and truth, and the response that earned the score
            assert truths[line["input"]] == line["gts"]
            assert compute_score(line["output"], line["gts"]) == {"score": line["score"], "exact": line["exact"]}
    for step in (1, 2):
        lines = rollouts[f"{step}.jsonl"]
        assert len(lines) == 8 and len({line["input"] for line in lines}) == 4  # 4 prompts x 2 samples
        assert mean(line["score"] for line in lines) == pytest.approx(logged[step]["critic/score/mean"], abs=1e-6)
    lines = validations["2.jsonl"]
    assert len(lines) == len(truths) and {line["input"] for line in lines} == set(truths)  # every val prompt once
    assert all(line["reward"] == line["score"] for line in lines)
    assert mean(line["score"] for line in lines) == pytest.approx(logged[2]["val/score/mean"], abs=1e-6)


def _lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _prompt_texts(parquet, tokenizer) -> dict[str, str]:
    """Each data row's prompt as the dump writes it (its chat text without special tokens) -> its truth."""
    rows = pd.read_parquet(parquet).to_dict("records")
    return {
        tokenizer.decode(encode_chat(tokenizer, list(row["prompt"])), skip_special_tokens=True): row["reward_model"][
            "ground_truth"
        ]
        for row in rows
    }


def _three_steps(tiny_assets, out, *extra):
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            out,
            3,
            "trainer.v1.trainer_mode=recording_test",
            "algorithm.adv_estimator=gae",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "trainer.test_freq=2",
            _CONSTANT_LR,
            *extra,
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_resume_continues_exactly_where_the_run_stopped(gae_run, tiny_assets, tmp_path):
    out, _ = gae_run
    resumed = _three_steps(tiny_assets, out, "trainer.resume_mode=auto")
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert RecordingTrainer.last.calls.count("on_step_end") == 1  # only step 3 ran
    uninterrupted = _three_steps(tiny_assets, tmp_path, "trainer.resume_mode=disable")
    assert resumed[2]["critic/score/mean"] == uninterrupted[2]["critic/score/mean"]  # the same samples
    # Losses agree up to the float noise of engine batching in the rollout log-probs (IS weights).
    for key in ("actor/pg_loss", "critic/vf_loss"):
        assert resumed[2][key] == pytest.approx(uninterrupted[2][key], rel=1e-4, abs=1e-6), key


def test_val_only_validates_the_resumed_policy_and_trains_nothing(gae_run, tiny_assets, tmp_path):
    out, _ = gae_run
    shutil.copytree(out / "global_step_2", tmp_path / "global_step_2")
    shutil.copy(out / "latest_checkpointed_iteration.txt", tmp_path)
    trained = {row["step"]: row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())}
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            "trainer.v1.trainer_mode=recording_test",
            "algorithm.adv_estimator=gae",
            "trainer.test_freq=2",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "trainer.resume_mode=auto",
            "trainer.val_only=true",
            "trainer.logger=[jsonl]",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    assert not {"on_train_begin", "on_step_begin"} & set(RecordingTrainer.last.calls)
    [row] = map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
    validated = {k: v for k, v in row.items() if k.startswith("val-core/")}
    assert row["step"] == 2 and validated
    # the checkpoint's weights, validated greedily as the run validated them after step 2
    assert validated == pytest.approx({k: trained[2][k] for k in validated}, abs=1e-6)
