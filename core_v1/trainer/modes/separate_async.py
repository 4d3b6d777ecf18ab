"""`separate_async`: a separate rollout pool generates continuously; the trainer trains whenever a
batch is ready, and the pool picks up new weights every `parameter_sync_step` optimizer updates.

Replicas never sleep or abort; a weight update lands between two decode steps (requests in
flight continue on the new weights, each token's log-prob from the policy that sampled it). With
`trainer.v1.separate_async.reproducible=true` it lands once the requests in flight have finished
(see `core_v1.trainer.modes.async_base`).
Its constraints (`SeparateAsyncTrainer.config_problems`, listed by the validation pass and the
dry run before anything starts), besides the async modes':

- `parameter_sync_step >= 1`, and `data.train_batch_size == parameter_sync_step *
  actor.ppo_mini_batch_size`: one step is then exactly `parameter_sync_step` optimizer updates,
  so syncing after every step syncs every `parameter_sync_step` updates and the staleness
  accounting (one version per step) holds;
- `checkpoint_engine.backend` is not `naive` (it only hands weights to colocated replicas);
  use `gloo` on CPU or `nccl` on GPUs.

(A reward model runs in the trainer's reward stage, on the trainer's device, not beside the pool,
so it is no constraint here.)
"""

from __future__ import annotations

from typing import Any

from core_v1.trainer.modes.async_base import AsyncPPOTrainer
from core_v1.trainer.registry import register_trainer


@register_trainer("separate_async")
class SeparateAsyncTrainer(AsyncPPOTrainer):
    mode_section = "separate_async"

    @classmethod
    def config_problems(cls, config: Any) -> list[str]:
        aro = config.actor_rollout_ref
        sync_step = config.trainer.v1.separate_async.parameter_sync_step
        problems = super().config_problems(config)
        if sync_step < 1:
            problems.append(f"trainer.v1.separate_async.parameter_sync_step={sync_step} must be >= 1")
        if config.data.train_batch_size != sync_step * aro.actor.ppo_mini_batch_size:
            problems.append(
                f"separate_async needs data.train_batch_size ({config.data.train_batch_size}) == "
                f"trainer.v1.separate_async.parameter_sync_step ({sync_step}) * "
                f"actor_rollout_ref.actor.ppo_mini_batch_size ({aro.actor.ppo_mini_batch_size}); "
                "change one of them"
            )
        if aro.rollout.checkpoint_engine.backend == "naive":
            problems.append(
                "separate_async cannot sync weights through actor_rollout_ref.rollout.checkpoint_engine."
                "backend=naive (colocated only); set it to gloo (CPU) or nccl (GPU)"
            )
        return problems

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
