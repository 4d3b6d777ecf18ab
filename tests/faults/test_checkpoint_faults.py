"""A fault at every point of a checkpoint save and of a prune (`core_v1.utils.durable.FAULT_POINTS`,
each ending the process with `os._exit` as a kill would): the next `resume_mode=auto` run resumes from
the newest complete checkpoint and ends with every step logged once. A folder whose checkpoints all
fail to load ends in one `error:` line.

The unit-level runs are a small training loop over the real checkpoint code and the real metrics
sink, in a forked child (the fault ends the child, not pytest); one end-to-end run of the quickstart
trainer covers the same with the real actor, store and pipeline."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from core_v1.main_ppo import main
from core_v1.trainer.checkpointing import (
    LATEST,
    MANIFEST,
    CheckpointDirectory,
    CheckpointUnloadableError,
    find_checkpoint,
    load_resume_checkpoint,
    read_trainer_state,
    write_checkpoint,
)
from core_v1.utils.durable import FAULT_ENV, FAULT_EXIT_CODE, FAULT_POINTS
from core_v1.utils.tracking import Tracking
from tests.conftest import quickstart_overrides, quickstart_overrides_on_ray

_REPO = Path(__file__).resolve().parents[2]


# ------------------------------------------------------------------------ a run in a child process
def _trainer_config(root: Path, keep=None, resume_mode="auto", resume_from_path=None) -> SimpleNamespace:
    return SimpleNamespace(
        default_local_dir=str(root),
        max_actor_ckpt_to_keep=keep,
        default_hdfs_dir=None,
        resume_mode=resume_mode,
        resume_from_path=resume_from_path,
    )


def _load(path: Path) -> dict:
    state = read_trainer_state(path)
    state["weights"] = torch.load(path / "actor" / "weights.pt")
    return state


def _train(root: Path, run: str, total: int, keep, fault: str | None, resume_mode: str, resume_from) -> None:
    """One run: resume, then per step one update of a weight vector, a metrics row, a checkpoint."""
    if fault:
        os.environ[FAULT_ENV] = fault
    config = _trainer_config(root, keep, resume_mode, resume_from)
    tracking = Tracking(["jsonl"], str(root), "p", "e")
    step, weights = 0, torch.zeros(3)
    loaded = load_resume_checkpoint(config, _load)
    if loaded is not None:
        _, state = loaded
        step, weights = int(state["global_steps"]), state["weights"]
        tracking.forget_steps_after(step)
        (root / f"{run}.resumed").write_text(json.dumps([step, state["run"]]))
    directory = CheckpointDirectory(root, keep)
    while step < total:
        step += 1
        weights = weights + step
        tracking.log({"weights": weights.sum().item(), "run": run}, step=step)

        def save_actor(folder: str, weights=weights) -> None:
            os.makedirs(folder)
            torch.save(weights, os.path.join(folder, "weights.pt"))

        write_checkpoint(directory, step, save_actor, None, lambda _staging: {"run": run})
    tracking.close()


def _run(root: Path, run: str, total: int, keep=None, fault=None, resume_mode="auto", resume_from=None) -> int:
    child = multiprocessing.get_context("fork").Process(
        target=_train, args=(root, run, total, keep, fault, resume_mode, resume_from)
    )
    child.start()
    child.join(60)
    return child.exitcode


def _resumed(root: Path, run: str) -> tuple[int, str]:
    return tuple(json.loads((root / f"{run}.resumed").read_text()))


def _logged_steps(root: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (root / "metrics.jsonl").read_text().splitlines()]


def _assert_every_step_logged_once_with_its_weights(root: Path, total: int) -> None:
    rows = [json.loads(line) for line in (root / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == list(range(1, total + 1))
    # 3 * (1 + 2 + ... + step): the run resumed from the weights of the step it resumed at
    assert [row["weights"] for row in rows] == [3.0 * step * (step + 1) / 2 for step in range(1, total + 1)]


def _folder_state(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir() if p.name.startswith("global_step_"))


# ------------------------------------------------------------------------------- the fault points
_SAVE_POINTS = ["checkpoint.staged", "checkpoint.renamed", "checkpoint.pointed", "prune.moved", "prune.deleted"]


@pytest.mark.parametrize("point", _SAVE_POINTS)
def test_a_fault_in_the_save_of_step_3_resumes_from_step_3(tmp_path, point):
    """keep=2: the save of step 3 prunes step 1. Every point comes after the checkpoint of step 3 is
    whole and fsynced (in staging at the first), so step 3 is the newest complete checkpoint."""
    assert (
        _run(tmp_path, "killed", total=5, keep=2, fault=f"{point}@3" if point.startswith("checkpoint") else point)
        == FAULT_EXIT_CODE
    )
    assert _logged_steps(tmp_path) == [1, 2, 3]
    assert _run(tmp_path, "resumed", total=5, keep=2) == 0
    assert _resumed(tmp_path, "resumed") == (3, "killed")
    _assert_every_step_logged_once_with_its_weights(tmp_path, 5)
    assert _folder_state(tmp_path) == ["global_step_4", "global_step_5"]  # pruned by save order, leftovers gone


def _killed_while_writing(root: Path, step: int) -> None:
    def half(folder: str) -> None:
        os.makedirs(folder)
        Path(folder, "weights.pt").write_bytes(b"half")
        os.kill(os.getpid(), signal.SIGKILL)

    write_checkpoint(CheckpointDirectory(root), step, half, None, lambda _staging: {})


def test_a_kill_while_the_checkpoint_is_written_resumes_from_the_one_before(tmp_path):
    """No manifest yet in staging: step 3's checkpoint is not complete, step 2 is the newest."""
    assert _run(tmp_path, "first", total=2) == 0
    child = multiprocessing.get_context("fork").Process(target=_killed_while_writing, args=(tmp_path, 3))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL
    assert (tmp_path / "global_step_3.partial").is_dir()
    assert _run(tmp_path, "resumed", total=4) == 0
    assert _resumed(tmp_path, "resumed") == (2, "first")
    _assert_every_step_logged_once_with_its_weights(tmp_path, 4)


