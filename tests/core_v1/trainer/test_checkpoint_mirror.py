"""`trainer.default_hdfs_dir`: each saved checkpoint copied to `<dir>/global_step_<N>` (a local or
file:// path, or hdfs:// through the `hdfs` client), refused in one line where it cannot be written."""

from __future__ import annotations

import multiprocessing
import os
import sys
from types import SimpleNamespace

import pytest

from core_v1.main_ppo import main
from core_v1.trainer.checkpointing import (
    CheckpointDirectory,
    CheckpointMirrorError,
    load_resume_checkpoint,
    write_checkpoint,
)
from core_v1.utils.durable import FAULT_ENV, FAULT_EXIT_CODE
from tests.conftest import quickstart_overrides


def _save(directory: CheckpointDirectory, step: int, payload: bytes) -> None:
    def save_actor(folder: str) -> None:
        os.makedirs(folder)
        with open(os.path.join(folder, "weights.bin"), "wb") as file:
            file.write(payload)

    write_checkpoint(directory, step, save_actor, None, lambda _staging: {})


@pytest.mark.parametrize("scheme", ["", "file://"])
def test_each_checkpoint_is_copied_and_a_resave_replaces_the_copy(tmp_path, scheme):
    mirror = tmp_path / "mirror"
    directory = CheckpointDirectory(tmp_path / "local", keep=1, mirror=f"{scheme}{mirror}")
    _save(directory, 1, b"one")
    _save(directory, 2, b"two")
    _save(directory, 2, b"two again")
    assert sorted(os.listdir(tmp_path / "local")) == ["global_step_2", "latest_checkpointed_iteration.txt"]
    assert sorted(os.listdir(mirror)) == ["global_step_1", "global_step_2"]  # the copy is not pruned
    assert (mirror / "global_step_2" / "actor" / "weights.bin").read_bytes() == b"two again"
    assert sorted(os.listdir(mirror / "global_step_2")) == sorted(os.listdir(tmp_path / "local" / "global_step_2"))


def _save_killed_before_the_copy(directory: CheckpointDirectory, step: int) -> None:
    os.environ[FAULT_ENV] = "checkpoint.pointed"
    _save(directory, step, b"two")


def test_a_resume_copies_the_checkpoint_a_kill_left_uncopied(tmp_path):
    mirror = tmp_path / "mirror"
    directory = CheckpointDirectory(tmp_path / "local", mirror=str(mirror))
    _save(directory, 1, b"one")
    child = multiprocessing.get_context("fork").Process(target=_save_killed_before_the_copy, args=(directory, 2))
    child.start()
    child.join(60)
    assert child.exitcode == FAULT_EXIT_CODE
    assert sorted(os.listdir(mirror)) == ["global_step_1"]
    config = SimpleNamespace(
        resume_mode="auto",
        default_local_dir=str(tmp_path / "local"),
        default_hdfs_dir=str(mirror),
        resume_from_path=None,
    )
    path, _ = load_resume_checkpoint(config, lambda folder: None)
    assert path == tmp_path / "local" / "global_step_2"
    assert (mirror / "global_step_2" / "actor" / "weights.bin").read_bytes() == b"two"


def test_a_scheme_other_than_file_and_hdfs_is_refused():
    with pytest.raises(CheckpointMirrorError, match="mount the storage and give its local path"):
        CheckpointDirectory("unused", mirror="s3://bucket/ckpt")


def test_hdfs_without_a_client_on_the_path_is_one_error_line(tiny_assets, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))  # the venv's bin: no `hdfs` there
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 2),
            "trainer.default_hdfs_dir=hdfs://namenode/ckpt",
        ]
    )
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and err[-1].startswith("error: ")
    assert "trainer.default_hdfs_dir='hdfs://namenode/ckpt' needs the `hdfs` client on the PATH" in err[-1]
