"""A trainer killed with SIGKILL, at any point (mid-save included), resumes from the last complete
checkpoint with `trainer.resume_mode=auto`, and the resumed run equals the uninterrupted one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core_v1.trainer.batch import column
from core_v1.trainer.checkpointing import (CheckpointDirectory, find_checkpoint, reissue_unfinished_sessions,
                                           restore_pipeline, save_pipeline)
from core_v1.trainer.modes.colocate_async import ColocateAsyncTrainer
from core_v1.transfer_store import parse_key
from tests.conftest import quickstart_overrides
from tests.core_v1.trainer._async_harness import build_pipeline, close, pipeline_config


def test_a_kill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    script = textwrap.dedent(f"""
        import os, signal
        from core_v1.trainer.checkpointing import CheckpointDirectory
        directory = CheckpointDirectory({str(tmp_path)!r}, keep=2)
        with directory.writing(1) as staging:
            (staging / "trainer_state.pt").write_text("complete")
        with directory.writing(2) as staging:
            (staging / "actor").mkdir()
            (staging / "actor" / "weights.bin").write_bytes(b"half")
            os.kill(os.getpid(), signal.SIGKILL)
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).resolve().parents[2])
    assert result.returncode == -signal.SIGKILL

    class Trainer:
        resume_mode, default_local_dir, resume_from_path = "auto", str(tmp_path), None

    assert find_checkpoint(Trainer) == tmp_path / "global_step_1"
    assert not (tmp_path / "global_step_2").exists()
    with CheckpointDirectory(tmp_path, keep=2).writing(2) as staging:  # the next save starts clean
        assert list(staging.iterdir()) == []
        (staging / "trainer_state.pt").write_text("complete")
    assert find_checkpoint(Trainer) == tmp_path / "global_step_2"


# ------------------------------------------------- the async pipeline's state across a checkpoint
def _train_steps(trainer, record, steps: int) -> dict:
    """`run_steps` that also keeps what each step trained: {(uid, session): (tokens, submit step)}."""
    trained = {}
    for _ in range(steps):
        trainer.global_steps += 1
        trainer._add_batch_to_generate({})
        batch, _ = trainer.replay_buffer.sample(trainer.global_steps, "train", trainer.train_batch_size)
        trainer.on_sample_end()
        trainer.on_step_end()
        lengths = batch["response_mask"].sum(-1).tolist()
        for i, (uid, session) in enumerate(zip(column(batch, "uid"), column(batch, "session_id"))):
            assert (uid, session) not in trained
            trained[(uid, session)] = (batch["responses"][i, :lengths[i]].tolist(), column(batch, "global_steps")[i])
    return trained


def _left_in_flight(trainer) -> dict:
    """What the pipeline still holds once everything started has finished generating."""
    trainer.checkpoint_manager.resume_generation_replicas()
    trainer.agent_loop_manager.drain()
    store = trainer.components.store
    keys = sorted(key for key in store.list("train") if not parse_key(key).is_group)
    rows = store.get("train", keys, fields=["response_ids", "global_steps"])
    return {(parse_key(key).uid, parse_key(key).session_id): (rows["response_ids"][i].tolist(),
                                                              int(rows["global_steps"][i]))
            for i, key in enumerate(keys)}


@pytest.mark.slow
def test_async_pipeline_resumed_from_a_checkpoint_loses_and_repeats_nothing(tiny_assets, tmp_path):
    """colocate_async with frozen weights (so only the resume is under test): a checkpoint after step 2,
    the rest of that run thrown away, a fresh pipeline restored from it; every sample of the first 4
    steps and what is left in flight is the uninterrupted pipeline's, token for token, each once."""
    config = pipeline_config(tiny_assets, tmp_path)  # 4 groups x 2 sessions, one batch ahead, long-tailed
    model = str(tiny_assets["model"])

    reference, reference_record = build_pipeline(ColocateAsyncTrainer, config, model)
    reference.on_train_begin()
    expected = _train_steps(reference, reference_record, 4)
    expected_left = _left_in_flight(reference)
    close(reference)

    killed, killed_record = build_pipeline(ColocateAsyncTrainer, config, model)
    killed.on_train_begin()
    before_kill = _train_steps(killed, killed_record, 2)
    state = save_pipeline(killed, tmp_path)  # what TrainerCheckpointer.save writes besides the weights
    killed.components.close()  # killed: what was generating is gone with it

    resumed, resumed_record = build_pipeline(ColocateAsyncTrainer, config, model)
    resumed.global_steps = 2
    restore_pipeline(resumed, tmp_path, state)
    resumed.checkpoint_manager.update_weights(resumed.global_steps)
    groups, sessions = reissue_unfinished_sessions(resumed)
    assert groups == resumed.train_batch_size and sessions > 0  # one batch ahead, some of it unfinished
    after_kill = _train_steps(resumed, resumed_record, 2)
    left = _left_in_flight(resumed)
    close(resumed)

    assert killed_record.submitted + resumed_record.submitted == reference_record.submitted  # same prompts, in order
    assert not before_kill.keys() & after_kill.keys()  # nothing trained twice
    assert {**before_kill, **after_kill, **left} == {**expected, **expected_left}  # nothing lost, same samples
    assert resumed.replay_buffer.ledger.check(resumed.groups_in_flight()) == reference.replay_buffer.ledger.check(
        reference.groups_in_flight())


def _command(assets, out_dir, steps, *extra):
    overrides = quickstart_overrides(assets, out_dir, steps, "trainer.save_freq=1", "trainer.test_freq=-1",
                                     "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                                     "actor_rollout_ref.rollout.n=2", "trainer.resume_mode=auto", *extra)
    return [sys.executable, "-m", "core_v1.main_ppo", "--config-name=quickstart", *overrides]


def _scores(out_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {int(r["step"]): r["critic/score/mean"] for r in rows}


def _run(command, **kwargs):
    return subprocess.Popen(command, cwd=Path(__file__).resolve().parents[2], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **kwargs)


@pytest.mark.slow
def test_a_killed_sync_run_resumes_to_the_uninterrupted_numbers(tiny_assets, tmp_path):
    steps = 4
    reference = tmp_path / "reference"
    assert _run(_command(tiny_assets, reference, steps)).wait(timeout=400) == 0

    killed = tmp_path / "killed"
    process = _run(_command(tiny_assets, killed, steps))
    deadline = time.monotonic() + 400
    while not (killed / "global_step_2").is_dir():  # kill once two steps are checkpointed
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read()
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the driver and everything it started
    process.wait()
    assert 2 <= max(_scores(killed)) < steps

    resumed = _run(_command(tiny_assets, killed, steps))
    assert resumed.wait(timeout=400) == 0, resumed.stderr.read()
    expected, got = _scores(reference), _scores(killed)
    assert sorted(got) == list(range(1, steps + 1))
    assert all(got[step] == expected[step] for step in got)
