from __future__ import annotations

import abc
from typing import Any, Iterable, Iterator

import torch

from core_v1.utils.registry import Registry


class CheckpointEngine(abc.ABC):
    """Moves the trainer's current weights into every rollout replica, tagged with a version.

    `named_tensors` yields (name, tensor) pairs named as a fresh `from_pretrained` model of the
    same checkpoint expects; `version` is the trainer's global step, and every output a replica
    produces afterwards records it.
    """

    def __init__(self, config: Any):
        self.bucket_bytes = int(config.update_weights_bucket_megabytes) * 1024 * 1024

    @abc.abstractmethod
    async def sync(self, named_tensors: Iterable[tuple[str, torch.Tensor]], rollout_client: Any, version: int) -> dict:
        """Send the weights; return metrics (bytes, seconds)."""

    async def resend(self, rollout_client: Any, index: int) -> bool:
        """Send the weights of the last `sync`, at its version, again to replica `index`, which
        restarted with the weights on disk; False if nothing was synced yet (those are current).
        A backend that cannot ends the run when a replica restarts."""
        raise NotImplementedError(
            f"the {type(self).__name__} weight sync cannot send the weights to a restarted replica (it has no resend)"
        )

    def close(self) -> None:
        """Release process groups or buffers the backend holds."""


CHECKPOINT_BACKENDS: Registry[type[CheckpointEngine]] = Registry(
    "checkpoint-engine backend", base=CheckpointEngine, config_key="actor_rollout_ref.rollout.checkpoint_engine.backend"
)


def register_checkpoint_backend(name: str):
    return CHECKPOINT_BACKENDS.register(name)


def bucket_tensors(
    named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group tensors into buckets of at most `bucket_bytes` (a larger tensor travels alone), so peak
    extra memory during a sync is one bucket, not a second copy of the model."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named_tensors:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket
