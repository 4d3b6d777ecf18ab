"""Trainer modes (`trainer.v1.trainer_mode`) and samplers (`trainer.v1.sampler.custom_sampler`) by name.

A mode is a `PPOTrainer` subclass; a sampler is a `ReplayBuffer` subclass. Both register like every
other extension: `@register_trainer("my_mode")` / `@register_sampler("my_buffer")` in a plug-in.
"""

from __future__ import annotations

from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.replay_buffer import ReplayBuffer
from core_v1.utils.registry import Registry

TRAINER_MODES: Registry[type[PPOTrainer]] = Registry("trainer mode", base=PPOTrainer,
                                                     config_key="trainer.v1.trainer_mode")

SAMPLERS: Registry[type[ReplayBuffer]] = Registry("sampler", base=ReplayBuffer,
                                                  config_key="trainer.v1.sampler.custom_sampler.name")


def register_trainer(name: str):
    """Class decorator: `@register_trainer("my_mode")` makes `trainer.v1.trainer_mode=my_mode` work."""
    return TRAINER_MODES.register(name)


def get_trainer_cls(name: str) -> type[PPOTrainer]:
    return TRAINER_MODES.get(name)


def register_sampler(name: str):
    """Class decorator: `@register_sampler("my_buffer")` in a plug-in makes
    `trainer.v1.sampler.custom_sampler.name=my_buffer` work without a path."""
    return SAMPLERS.register(name)
