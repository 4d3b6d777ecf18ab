"""Everything a trainer works with, built once by `core_v1.trainer.setup.build_components` (the
composition root: it decides placement and builds every part; a trainer only uses what it is given)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Optional, Protocol

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from core_v1.agent_loop.manager import AgentLoopManager
    from core_v1.checkpoint_engine.manager import CheckpointManager
    from core_v1.data import PromptDataset, PromptSampler
    from core_v1.data.samplers import CustomSamplerFeed
    from core_v1.reward.reward_model import RewardModel
    from core_v1.rollout.client import LLMServerClient
    from core_v1.trainer.generation import GenerationPipeline
    from core_v1.trainer.replay_buffer import ReplayBuffer
    from core_v1.transfer_store.ray_store import RayTransferStore
    from core_v1.transfer_store.store import TransferStore
    from core_v1.utils.tracking import Tracking
    from core_v1.workers.group import ActorHandle, CriticHandle, ReferenceHandle, TeacherHandle, WorkerGroup


class ProgressBar(Protocol):
    """What the trainer does with its progress bar (tqdm's names)."""

    def update(self, n: float = 1) -> object: ...

    def close(self) -> None: ...


class ProgressFactory(Protocol):
    def __call__(self, total: int, initial: int = 0) -> ProgressBar: ...


class _NoBar:
    def update(self, n: float = 1) -> None:
        return None

    def close(self) -> None:
        return None


def no_progress(total: int, initial: int = 0) -> ProgressBar:
    """The progress factory of components built without one (test harnesses): draws nothing."""
    return _NoBar()


@dataclass
class TrainerComponents:
    tokenizer: PreTrainedTokenizerBase
    store: TransferStore | RayTransferStore
    agent_loop_manager: AgentLoopManager
    checkpoint_manager: CheckpointManager
    pipeline: GenerationPipeline  # submission, the in-flight count, refills
    replay_buffer: ReplayBuffer
    actor: ActorHandle
    train_sampler: PromptSampler | CustomSamplerFeed  # the training prompts' order (`data.sampler`)
    tracking: Tracking
    total_training_steps: int
    ref: Optional[ReferenceHandle] = None
    critic: Optional[CriticHandle] = None
    teacher: Optional[TeacherHandle] = None  # `distillation.enabled`: the teachers' log-probs
    val_dataset: Optional[PromptDataset] = None
    rollout_client: Optional[LLMServerClient] = None
    data_parallel_size: int = 1
    workers: Optional[WorkerGroup] = None  # the training WorkerGroup behind actor / ref / critic
    progress: ProgressFactory = no_progress
    reward_model: Optional[RewardModel] = (
        None  # `reward.reward_model.enable`: the trainer's reward stage rescores with it
    )
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        shut_down(self.closers)


def shut_down(closers: list[Callable[[], None]]) -> None:
    """Run each shutdown step, newest first; one that fails is reported and the others still run."""
    for close in reversed(closers):
        try:
            close()
        except Exception as error:  # shutdown must release everything it can
            print(f"warning: shutdown step failed: {error}")
