"""Everything a trainer works with, built once by `core_v1.trainer.setup.build_components`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional


@dataclass
class TrainerComponents:
    tokenizer: Any
    store: Any
    agent_loop_manager: Any
    checkpoint_manager: Any
    pipeline: Any  # GenerationPipeline: submission, the in-flight count, refills
    replay_buffer: Any
    actor: Any
    train_sampler: Any
    tracking: Any
    total_training_steps: int
    ref: Any = None
    critic: Any = None
    val_dataset: Any = None
    rollout_client: Any = None
    data_parallel_size: int = 1
    workers: Any = None  # the training WorkerGroup behind actor / ref / critic
    progress: Callable[..., Any] = None
    closers: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for close in reversed(self.closers):
            try:
                close()
            except Exception as error:  # shutdown must release everything it can
                print(f"warning: shutdown step failed: {error}")
