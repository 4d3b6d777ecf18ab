"""The engine interface an `LLMServer` drives.

An engine turns token ids into token ids for many concurrent requests and can be paused, emptied
and re-weighted between its own steps. It is async because the engines we host are: the built-in
`hf` engine decodes on a worker thread, vLLM's `AsyncLLM` runs its own loop. Admission policy
(sleeping, paused after an abort) belongs to `LLMServer`, not to engines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Iterable

import torch

from core_v1.rollout.types import SamplingParams, TokenOutput

NamedTensors = Iterable[tuple[str, torch.Tensor]]


class InferenceEngine(ABC):
    """One model replica's generation engine.

    Every `TokenOutput` carries the weight versions (set by `update_weights`) that produced its
    tokens. Methods may be called concurrently from one event loop; the engine serialises them.
    """

    @abstractmethod
    async def generate(self, request_id: str, prompt_ids: list[int], params: SamplingParams) -> TokenOutput:
        """Generate for one request; returns when it stops, reaches its length, or is aborted.

        An engine that serves vision-language models also takes `multi_modal_inputs=` (the
        prompt's image inputs, `core_v1.agent_loop.vision`); the server passes it only with images."""

    @abstractmethod
    async def abort_all(self) -> int:
        """Finish every in-flight request now with stop_reason "aborted"; returns how many."""

    @abstractmethod
    async def sleep(self) -> None:
        """Free the KV cache (and offload weights on an accelerator); running requests are held,
        not lost, and continue after `wake_up`."""

    @abstractmethod
    async def wake_up(self) -> None:
        """Undo `sleep`."""

    @abstractmethod
    async def update_weights(self, named_tensors: NamedTensors, version: int) -> None:
        """Load (name, tensor) pairs into the model; later tokens are tagged with `version`."""

    @property
    @abstractmethod
    def weight_version(self) -> int:
        """The version of the weights now loaded."""

    def shutdown(self) -> None:
        """Release threads and memory; the engine is unusable afterwards."""
