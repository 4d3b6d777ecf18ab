"""The trainer's handle on the rollout replicas: weight sync and replica lifecycle.

Trainer modes differ only in *when* they call these (see `core_v1.trainer.modes`); the calls are
synchronous from the trainer's point of view and run on the rollout client's event loop, one at a
time: a restarted replica is brought to the trainer's state (`restore_replica`, called by the
`core_v1.rollout.supervisor` watching the replicas) between two of them, never during one, so a
trainer call waits for a restore in progress and the state restored is the one the last call left.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable, Optional

from core_v1.checkpoint_engine.base import CheckpointEngine
from core_v1.utils.aio import BackgroundLoop


class CheckpointManager:
    def __init__(self, actor: Any, rollout_client: Any, engine: CheckpointEngine, loop: BackgroundLoop):
        self.actor = actor
        self.rollout_client = rollout_client
        self.engine = engine
        self.loop = loop
        self.weight_version = 0
        self.asleep = False
        self.paused = False
        self.supervisor: Any = None
        self._lock = asyncio.Lock()
        self._replica_failure: Optional[Exception] = None
        self._restarts_reported = 0

    def supervise(self, replicas: Any) -> None:
        """Restart and restore dead replicas of `replicas` (a `RolloutReplicaGroup` started with
        `max_restarts > 0`); a replica that keeps dying fails the run at its next call here."""
        from core_v1.rollout.supervisor import ReplicaSupervisor

        self.supervisor = ReplicaSupervisor(
            replicas.replicas,
            self.restore_replica,
            self._fail,
            max_restarts=replicas.max_restarts,
            window_s=replicas.restart_window_s,
        ).start(self.loop)

    def update_weights(self, global_steps: int) -> dict:
        """Push the actor's weights to every replica as version `global_steps`, then wake them."""
        metrics = self.sync_weights(global_steps)
        self.wake_up_replicas()
        return metrics

    def sync_weights(self, global_steps: int) -> dict:
        """Push the actor's weights to every replica as version `global_steps` (asleep stays asleep)."""
        metrics = self._run(lambda: self._sync(self.actor.named_parameters_for_sync(), global_steps))
        return {**metrics, **self._restart_metrics()}

    def run_generation(self, work: Callable[[], Awaitable[Any]], check_every_s: float = 1.0) -> Any:
        """Run `work()` (requests to the replicas) on the control loop and return its result; if a
        replica is given up on meanwhile, its requests would wait forever: raise why instead."""
        return self._run(lambda: self._unless_replica_fails(work(), check_every_s), exclusive=False)

    def sleep_replicas(self) -> None:
        """Free the replicas' KV cache (and on GPU their weights) while the trainer needs the memory."""
        self._run(lambda: self._set_state(self.rollout_client.sleep(), asleep=True))

    def wake_up_replicas(self) -> None:
        if self.asleep:
            self._run(lambda: self._set_state(self.rollout_client.wake_up(), asleep=False))

    def abort_replicas(self) -> None:
        """Stop in-flight requests; partial-rollout clients resubmit them after `resume`."""
        self._run(lambda: self._set_state(self.rollout_client.abort_all(), paused=True))

    def resume_generation_replicas(self) -> None:
        self.wake_up_replicas()
        self._run(lambda: self._set_state(self.rollout_client.resume(), paused=False))

    def raise_if_replica_failed(self) -> None:
        """Raise why a replica was given up on (the supervisor's verdict), if one was."""
        if self._replica_failure is not None:
            raise self._replica_failure

    async def restore_replica(self, index: int) -> None:
        """Bring replica `index`, restarted with the weights on disk, to the trainer's state: the
        weights of the last sync (sent again through the run's weight sync; none yet: the ones
        from disk are current), then asleep and paused if the others are."""
        async with self._lock:
            client = self.rollout_client
            if await client.call_one(index, "awaiting_weights"):
                if not await self.engine.resend(client, index):
                    await client.call_one(index, "confirm_weights", self.weight_version)
            if self.asleep:
                await client.call_one(index, "sleep")
            if self.paused:
                await client.call_one(index, "abort_all")

    def close(self) -> None:
        if self.supervisor is not None:
            self.supervisor.stop()
        self.engine.close()

    def _run(self, call: Callable[[], Awaitable[Any]], exclusive: bool = True) -> Any:
        """`call()` on the control loop, one trainer call at a time (`exclusive`), unless a replica
        was given up on (its coroutine is made only once that is checked, so none is left unawaited)."""
        self.raise_if_replica_failed()
        return self.loop.run(self._one_at_a_time(call()) if exclusive else call())

    async def _unless_replica_fails(self, work: Awaitable[Any], check_every_s: float) -> Any:
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait([task], timeout=check_every_s)
            if done:
                return task.result()
            if self._replica_failure is not None:
                task.cancel()
                raise self._replica_failure

    async def _one_at_a_time(self, call: Awaitable[Any]) -> Any:
        async with self._lock:
            return await call

    async def _sync(self, named_tensors: Any, version: int) -> dict:
        metrics = await self.engine.sync(named_tensors, self.rollout_client, version)
        self.weight_version = version
        return metrics

    async def _set_state(self, call: Awaitable[Any], **state: bool) -> Any:
        result = await call
        for name, value in state.items():
            setattr(self, name, value)
        return result

    def _fail(self, error: Exception) -> None:
        if self._replica_failure is None:
            self._replica_failure = error

    def _restart_metrics(self) -> dict:
        """`rollout/replica_restarts` (so far) and, after a restart since the last sync, how long
        the latest took (`timing_s/replica_restart`, death to restored). Without a supervisor
        (restarts off, or replicas in the driver) the count is 0: the same keys whatever the placement."""
        if self.supervisor is None:
            return {"rollout/replica_restarts": 0}
        restarts = self.supervisor.restart_seconds
        metrics = {"rollout/replica_restarts": len(restarts)}
        if len(restarts) > self._restarts_reported:
            metrics["timing_s/replica_restart"] = restarts[-1]
            self._restarts_reported = len(restarts)
        return metrics
