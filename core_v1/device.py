"""Which device a run trains and generates on: `trainer.device` (auto, cpu or cuda) resolved once.

Its own module because the trainer, the constraint pass, the composition root and V0's workers all
ask the same question; none of them should import another's module for it.
"""

from __future__ import annotations

import torch

from core_v1.config.schema import ConfigError, PPOConfig


def resolve_device(config: PPOConfig) -> str:
    wanted = config.trainer.device
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no GPU is visible; use trainer.device=cpu or auto")
    return wanted
