"""`sync`: generation and training never overlap. The most on-policy mode; it equals the V0 loop."""

from __future__ import annotations

from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.registry import register_trainer


@register_trainer("sync")
class SyncTrainer(PPOTrainer):
    def on_sample_end(self):
        # The whole batch is in and nothing else is in flight: give the replicas' memory to training.
        self.checkpoint_manager.sleep_replicas()

    def on_step_end(self):
        # The next batch must be sampled by the weights this step just trained.
        return self.checkpoint_manager.update_weights(self.global_steps)
