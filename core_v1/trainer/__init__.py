"""The V1 trainer: `PPOTrainer` (stages + hooks), the trainer-mode registry, the replay buffer."""

from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.registry import (
    REPLAY_BUFFERS,
    SAMPLERS,
    TRAINER_MODES,
    get_trainer_cls,
    register_replay_buffer,
    register_sampler,
    register_trainer,
)
from core_v1.trainer import modes  # noqa: F401  (registers the built-in modes)

__all__ = [
    "PPOTrainer",
    "REPLAY_BUFFERS",
    "SAMPLERS",
    "TRAINER_MODES",
    "get_trainer_cls",
    "register_replay_buffer",
    "register_sampler",
    "register_trainer",
]
