"""Checkpoint save and resume for the whole trainer: actor, critic, data position, step counter.

Layout (verl's): `<default_local_dir>/global_step_<N>/{actor,critic,trainer_state.pt}` and
`<default_local_dir>/latest_checkpointed_iteration.txt`. A checkpoint is written into a staging
folder and renamed into place, and the latest-iteration file is replaced after that, so a process
killed at any point of a save leaves the previous checkpoint the one that resumes (V1 and V0 share
`CheckpointDirectory` for this). `trainer.resume_mode`: `auto` resumes from the latest
checkpoint if there is one, `disable` starts fresh, `resume_path` loads `trainer.resume_from_path`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Iterator, Optional

import torch

LATEST = "latest_checkpointed_iteration.txt"


class CheckpointNotFoundError(FileNotFoundError):
    pass


class CheckpointDirectory:
    """`<root>/global_step_<N>` folders, each committed atomically, and the pointer to the latest."""

    STAGING_SUFFIX = ".partial"

    def __init__(self, root: str | os.PathLike, keep: Optional[int] = None):
        self.root = Path(root)
        self.keep = keep

    @contextlib.contextmanager
    def writing(self, step: int) -> Iterator[Path]:
        """Yield an empty staging folder to write step `step` into; on a clean exit it becomes
        `global_step_<step>` and the latest checkpoint, and old ones beyond `keep` are pruned."""
        target = self.root / f"global_step_{step}"
        staging = self.root / f"global_step_{step}{self.STAGING_SUFFIX}"
        shutil.rmtree(staging, ignore_errors=True)  # left by a process killed mid-save
        staging.mkdir(parents=True)
        yield staging
        if target.exists():  # the same step saved again (a run resumed before it)
            shutil.rmtree(target)
        os.replace(staging, target)
        pointer = self.root / (LATEST + ".tmp")
        pointer.write_text(str(step))
        os.replace(pointer, self.root / LATEST)
        self._prune()

    def _prune(self) -> None:
        if not self.keep or self.keep <= 0:
            return
        steps = sorted(int(p.name.rsplit("_", 1)[-1]) for p in self.root.glob("global_step_*")
                       if p.name.rsplit("_", 1)[-1].isdigit())
        for old in steps[:-self.keep]:
            shutil.rmtree(self.root / f"global_step_{old}", ignore_errors=True)


class TrainerCheckpointer:
    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.config = trainer.config.trainer
        self.directory = CheckpointDirectory(self.config.default_local_dir, self.config.max_actor_ckpt_to_keep)

    def due(self, step: int) -> bool:
        freq = self.config.save_freq
        return freq > 0 and (step % freq == 0 or step == self.trainer.components.total_training_steps)

    def save(self) -> Path:
        step = self.trainer.global_steps
        with self.directory.writing(step) as staging:
            self.trainer.actor.save_checkpoint(str(staging / "actor"))
            if self.trainer.critic is not None:
                self.trainer.critic.save_checkpoint(str(staging / "critic"))
            state = {"global_steps": step, "sampler": self.trainer.components.train_sampler.state_dict(),
                     "weight_version": self.trainer.checkpoint_manager.weight_version,
                     # The submission count seeds every later uid and sample: restoring it makes a resumed
                     # run draw exactly what the uninterrupted run would have.
                     "submitted_prompts": self.trainer.agent_loop_manager.submitted}
            torch.save(state, staging / "trainer_state.pt")
        return self.directory.root / f"global_step_{step}"

    def find(self) -> Optional[Path]:
        return find_checkpoint(self.config)

    def maybe_resume(self) -> Optional[Path]:
        path = self.find()
        if path is None:
            return None
        trainer = self.trainer
        trainer.actor.load_checkpoint(str(path / "actor"))
        if trainer.critic is not None and (path / "critic").exists():
            trainer.critic.load_checkpoint(str(path / "critic"))
        state = torch.load(path / "trainer_state.pt", weights_only=False)
        trainer.global_steps = int(state["global_steps"])
        trainer.components.train_sampler.load_state_dict(state["sampler"])
        trainer.agent_loop_manager.submitted = int(state.get("submitted_prompts", 0))
        # The replicas still hold the initial weights: bring them to the resumed policy.
        trainer.checkpoint_manager.update_weights(trainer.global_steps)
        print(f"resumed from {path} at step {trainer.global_steps}")
        return path


def find_checkpoint(trainer_config: Any) -> Optional[Path]:
    """The checkpoint folder `trainer.resume_mode` points at (V1 and V0 share the layout), or None."""
    mode = trainer_config.resume_mode
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = Path(trainer_config.resume_from_path or "")
        if not (path / "trainer_state.pt").is_file():
            raise CheckpointNotFoundError(f"trainer.resume_from_path={str(path)!r} is not a checkpoint folder "
                                          "(expected global_step_<N>/ with trainer_state.pt)")
        return path
    root = Path(trainer_config.default_local_dir)
    latest = root / LATEST
    if not latest.is_file():
        return None
    path = root / f"global_step_{latest.read_text().strip()}"
    return path if (path / "trainer_state.pt").is_file() else None