@pytest.mark.parametrize(
    "point", ["checkpoint.staged", "checkpoint.old_moved", "checkpoint.renamed", "checkpoint.pointed"]
)
def test_a_fault_while_a_step_is_saved_again_resumes_from_the_new_save(tmp_path, point):
    """A run resumed (resume_path) from step 2 of a 4-step run saves step 3 again: the old folder is
    moved aside before the new one goes in. The new save of step 3 is the newest complete one."""
    assert _run(tmp_path, "first", total=4) == 0
    assert (
        _run(
            tmp_path,
            "again",
            total=4,
            fault=point,
            resume_mode="resume_path",
            resume_from=str(tmp_path / "global_step_2"),
        )
        == FAULT_EXIT_CODE
    )
    assert _logged_steps(tmp_path) == [1, 2, 3]
    assert _run(tmp_path, "resumed", total=4) == 0
    assert _resumed(tmp_path, "resumed") == (3, "again")
    _assert_every_step_logged_once_with_its_weights(tmp_path, 4)
    assert _folder_state(tmp_path) == [f"global_step_{step}" for step in range(1, 5)]


def test_the_kill_of_the_old_code_rmtree_then_rename(tmp_path):
    """What the old save left when killed between deleting the old folder and renaming the new one
    in: the pointer names a missing folder. `auto` resumes from the newest that is there; it did
    not start fresh."""
    assert _run(tmp_path, "first", total=2) == 0
    (tmp_path / LATEST).write_text("7")
    assert _run(tmp_path, "resumed", total=3) == 0
    assert _resumed(tmp_path, "resumed") == (2, "first")
    _assert_every_step_logged_once_with_its_weights(tmp_path, 3)


def test_pruning_keeps_the_newest_saves_not_the_highest_steps(tmp_path):
    """A run resumed from step 1 into a folder that holds steps 1-4 saves step 2 with keep=2: it keeps
    its own save and the newest before it (step 4), not the two highest steps (3 and 4)."""
    assert _run(tmp_path, "first", total=4) == 0
    assert (
        _run(tmp_path, "again", total=2, keep=2, resume_mode="resume_path", resume_from=str(tmp_path / "global_step_1"))
        == 0
    )
    assert _folder_state(tmp_path) == ["global_step_2", "global_step_4"]
    assert read_trainer_state(tmp_path / "global_step_2")["run"] == "again"
    assert find_checkpoint(_trainer_config(tmp_path)) == tmp_path / "global_step_2"


def test_every_fault_point_is_exercised_here():
    """The rank points are the role folders' own (tests/core_v1/workers/test_workers_checkpoint.py)."""
    here = set(_SAVE_POINTS) | {"checkpoint.old_moved"}
    assert here == {point for point in FAULT_POINTS if not point.startswith("rank.")}


# ------------------------------------------------------------------------- checkpoints that do not load
def _corrupt_same_size(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)


def test_an_unloadable_newest_checkpoint_falls_back_to_the_one_before(tmp_path, capsys):
    assert _run(tmp_path, "first", total=3) == 0
    _corrupt_same_size(tmp_path / "global_step_3" / "actor" / "weights.pt")  # the manifest cannot tell
    path, state = load_resume_checkpoint(_trainer_config(tmp_path), _load)
    assert (path, state["global_steps"]) == (tmp_path / "global_step_2", 2)
    printed = capsys.readouterr().out
    assert "global_step_3 does not load (" in printed and "trying the next older one" in printed


