"""`separate_async`: a separate rollout pool generates continuously; the trainer trains whenever a
batch is ready, and the pool picks up new weights every `parameter_sync_step` optimizer updates.

Replicas never sleep or abort; a weight update lands between two decode steps (requests in
flight continue on the new weights, each token's log-prob from the policy that sampled it). With
`trainer.v1.separate_async.reproducible=true` it lands once the requests in flight have finished
(see `core_v1.trainer.modes.async_base`).
The constraints in docs/design.md are checked before anything starts (`config_problems`, with the
rules themselves in `core_v1.trainer.constraints`, which the dry run shares):

- `data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size`: one step is then
  exactly `parameter_sync_step` optimizer updates, so syncing after every step syncs every
  `parameter_sync_step` updates and the staleness accounting (one version per step) holds;
- `checkpoint_engine.backend` is not `naive` (it only hands weights to colocated replicas);
  use `gloo` on CPU or `nccl` on GPUs;
- no reward model colocated with the rollout pool (it never frees the devices for one).
"""

from __future__ import annotations

from typing import Any

from core_v1.trainer.constraints import separate_async_problems
from core_v1.trainer.modes.async_base import AsyncPPOTrainer
from core_v1.trainer.registry import register_trainer


@register_trainer("separate_async")
class SeparateAsyncTrainer(AsyncPPOTrainer):
    mode_section = "separate_async"

    @classmethod
    def config_problems(cls, config: Any) -> list[str]:
        return super().config_problems(config) + separate_async_problems(config)

    def on_train_begin(self):
        # Fill the pipeline; from here on the pool never stops, the trainer only takes what is done.
        return self.submit_warmup_batches()

    def on_sample_end(self):
        # The pool has devices of its own: it keeps generating the next batches while this one trains.
        return None

    def on_step_end(self):
        # One step = parameter_sync_step updates (checked at start-up): ship this step's weights.
        if self.reproducible:
            self.finish_generation()  # the batch ahead ends on the weights it began with
        return {**self.checkpoint_manager.update_weights(self.global_steps), **self.pipeline_accounting()}
