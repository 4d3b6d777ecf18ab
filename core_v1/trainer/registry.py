"""Trainer modes by name (`trainer.v1.trainer_mode`): a mode is a `PPOTrainer` subclass."""

from __future__ import annotations

from core_v1.trainer.base import PPOTrainer
from core_v1.utils.registry import Registry

TRAINER_MODES: Registry[type[PPOTrainer]] = Registry("trainer mode", base=PPOTrainer,
                                                     config_key="trainer.v1.trainer_mode")


def register_trainer(name: str):
    """Class decorator: `@register_trainer("my_mode")` makes `trainer.v1.trainer_mode=my_mode` work."""
    return TRAINER_MODES.register(name)


def get_trainer_cls(name: str) -> type[PPOTrainer]:
    return TRAINER_MODES.get(name)
