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

from core_v1.trainer.checkpointing import CheckpointDirectory, find_checkpoint
from tests.conftest import quickstart_overrides


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