def test_a_folder_of_unloadable_checkpoints_is_refused_not_started_fresh(tmp_path):
    assert _run(tmp_path, "first", total=2) == 0
    _corrupt_same_size(tmp_path / "global_step_2" / "trainer_state.pt")
    (tmp_path / "global_step_1" / "actor" / "weights.pt").write_bytes(b"short")
    with pytest.raises(CheckpointUnloadableError) as refused:
        load_resume_checkpoint(_trainer_config(tmp_path), _load)
    message = str(refused.value)
    assert "\n" not in message and "holds 2 checkpoint(s) and none loads" in message
    assert "global_step_2: KeyError" in message  # torch.load of the zeroed file
    assert "global_step_1: actor/weights.pt has 5 bytes" in message


def test_the_entrypoint_refuses_a_folder_of_damaged_checkpoints_in_one_line(tiny_assets, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out, "first", total=2) == 0
    for step in (1, 2):
        (out / f"global_step_{step}" / "actor" / "weights.pt").unlink()
    code = main(
        ["--config-name=quickstart", *quickstart_overrides_on_ray(tiny_assets, out, 4, "trainer.resume_mode=auto")]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and err[-1].startswith("error: ")
    assert (
        "none loads (global_step_2: actor/weights.pt is missing; global_step_1: actor/weights.pt is missing)" in err[-1]
    )


def test_a_pointer_with_no_checkpoint_folder_starts_fresh_and_says_so(tmp_path, capsys):
    (tmp_path / LATEST).write_text("4")
    assert load_resume_checkpoint(_trainer_config(tmp_path), _load) is None
    assert "names step 4, but no checkpoint folder is there; starting fresh" in capsys.readouterr().out


def test_a_verl_checkpoint_folder_is_refused_not_started_fresh_over(tmp_path):
    """verl's own layout (actor shards, data.pt, no trainer_state.pt) is not one rlbridge loads."""
    (tmp_path / "global_step_5" / "actor").mkdir(parents=True)
    (tmp_path / "global_step_5" / "data.pt").write_bytes(b"verl")
    (tmp_path / LATEST).write_text("5")
    with pytest.raises(CheckpointUnloadableError, match="global_step_5: it has no trainer_state.pt"):
        find_checkpoint(_trainer_config(tmp_path))


def test_a_manifest_records_every_file(tmp_path):
    assert _run(tmp_path, "first", total=1) == 0
    manifest = json.loads((tmp_path / "global_step_1" / MANIFEST).read_text())
    assert manifest["step"] == 1 and manifest["sequence"] == 1
    assert set(manifest["files"]) == {"actor/weights.pt", "trainer_state.pt"}


# ------------------------------------------------------------------ the real trainer, end to end
@pytest.mark.slow
def test_the_quickstart_trainer_killed_in_a_save_resumes_and_logs_every_step_once(tiny_assets, tmp_path, capsys):
    """V1 sync on the tiny model, a checkpoint every step, keep=2, each checkpoint copied to
    `trainer.default_hdfs_dir` (a local path): the driver, a process of its own, ends at
    `checkpoint.staged` of step 3's save (its actor shards, HF export, store and state whole in
    staging); the next run (in the test process: no second start-up to pay) puts that checkpoint in
    place, resumes at step 3, copies it, and trains step 4, each step logged once. The replica, the
    agent loops and the store run in the trainer's process (what is under test is the checkpoint
    folder; a killed driver with its Ray cluster: tests/faults/test_killed_trainer.py)."""
    out, mirror = tmp_path / "run", tmp_path / "mirror"
    arguments = [
        "--config-name=quickstart",
        *quickstart_overrides(
            tiny_assets,
            out,
            4,
            "trainer.save_freq=1",
            "trainer.test_freq=-1",
            "trainer.max_actor_ckpt_to_keep=2",
            "trainer.resume_mode=auto",
            f"trainer.default_hdfs_dir={mirror}",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "trainer.val_before_train=false",
        ),
    ]
    killed = subprocess.Popen(
        [sys.executable, "-m", "core_v1.main_ppo", *arguments],
        cwd=_REPO,
        env={**os.environ, FAULT_ENV: "checkpoint.staged@3"},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = killed.communicate(timeout=400)[0]
    with contextlib.suppress(ProcessLookupError):  # what the driver started goes with it, as in a kill of the job
        os.killpg(killed.pid, signal.SIGKILL)
    assert killed.returncode == FAULT_EXIT_CODE, log[-3000:]
    assert _logged_steps(out) == [1, 2, 3]
    assert (out / "global_step_3.partial").is_dir() and not (out / "global_step_3").exists()

    capsys.readouterr()
    assert main(arguments) == 0
    assert f"resumed from {out / 'global_step_3'} at step 3" in capsys.readouterr().out
    assert _logged_steps(out) == [1, 2, 3, 4]
    assert _folder_state(out) == ["global_step_3", "global_step_4"]
    assert (out / LATEST).read_text() == "4"
    assert _folder_state(mirror) == [f"global_step_{step}" for step in range(1, 5)]
    assert sorted(os.listdir(mirror / "global_step_4" / "actor")) == ["extra_state.pt", "model", "sharded"]
