"""Trainer modes (`trainer.v1.trainer_mode`) and replay buffers (`trainer.v1.sampler.custom_sampler`) by name.

A mode is a `PPOTrainer` subclass; a replay buffer is a `ReplayBuffer` subclass. Both register like
every other extension: `@register_trainer("my_mode")` / `@register_replay_buffer("my_buffer")` in a
plug-in. verl calls the replay buffer a "sampler" (its config keys say so, and rlbridge keeps them);
`SAMPLERS` and `register_sampler` are those names for the same registry. The order of training
prompts (`data.sampler`, `core_v1.data.samplers`) is another thing.
"""

from __future__ import annotations

from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.replay_buffer import ReplayBuffer
from core_v1.utils.registry import Registry

TRAINER_MODES: Registry[type[PPOTrainer]] = Registry(
    "trainer mode", base=PPOTrainer, config_key="trainer.v1.trainer_mode"
)

REPLAY_BUFFERS: Registry[type[ReplayBuffer]] = Registry(
    "replay buffer", base=ReplayBuffer, config_key="trainer.v1.sampler.custom_sampler.name"
)
SAMPLERS = REPLAY_BUFFERS  # verl's name


def register_trainer(name: str):
    """Class decorator: `@register_trainer("my_mode")` makes `trainer.v1.trainer_mode=my_mode` work."""
    return TRAINER_MODES.register(name)


def get_trainer_cls(name: str) -> type[PPOTrainer]:
    return TRAINER_MODES.get(name)


def register_replay_buffer(name: str):
    """Class decorator: `@register_replay_buffer("my_buffer")` in a plug-in makes
    `trainer.v1.sampler.custom_sampler.name=my_buffer` work without a path."""
    return REPLAY_BUFFERS.register(name)


register_sampler = register_replay_buffer  # verl's name
