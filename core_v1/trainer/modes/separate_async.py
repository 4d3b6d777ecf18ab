"""`separate_async`: a separate rollout pool generates continuously; the trainer trains whenever a
batch is ready, and the pool picks up new weights every `parameter_sync_step` optimizer updates.

Replicas never sleep or abort; a weight update lands between two decode steps (requests in
flight continue on the new weights, each token's log-prob from the policy that sampled it).
The constraints of DESIGN.md are checked before anything starts (`config_problems`):

- `data.train_batch_size == parameter_sync_step * actor.ppo_mini_batch_size`: one step is then
  exactly `parameter_sync_step` optimizer updates, so syncing after every step syncs every
  `parameter_sync_step` updates and the staleness accounting (one version per step) holds;
- `checkpoint_engine.backend` is not `naive` (it only hands weights to colocated replicas);
  use `gloo` on CPU or `nccl` on GPUs;
- no reward model colocated with the rollout pool (it never frees the devices for one).
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
        return super().config_problems(config) + separate_pool_problems(config)

    def on_train_begin(self):
        # Fill the pipeline; from here on the pool never stops, the trainer only takes what is done.
        return self.submit_warmup_batches()

    def on_step_end(self):
        # One step = parameter_sync_step updates (checked at start-up): ship this step's weights.
        return self.checkpoint_manager.update_weights(self.global_steps)


def separate_pool_problems(config: Any) -> list[str]:
    """The separate_async constraints of DESIGN.md, each with the fix."""
    aro, mode = config.actor_rollout_ref, config.trainer.v1.separate_async
    backend = aro.rollout.checkpoint_engine.backend
    reward_model = config.reward.reward_model
    problems = []
    if config.data.train_batch_size != mode.parameter_sync_step * aro.actor.ppo_mini_batch_size:
        problems.append(f"separate_async needs data.train_batch_size ({config.data.train_batch_size}) == "
                        f"trainer.v1.separate_async.parameter_sync_step ({mode.parameter_sync_step}) * "
                        f"actor_rollout_ref.actor.ppo_mini_batch_size ({aro.actor.ppo_mini_batch_size}); "
                        "change one of them")
    if backend == "naive":
        problems.append("separate_async cannot sync weights through actor_rollout_ref.rollout.checkpoint_engine."
                        "backend=naive (colocated only); set it to gloo (CPU) or nccl (GPU)")
    if reward_model.enable and not reward_model.enable_resource_pool:
        problems.append("separate_async cannot colocate the reward model with a rollout pool that never sleeps; set "
                        "reward.reward_model.enable_resource_pool=true to give it its own devices")
    return problems
