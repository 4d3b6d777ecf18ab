"""`colocate_async`: one pool of devices, shared in time; generation runs ahead of training.

`num_warmup_batches` batches generate before the first step, so each step trains on a batch
that is already (mostly) done while the next one is in flight. Training needs the shared
devices, so in-flight requests are aborted and the replicas sleep while it runs; after the
weight update the aborted requests resume where they stopped, on the new weights (partial
rollout), and every trajectory records the weight versions that produced it. With
`trainer.v1.colocate_async.reproducible=true` the requests in flight finish instead of being
aborted (see `core_v1.trainer.modes.async_base`).
"""

from __future__ import annotations

from core_v1.trainer.modes.async_base import AsyncPPOTrainer
from core_v1.trainer.registry import register_trainer


@register_trainer("colocate_async")
class ColocateAsyncTrainer(AsyncPPOTrainer):
    mode_section = "colocate_async"

    def on_train_begin(self):
        # Fill the pipeline, so the first step's batch is already generating when it starts waiting.
        return self.submit_warmup_batches()

    def on_sample_end(self):
        # The batch is in; the devices go to training now, so stop the rest of generation where it is
        # (reproducible: let it finish on the weights it started with).
        if self.reproducible:
            self.finish_generation()
        else:
            self.checkpoint_manager.abort_replicas()
        self.checkpoint_manager.sleep_replicas()

    def on_step_end(self):
        # Weights before resume: the aborted requests must continue on the policy just trained.
        metrics = self.checkpoint_manager.update_weights(self.global_steps)
        self.checkpoint_manager.resume_generation_replicas()
        return {**metrics, **self.pipeline_accounting()}
