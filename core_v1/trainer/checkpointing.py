"""Checkpoint save and resume for the whole trainer: actor, critic, data position, step counter.

Layout (verl's): `<default_local_dir>/global_step_<N>/{actor,critic,trainer_state.pt}` and
`<default_local_dir>/latest_checkpointed_iteration.txt`, written last so that a crash mid-save
never points at a half-written checkpoint. `trainer.resume_mode`: `auto` resumes from the latest
checkpoint if there is one, `disable` starts fresh, `resume_path` loads `trainer.resume_from_path`.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

LATEST = "latest_checkpointed_iteration.txt"


class CheckpointNotFoundError(FileNotFoundError):
    pass


class TrainerCheckpointer:
    def __init__(self, trainer: Any):
        self.trainer = trainer
        self.config = trainer.config.trainer
        self.root = Path(self.config.default_local_dir)

    def due(self, step: int) -> bool:
        freq = self.config.save_freq
        return freq > 0 and (step % freq == 0 or step == self.trainer.components.total_training_steps)

    def save(self) -> Path:
        step = self.trainer.global_steps
        target = self.root / f"global_step_{step}"
        target.mkdir(parents=True, exist_ok=True)
        self.trainer.actor.save_checkpoint(str(target / "actor"))
        if self.trainer.critic is not None:
            self.trainer.critic.save_checkpoint(str(target / "critic"))
        state = {"global_steps": step, "sampler": self.trainer.components.train_sampler.state_dict(),
                 "weight_version": self.trainer.checkpoint_manager.weight_version,
                 # The submission count seeds every later uid and sample: restoring it makes a resumed
                 # run draw exactly what the uninterrupted run would have.
                 "submitted_prompts": self.trainer.agent_loop_manager.submitted}
        torch.save(state, target / "trainer_state.pt")
        tmp = self.root / (LATEST + ".tmp")
        tmp.write_text(str(step))
        os.replace(tmp, self.root / LATEST)
        self._prune()
        return target

    def _prune(self) -> None:
        keep = self.config.max_actor_ckpt_to_keep
        if not keep or keep <= 0:
            return
        steps = sorted(int(p.name.split("_")[-1]) for p in self.root.glob("global_step_*") if p.name.split("_")[-1].isdigit())
        for old in steps[:-keep]:
            shutil.rmtree(self.root / f"global_step_{old}", ignore_errors=True)

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
