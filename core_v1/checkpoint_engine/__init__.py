"""Weight sync from the trainer to the inference replicas: the one strong coupling between the
generation side and the training side. Backends register by name
(`actor_rollout_ref.rollout.checkpoint_engine.backend`)."""

from core_v1.checkpoint_engine.base import (
    CHECKPOINT_BACKENDS,
    CheckpointEngine,
    bucket_tensors,
    register_checkpoint_backend,
)
from core_v1.checkpoint_engine.broadcast import GlooCheckpointEngine, NcclCheckpointEngine
from core_v1.checkpoint_engine.naive import NaiveCheckpointEngine

__all__ = [
    "CHECKPOINT_BACKENDS",
    "CheckpointEngine",
    "GlooCheckpointEngine",
    "NaiveCheckpointEngine",
    "NcclCheckpointEngine",
    "bucket_tensors",
    "register_checkpoint_backend",
]
