"""A trainer killed with SIGKILL, at any point (mid-save included), resumes from the last complete
checkpoint with `trainer.resume_mode=auto`, and the resumed run equals the uninterrupted one."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core_v1.main_ppo import main
from core_v1.trainer.checkpointing import CheckpointDirectory, find_checkpoint, restore_pipeline, save_pipeline
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
        responses = trainer.components.store.get(batch.partition, batch.keys, fields=["response_ids"])["response_ids"]
        trainer.replay_buffer.release(batch)
        for i, (uid, session) in enumerate(zip(batch.column("uid"), batch.column("session_id"))):
            assert (uid, session) not in trained
            trained[(uid, session)] = (responses[i].tolist(), batch.column("global_steps")[i])
    return trained


def _left_in_flight(trainer) -> dict:
    """What the pipeline still holds once everything started has finished generating."""
    trainer.checkpoint_manager.resume_generation_replicas()
    trainer.agent_loop_manager.drain()
    store = trainer.components.store
    keys = sorted(key for key in store.list("train") if not parse_key(key).is_group)
    rows = store.get("train", keys, fields=["response_ids", "global_steps"])
    return {
        (parse_key(key).uid, parse_key(key).session_id): (
            rows["response_ids"][i].tolist(),
            int(rows["global_steps"][i]),
        )
        for i, key in enumerate(keys)
    }


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
    state = save_pipeline(killed.components, tmp_path)  # what TrainerCheckpointer.save writes besides the weights
    killed.components.close()  # killed: what was generating is gone with it

    resumed, resumed_record = build_pipeline(ColocateAsyncTrainer, config, model)
    resumed.global_steps = 2
    restore_pipeline(resumed.components, tmp_path, state)
    resumed.checkpoint_manager.update_weights(resumed.global_steps)
    groups, sessions = resumed.pipeline.reissue_unfinished_sessions()
    assert groups == resumed.train_batch_size and sessions > 0  # one batch ahead, some of it unfinished
    after_kill = _train_steps(resumed, resumed_record, 2)
    left = _left_in_flight(resumed)
    close(resumed)

    assert killed_record.submitted + resumed_record.submitted == reference_record.submitted  # same prompts, in order
    assert not before_kill.keys() & after_kill.keys()  # nothing trained twice
    assert {**before_kill, **after_kill, **left} == {**expected, **expected_left}  # nothing lost, same samples
    assert resumed.pipeline.accounting() == reference.pipeline.accounting()


_MODES = {
    # Without rollout IS weights: they are exp(trainer - rollout log-prob), and the engine's log-probs
    # move in the last float bits with the batch a request shared, which reached pg_loss and
    # grad_norm (1e-7 relative, seen once); sync's weights are 1 up to that noise anyway.
    "sync": ["algorithm.rollout_correction.rollout_is=null"],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
    ],
}
_REPRODUCIBLE = {
    mode: [*_MODES[mode], f"trainer.v1.{mode}.reproducible=true"] for mode in ("colocate_async", "separate_async")
}
_STEPS, _BATCH = 6, 8
# Seconds and rates: what the clock says, not what the run computed.
_TIMING = ("timing_s/", "perf/", "rollout/gen_seconds")
# The rollout engine's own log-probs differ in the last float bits with the batch a request shared
# (arrival timing), between two uninterrupted runs as well; the trainer's numbers do not. On a busy
# machine the diagnostics computed from them moved by more than 1e-6 absolute (seen once at step 5).
_ROLLOUT_LOGPROB_DIAGNOSTICS = ("rollout_corr/", "training/rollout_actor_logprob_diff/")


def _overrides(assets, out_dir, mode, reproducible=False, placement="local") -> list[str]:
    # A run in one process (`placement="local"`: the numbers of Ray actors,
    # tests/core_v1/trainer/test_placement.py) is one process to kill, and what was generating dies
    # with it. separate_async syncs weights between processes, so its runs are on Ray; so is the
    # default colocate_async run, whose kill takes a driver's Ray cluster with it.
    return quickstart_overrides(
        assets,
        out_dir,
        _STEPS,
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        f"data.train_batch_size={_BATCH}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={_BATCH}",
        "actor_rollout_ref.rollout.n=2",
        "trainer.resume_mode=auto",
        *(_REPRODUCIBLE if reproducible else _MODES)[mode],
        placement=placement,
    )


def _command(overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "core_v1.main_ppo", "--config-name=quickstart", *overrides]


def _run_here(overrides: list[str], capsys) -> str:
    """A run in the test process (on its Ray runtime, `ray_runtime`, if it uses Ray), and what it
    printed. The runs that are not killed need no process of their own: a subprocess would pay the
    imports, a Ray start and a shutdown again (~15 s of a ~20 s quickstart run on 2 cores)."""
    capsys.readouterr()
    assert main(["--config-name=quickstart", *overrides]) == 0
    return capsys.readouterr().out


def _rows(out_dir: Path) -> list[dict]:
    """Every logged step, the killed run's and then the resumed run's (a step may appear twice)."""
    return [json.loads(line) for line in (out_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def _numbers(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith(_TIMING + _ROLLOUT_LOGPROB_DIAGNOSTICS)}


def _diagnostics(row: dict) -> dict:
    return {k: v for k, v in row.items() if k.startswith(_ROLLOUT_LOGPROB_DIAGNOSTICS)}


def _run(command, log: Path):
    """`command` in a session of its own, starting a Ray cluster of its own if it uses Ray (never
    joining one named by RAY_ADDRESS), so that killing the session kills every process of the run."""
    return subprocess.Popen(
        command,
        cwd=Path(__file__).resolve().parents[2],
        env={key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"},
        start_new_session=True,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        text=True,
    )


def _session_processes(session: int) -> list[str]:
    """Live (not zombie) processes of a session: the driver and what it started, Ray's included."""
    alive = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and os.getsid(int(entry.name)) == session:
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    alive.append((entry / "cmdline").read_text().replace("\0", " ")[:80])
        except (OSError, IndexError):  # exited meanwhile
            continue
    return alive


