"""Checkpoint save and resume for the whole trainer: actor, critic, data position, step counter.

Layout (verl's): `<default_local_dir>/global_step_<N>/{actor,critic,trainer_state.pt}` and
`<default_local_dir>/latest_checkpointed_iteration.txt`. A checkpoint is written into a staging
folder and renamed into place, and the latest-iteration file is replaced after that, so a process
killed at any point of a save leaves the previous checkpoint the one that resumes (V1 and V0 share
`CheckpointDirectory` for this). `trainer.resume_mode`: `auto` resumes from the latest
checkpoint if there is one, `disable` starts fresh, `resume_path` loads `trainer.resume_from_path`.

What a checkpoint holds besides the weights (RNG states and schedules are in the workers' own
checkpoints), so that no prompt is lost or trained twice across a kill:

- `trainer_state.pt`: the step, the prompt feed's position (sampler and leftover prompts), the
  submission count (it seeds every later uid and sample) and the group ledger, all three kept by
  the generation pipeline (`core_v1.trainer.generation`), and the KL coefficient;
- `transfer_store.pt`: the store (`TransferStore.save`): every prompt group still in flight or
  finished and not yet trained, with the trajectories already in (tokens, log-probs, weight
  versions) and the store's counters.

On resume the store is loaded, the replicas get the resumed weights, and every session of a live
group that had not reported is run again with its own uid and seed
(`GenerationPipeline.reissue_unfinished_sessions`):
the state a run would be in had those sessions not started before the checkpoint. In `sync`
nothing is in flight at a step's end, so a resumed run equals the uninterrupted one number for
number. In the async modes the runs themselves depend on timing (which groups complete first,
where an abort cuts a request between two weight versions), so two uninterrupted runs already
differ; there a resume keeps the accounting exact (`submitted == trained + evicted + in flight`
across the kill) and regenerates every lost sample with its own seed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch

from core_v1.errors import UserError


LATEST = "latest_checkpointed_iteration.txt"


class CheckpointNotFoundError(UserError, FileNotFoundError):
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
    """Saves and resumes the parts of a run (`TrainerComponents`): the roles' weights, the store,
    the generation pipeline; the trainer hands in and gets back its own small state."""

    def __init__(self, trainer_config: Any, components: Any):
        self.config = trainer_config
        self.components = components
        self.directory = CheckpointDirectory(trainer_config.default_local_dir, trainer_config.max_actor_ckpt_to_keep)

    def due(self, step: int) -> bool:
        return checkpoint_due(self.config, step, self.components.total_training_steps)

    def save(self, step: int, trainer_state: dict) -> Path:
        """Checkpoint step `step`; `trainer_state` is the trainer's own (e.g. the KL coefficient)."""
        parts = self.components
        critic = parts.critic.save_checkpoint if parts.critic is not None else None
        return write_checkpoint(self.directory, step, parts.actor.save_checkpoint, critic,
                                lambda staging: {"weight_version": parts.checkpoint_manager.weight_version,
                                                 **save_pipeline(parts, staging), **trainer_state})

    def maybe_resume(self) -> Optional[dict]:
        """Load the checkpoint `trainer.resume_mode` points at, if any, and return its trainer state
        (`global_steps` and what `save` was given); None when the run starts fresh."""
        path = find_checkpoint(self.config)
        if path is None:
            return None
        parts = self.components
        load_roles(path, parts.actor.load_checkpoint,
                   parts.critic.load_checkpoint if parts.critic is not None else None)
        state = read_trainer_state(path)
        restore_pipeline(parts, path, state)
        # The replicas still hold the initial weights: bring them to the resumed policy, then run
        # again what was generating when the checkpoint was taken.
        parts.checkpoint_manager.update_weights(int(state["global_steps"]))
        groups, sessions = parts.pipeline.reissue_unfinished_sessions()
        print(f"resumed from {path} at step {state['global_steps']}: {groups} prompt groups in flight, "
              f"{sessions} sessions re-issued")
        return state


STORE_FILE = "transfer_store.pt"


def checkpoint_due(trainer_config: Any, step: int, total_steps: int) -> bool:
    """Whether step `step` saves: every `trainer.save_freq` steps and the last one (V1 and V0)."""
    freq = trainer_config.save_freq
    return freq > 0 and (step % freq == 0 or step == total_steps)


def write_checkpoint(directory: CheckpointDirectory, step: int, save_actor: Callable[[str], Any],
                     save_critic: Optional[Callable[[str], Any]], trainer_state: Callable[[Path], dict]) -> Path:
    """`global_step_<step>/{actor,critic,trainer_state.pt}`, committed atomically (V1 and V0).
    `trainer_state(staging)` returns what `trainer_state.pt` holds beside the step (it may write
    more files into the staging folder)."""
    with directory.writing(step) as staging:
        save_actor(str(staging / "actor"))
        if save_critic is not None:
            save_critic(str(staging / "critic"))
        torch.save({"global_steps": step, **trainer_state(staging)}, staging / "trainer_state.pt")
    return directory.root / f"global_step_{step}"


def read_trainer_state(path: Path) -> dict:
    """`trainer_state.pt` of the checkpoint folder `path`."""
    return torch.load(path / "trainer_state.pt", weights_only=False)


def load_roles(path: Path, load_actor: Callable[[str], Any], load_critic: Optional[Callable[[str], Any]]) -> None:
    """Load the actor, and the critic when the run has one and `path` holds it (V1 and V0)."""
    load_actor(str(path / "actor"))
    if load_critic is not None and (path / "critic").exists():
        load_critic(str(path / "critic"))


def save_pipeline(components: Any, folder: Path) -> dict:
    """Write the transfer store into `folder`; return the generation pipeline's small state for
    `trainer_state.pt` (see the module docstring)."""
    components.store.save(str(folder / STORE_FILE))
    return components.pipeline.state_dict()


def restore_pipeline(components: Any, folder: Path, state: dict) -> None:
    """Put back what `save_pipeline` saved, into components that have not started (the store unused)."""
    components.pipeline.load_state_dict(state)
    if (folder / STORE_FILE).is_file():
        components.store.load(str(folder / STORE_FILE))


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
