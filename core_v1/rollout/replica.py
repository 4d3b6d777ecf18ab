"""Rollout replicas as Ray actors: an `LLMServer` per actor, started together by a group.

A `RolloutReplica` is an async Ray actor, so one actor serves many concurrent `generate` calls
(they are batched by its engine) while control calls (`abort_all`, `sleep`, ...) still get in.
Pass the handles (or the group) to `LLMServerClient`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import ray
import torch

from core_v1.rollout.client import FullyAsyncLLMServerClient, LLMServerClient
from core_v1.rollout.server import LLMServer


class RolloutReplica(LLMServer):
    """`LLMServer` built inside a Ray actor process; `num_threads` caps torch's CPU threads there
    (set it to the actor's num_cpus so replicas sharing a node do not oversubscribe it)."""

    def __init__(self, model_path: str, engine: str = "hf", engine_kwargs: dict[str, Any] | None = None,
                 num_threads: int = 1):
        torch.set_num_threads(num_threads)
        server = LLMServer.from_model(model_path, engine, **(engine_kwargs or {}))
        super().__init__(server.engine)

    async def ready(self) -> int:
        """Answer once the model is loaded; returns the weight version."""
        return self.weight_version

    async def get_weight_version(self) -> int:
        return self.weight_version

    async def get_num_running(self) -> int:
        return self.num_running()

    async def get_engine_stats(self) -> dict[str, Any]:
        """The engine's counters (the hf engine's `EngineStats`), or {} for engines without them."""
        stats = getattr(self.engine, "stats", None)
        return dataclasses.asdict(stats) if dataclasses.is_dataclass(stats) else {}


class RolloutReplicaGroup:
    """Start `num_replicas` replica actors serving `model_path`, each with `num_cpus` CPUs (and
    `num_gpus` GPUs), and wait until all have loaded the model.

    `engine_kwargs` go to the engine constructor (e.g. {"device": "cpu", "max_num_seqs": 64}).
    With `wait=False` the actors start loading and the caller calls `wait_ready()` once it has
    started its other parts: a trainer builds its training ranks and agent-loop workers while the
    replicas load, instead of one after the other.
    """

    def __init__(self, model_path: str, num_replicas: int = 1, *, engine: str = "hf",
                 engine_kwargs: dict[str, Any] | None = None, num_cpus: float = 1, num_gpus: float = 0,
                 name_prefix: str | None = None, wait: bool = True):
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not ray.is_initialized():
            raise RuntimeError("Ray is not initialised; call ray.init() before starting rollout replicas")
        actor_cls = ray.remote(RolloutReplica)
        self.replicas = []
        for index in range(num_replicas):
            options: dict[str, Any] = {"num_cpus": num_cpus, "num_gpus": num_gpus}
            if name_prefix:
                options["name"] = f"{name_prefix}_{index}"
            self.replicas.append(actor_cls.options(**options).remote(
                model_path, engine, engine_kwargs, num_threads=max(1, int(num_cpus))))
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until every replica has loaded its model (raises a replica's start-up error)."""
        ray.get([replica.ready.remote() for replica in self.replicas])

    def client(self, *, partial_rollout: bool = False) -> LLMServerClient:
        """A client over these replicas; `partial_rollout=True` resubmits aborted requests."""
        cls = FullyAsyncLLMServerClient if partial_rollout else LLMServerClient
        return cls(self.replicas)

    def shutdown(self) -> None:
        for replica in self.replicas:
            ray.kill(replica)
        self.replicas = []
