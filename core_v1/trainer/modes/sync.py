"""`sync`: generation and training never overlap. The most on-policy mode; it equals the V0 loop."""

from __future__ import annotations

from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.registry import register_trainer


@register_trainer("sync")
class SyncTrainer(PPOTrainer):
    """The base trainer's hooks as they are: PPOTrainer's defaults are sync's choices (replicas sleep
    once the batch is in; the weights move after every step)."""
