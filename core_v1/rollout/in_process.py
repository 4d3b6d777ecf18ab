"""Rollout replicas inside the driver process, for `trainer.v1.placement=local`.

The same `LLMServer` and clients as the Ray replicas (`core_v1.rollout.replica`), without a
process per replica: the engine's own thread generates, and the callers' event loops (the
agent loops', the weight sync's) call the server directly. Nothing here restarts a replica: a
failure in it is the driver's.
"""

from __future__ import annotations

from typing import Any

import torch

from core_v1.rollout.client import LLMServerClient, client_for
from core_v1.rollout.server import LLMServer


class InProcessReplicaGroup:
    """`num_replicas` servers of `model_path` in this process, loaded by the constructor; the
    interface of `RolloutReplicaGroup` that a run uses."""

    max_restarts = 0

    def __init__(
        self, model_path: str, num_replicas: int = 1, *, engine: str = "hf", engine_kwargs: dict[str, Any] | None = None
    ):
        # Ray replicas load in their own processes: loading here must not move the training RNG
        # stream either (a critic's fresh value head draws from it next), or the run would differ.
        with torch.random.fork_rng(devices=[]):
            self.replicas = [
                LLMServer.from_model(model_path, engine, **(engine_kwargs or {})) for _ in range(num_replicas)
            ]

    def wait_ready(self) -> None:
        """The constructor loaded every model: nothing to wait for."""

    def client(self, *, partial_rollout: bool = False) -> LLMServerClient:
        return client_for(self.replicas, partial_rollout=partial_rollout)

    def shutdown(self) -> None:
        for replica in self.replicas:
            replica.shutdown()
        self.replicas = []
