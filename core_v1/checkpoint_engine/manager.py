"""The trainer's handle on the rollout replicas: weight sync and replica lifecycle.

Trainer modes differ only in *when* they call these (see `core_v1.trainer.modes`); the calls are
synchronous from the trainer's point of view and run on the rollout client's event loop.
"""

from __future__ import annotations

from typing import Any

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

    def update_weights(self, global_steps: int) -> dict:
        """Push the actor's weights to every replica as version `global_steps`, then wake them."""
        metrics = self.loop.run(self.engine.sync(self.actor.named_parameters_for_sync(), self.rollout_client,
                                                 global_steps))
        self.weight_version = global_steps
        self.wake_up_replicas()
        return metrics

    def sleep_replicas(self) -> None:
        """Free the replicas' KV cache (and on GPU their weights) while the trainer needs the memory."""
        self.loop.run(self.rollout_client.sleep())
        self.asleep = True

    def wake_up_replicas(self) -> None:
        if self.asleep:
            self.loop.run(self.rollout_client.wake_up())
            self.asleep = False

    def abort_replicas(self) -> None:
        """Stop in-flight requests; partial-rollout clients resubmit them after `resume`."""
        self.loop.run(self.rollout_client.abort_all())

    def resume_generation_replicas(self) -> None:
        self.wake_up_replicas()
        self.loop.run(self.rollout_client.resume())

    def close(self) -> None:
        self.engine.close()