def _kill_after_two_checkpoints(overrides: list[str], out_dir: Path) -> None:
    """The run in a process of its own (with its own Ray cluster if it uses Ray), SIGKILLed with
    everything it started once its second checkpoint is on disk."""
    log = out_dir.with_suffix(".killed.log")
    process = _run(_command(overrides), log)
    deadline = time.monotonic() + 300
    while not (out_dir / "global_step_2").is_dir():
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)  # the driver and everything it started
    process.wait()
    deadline = time.monotonic() + 30
    while (left := _session_processes(process.pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes of the killed run still alive: {left}"  # Ray's workers included
    assert 2 <= max(r["step"] for r in _rows(out_dir)) < _STEPS


def _assert_same_numbers(reference: Path, resumed: Path, rel: float = 0.0) -> None:
    """Every logged number of every step of the killed-then-resumed run equals the uninterrupted run's
    (the resumed run's row where both logged a step); `rel` > 0 allows float noise."""
    expected = {r["step"]: r for r in _rows(reference)}
    got = {r["step"]: r for r in _rows(resumed)}
    assert sorted(got) == list(range(1, _STEPS + 1))
    for step in got:  # scores, losses, entropy, grad norm, lr, lengths, staleness, the group ledger, ...
        want, have = _numbers(expected[step]), _numbers(got[step])
        assert have.keys() == want.keys(), step
        assert have == (pytest.approx(want, rel=rel, abs=1e-9) if rel else want), step
        assert _diagnostics(got[step]) == pytest.approx(_diagnostics(expected[step]), rel=1e-4, abs=1e-6), step


def _newest_whole_checkpoint(out_dir: Path) -> int:
    """The step a resume must start from: the newest save the kill left whole. That is a committed
    `global_step_<N>`, or a staging folder whose manifest (written last, once its files are on disk)
    is complete. The latest-step file is only a hint: a kill between a folder's rename into place and
    that file's update leaves it naming the save before."""
    steps = []
    for folder in out_dir.iterdir():
        found = re.fullmatch(r"global_step_(\d+)(\.partial)?", folder.name)
        if found and (not found[2] or _has_whole_manifest(folder)):
            steps.append(int(found[1]))
    return max(steps)


def _has_whole_manifest(folder: Path) -> bool:
    try:
        return "files" in json.loads((folder / "checkpoint.json").read_text())
    except (OSError, ValueError):
        return False


def _kill_and_resume(overrides: list[str], out_dir: Path, capsys) -> str:
    """What the resumed run printed; it starts from the checkpoint the kill left. The resume runs in
    the test process: the kill is what must hit a real trainer process, and it did."""
    _kill_after_two_checkpoints(overrides, out_dir)
    checkpoint = _newest_whole_checkpoint(out_dir)
    log = _run_here(overrides, capsys)
    resumed = f"resumed from {out_dir / f'global_step_{checkpoint}'} at step {checkpoint}"
    assert resumed in log, f"expected {resumed!r} in the resumed run's output, which ends:\n{log[-3000:]}"
    return log


@pytest.mark.slow
def test_a_killed_sync_run_resumes_to_the_uninterrupted_numbers(tiny_assets, tmp_path, capsys):
    reference = tmp_path / "reference"
    _run_here(_overrides(tiny_assets, reference, "sync"), capsys)
    killed = tmp_path / "killed"
    _kill_and_resume(_overrides(tiny_assets, killed, "sync"), killed, capsys)
    _assert_same_numbers(reference, killed)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["colocate_async", "separate_async"])
def test_a_killed_reproducible_async_run_resumes_to_the_uninterrupted_numbers(
    tiny_assets, tmp_path, capsys, request, mode
):
    """`reproducible=true`: every request ends on the weights it began with and batches go in
    submission order, so the killed run's steps and the resumed run's repeat the uninterrupted run.
    With the rollout IS weights on (as async runs train), the engine's log-probs bring float noise
    (they move in the last bits with the batch a request shared): 1e-5 relative."""
    placement = "ray" if mode == "separate_async" else "local"
    if placement == "ray":
        request.getfixturevalue("ray_runtime")
    reference = tmp_path / "reference"
    _run_here(_overrides(tiny_assets, reference, mode, reproducible=True, placement=placement), capsys)
    killed = tmp_path / "killed"
    killed_overrides = _overrides(tiny_assets, killed, mode, reproducible=True, placement=placement)
    log = _kill_and_resume(killed_overrides, killed, capsys)
    assert f": {_BATCH} prompt groups in flight, 0 sessions re-issued" in log  # the batch ahead, complete
    _assert_same_numbers(reference, killed, rel=1e-5)
    rows = _rows(reference)
    assert all(r["training/off_policy/trajectory_staleness/mean"] == (0.0 if r["step"] == 1 else 1.0) for r in rows)
    assert all(r["training/off_policy/mixed_version_fraction"] == 0.0 for r in rows)  # no request cut by an update


@pytest.mark.slow
def test_a_killed_async_run_resumes_without_losing_or_repeating_a_prompt(tiny_assets, ray_runtime, tmp_path, capsys):
    """The default schedule, where timing decides (two uninterrupted runs already differ: which groups
    finish first, where an abort cuts a request between weight versions), so no run to compare with.
    What a resume must keep: the sessions cut off by the kill run again, and every prompt group is
    trained once, evicted, or still in flight."""
    killed = tmp_path / "killed"
    log = _kill_and_resume(_overrides(tiny_assets, killed, "colocate_async", placement="ray"), killed, capsys)
    assert f": {_BATCH} prompt groups in flight" in log  # one batch ahead, restored

    rows = _rows(killed)
    assert sorted({r["step"] for r in rows}) == list(range(1, _STEPS + 1))
    for row in rows:  # the killed run's steps and the resumed run's: the same ledger, continued
        step = row["step"]
        ledger = {k.rsplit("/", 1)[1]: v for k, v in row.items() if k.startswith("training/accounting/")}
        assert ledger == {
            "submitted_groups": _BATCH * (step + 1),
            "trained_groups": _BATCH * step,
            "evicted_groups": 0,
            "in_flight_groups": _BATCH,
        }, (step, ledger)
        assert row["rollout/failed_samples"] == 0
