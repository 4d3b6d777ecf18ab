"""Rollout replicas as Ray actors: an `LLMServer` per actor, started together by a group.

A `RolloutReplica` is an async Ray actor, so one actor serves many concurrent `generate` calls
(they are batched by its engine) while control calls (`abort_all`, `sleep`, ...) still get in.
Pass the handles (or the group) to `LLMServerClient`.

With `max_restarts > 0` Ray restarts a replica whose process dies (same handle, so every client
keeps it): the new process loads the model from disk and holds requests until the trainer's
weights arrive (`LLMServer.hold_until_weights`); `core_v1.rollout.supervisor` notices the death,
sends the weights and counts restarts against `max_restarts` per `restart_window_s`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import warnings
from typing import Any

import ray
import torch

from core_v1.rollout.client import LLMServerClient, client_for
from core_v1.rollout.server import LLMServer


class RolloutReplica(LLMServer):
    """`LLMServer` built inside a Ray actor process; `num_threads` caps torch's CPU threads there
    (set it to the actor's num_cpus so replicas sharing a node do not oversubscribe it)."""

    def __init__(
        self, model_path: str, engine: str = "hf", engine_kwargs: dict[str, Any] | None = None, num_threads: int = 1
    ):
        torch.set_num_threads(num_threads)
        server = LLMServer.from_model(model_path, engine, **(engine_kwargs or {}))
        super().__init__(server.engine)
        if _was_restarted():
            self.hold_until_weights()  # it holds the weights on disk, not the policy being trained

    async def identity(self) -> dict[str, Any]:
        """This process: `pid` and `log_path` (its stderr file, where a crash leaves its cause)."""
        return {"pid": os.getpid(), "log_path": _stderr_path()}

    async def watch(self) -> None:
        """Never returns: the call fails when this process dies, which is how a supervisor learns it."""
        await asyncio.get_running_loop().create_future()

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
    With `max_restarts > 0` Ray restarts a replica that dies (see the module docstring; the
    supervisor enforces the count per window, Ray itself restarts without limit).
    With `wait=False` the actors start loading and the caller calls `wait_ready()` once it has
    started its other parts: a trainer builds its training ranks and agent-loop workers while the
    replicas load, instead of one after the other.
    """

    def __init__(
        self,
        model_path: str,
        num_replicas: int = 1,
        *,
        engine: str = "hf",
        engine_kwargs: dict[str, Any] | None = None,
        num_cpus: float = 1,
        num_gpus: float = 0,
        name_prefix: str | None = None,
        wait: bool = True,
        max_restarts: int = 0,
        restart_window_s: float = 600.0,
    ):
        if num_replicas < 1:
            raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
        if not ray.is_initialized():
            raise RuntimeError("Ray is not initialised; call ray.init() before starting rollout replicas")
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        self.max_restarts, self.restart_window_s = max_restarts, restart_window_s
        actor_cls = ray.remote(RolloutReplica)
        self.replicas = []
        for index in range(num_replicas):
            # A lost request is resent by the client, not retried by Ray (which would run it twice).
            options: dict[str, Any] = {
                "num_cpus": num_cpus,
                "num_gpus": num_gpus,
                "max_restarts": -1 if max_restarts else 0,
                "max_task_retries": 0,
            }
            if name_prefix:
                options["name"] = f"{name_prefix}_{index}"
            self.replicas.append(
                actor_cls.options(**options).remote(
                    model_path, engine, engine_kwargs, num_threads=max(1, int(num_cpus))
                )
            )
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until every replica has loaded its model (raises a replica's start-up error)."""
        ray.get([replica.ready.remote() for replica in self.replicas])

    def client(self, *, partial_rollout: bool = False) -> LLMServerClient:
        """A client over these replicas; `partial_rollout=True` resubmits aborted requests."""
        return client_for(self.replicas, partial_rollout=partial_rollout)

    def shutdown(self) -> None:
        for replica in self.replicas:
            ray.kill(replica, no_restart=True)
        self.replicas = []


def _was_restarted() -> bool:
    with warnings.catch_warnings():  # Ray 2.x warns about an attribute it reads inside this call
        warnings.simplefilter("ignore")
        return bool(ray.get_runtime_context().was_current_actor_reconstructed)


def _stderr_path() -> str | None:
    """The file Ray sends this worker's stderr to (Linux), or None."""
    try:
        path = os.readlink("/proc/self/fd/2")
    except OSError:
        return None
    return path if os.path.isfile(path) else None
