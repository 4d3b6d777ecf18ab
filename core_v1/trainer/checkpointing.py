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
  submission count (it seeds every later uid and sample), the KL coefficient, the async modes'
  group ledger (`ReplayBufferAsync.ledger`);
- `transfer_store.pt`: the store (`TransferStore.save`): every prompt group still in flight or
  finished and not yet trained, with the trajectories already in (tokens, log-probs, weight
  versions) and the store's counters.

On resume the store is loaded, the replicas get the resumed weights, and every session of a live
group that had not reported is run again with its own uid and seed (`AgentLoopManager.reissue`):
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

from core_v1.transfer_store import group_key, parse_key

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
        return checkpoint_due(self.config, step, self.trainer.components.total_training_steps)

    def save(self) -> Path:
        trainer = self.trainer
        critic = trainer.critic.save_checkpoint if trainer.critic is not None else None
        return write_checkpoint(self.directory, trainer.global_steps, trainer.actor.save_checkpoint, critic,
                                lambda staging: {"weight_version": trainer.checkpoint_manager.weight_version,
                                                 **save_pipeline(trainer, staging)})

    def find(self) -> Optional[Path]:
        return find_checkpoint(self.config)

    def maybe_resume(self) -> Optional[Path]:
        path = self.find()
        if path is None:
            return None
        trainer = self.trainer
        load_roles(path, trainer.actor.load_checkpoint,
                   trainer.critic.load_checkpoint if trainer.critic is not None else None)
        state = read_trainer_state(path)
        trainer.global_steps = int(state["global_steps"])
        restore_pipeline(trainer, path, state)
        # The replicas still hold the initial weights: bring them to the resumed policy, then run
        # again what was generating when the checkpoint was taken.
        trainer.checkpoint_manager.update_weights(trainer.global_steps)
        groups, sessions = reissue_unfinished_sessions(trainer)
        print(f"resumed from {path} at step {trainer.global_steps}: {groups} prompt groups in flight, "
              f"{sessions} sessions re-issued")
        return path


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


def save_pipeline(trainer: Any, folder: Path) -> dict:
    """Write the transfer store into `folder`; return the generation side's small state for
    `trainer_state.pt` (see the module docstring)."""
    trainer.components.store.save(str(folder / STORE_FILE))
    state = {"prompt_feed": trainer.prompts.state_dict(),
             # The submission count seeds every later uid and sample: restoring it makes a resumed
             # run draw exactly what the uninterrupted run would have.
             "submitted_prompts": trainer.agent_loop_manager.submitted}
    if trainer.kl_ctrl is not None:
        state["kl_coef"] = trainer.kl_ctrl.value
    ledger = getattr(trainer.replay_buffer, "ledger", None)
    if ledger is not None:
        state["ledger"] = ledger.state_dict()
    return state


def restore_pipeline(trainer: Any, folder: Path, state: dict) -> None:
    """Put back what `save_pipeline` saved, into a trainer that has not started (its store unused)."""
    # Checkpoints written before the prompt feed was saved hold only the sampler's position.
    trainer.prompts.load_state_dict(state.get("prompt_feed") or {"sampler": state["sampler"], "pending": []})
    trainer.agent_loop_manager.submitted = int(state.get("submitted_prompts", 0))
    if trainer.kl_ctrl is not None and "kl_coef" in state:
        trainer.kl_ctrl.value = float(state["kl_coef"])
    ledger = getattr(trainer.replay_buffer, "ledger", None)
    if ledger is not None and "ledger" in state:
        ledger.load_state_dict(state["ledger"])
    if (folder / STORE_FILE).is_file():
        trainer.components.store.load(str(folder / STORE_FILE))


def unfinished_sessions(tags: dict[str, dict]) -> dict[str, list[int]]:
    """`{uid: session ids that have not reported}` for every live group of a store listing."""
    reported: dict[str, set[int]] = {}
    expected: dict[str, int] = {}
    for key, row_tags in tags.items():
        parsed = parse_key(key)
        if parsed.is_group:
            expected[parsed.uid] = int(row_tags.get("n", 1))
        else:
            reported.setdefault(parsed.uid, set()).add(parsed.session_id)
    missing = {uid: sorted(set(range(n)) - reported.get(uid, set())) for uid, n in expected.items()}
    return {uid: sessions for uid, sessions in missing.items() if sessions}


def reissue_unfinished_sessions(trainer: Any, partition: str = "train") -> tuple[int, int]:
    """Run again every session of a restored group that had not reported; returns
    (groups in flight, sessions re-issued)."""
    store = trainer.components.store
    tags = store.list(partition)
    missing = unfinished_sessions(tags)
    groups_in_flight = sum(1 for key in tags if parse_key(key).is_group)
    if not missing:
        return groups_in_flight, 0
    keys = [group_key(uid) for uid in missing]
    rows = store.get(partition, keys, fields=["row"])["row"].tolist()
    reissued = trainer.agent_loop_manager.reissue(
        partition, [(uid, row, tags[key], missing[uid]) for uid, key, row in zip(missing, keys, rows)])
    return groups_in_flight, reissued


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
