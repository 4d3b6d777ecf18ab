"""What the async modes share: a pipeline of prompt groups kept ahead of training.

`num_warmup_batches` (W) batches are submitted before the first step; each step then tops the
pipeline up to W + 1 batches of groups in flight (live in the store: generating, or finished
and not yet trained) before it samples one batch, oldest first. In steady state that is one
batch submitted per step, as in slime's and verl's async loops; after evictions, or after a
step where the `wait` strategy held admission, the top-up restores the depth.

Submission and the count of groups in flight belong to the generation pipeline
(`core_v1.trainer.generation`); sampling goes through `ReplayBufferAsync` (staleness bound,
eviction), which reports evicted groups to the pipeline, and the pipeline replaces them. A custom
sampler that subclasses the sync `ReplayBuffer` still works: it samples what is complete, without
evictions or a staleness bound.

The modes (`colocate_async`, `separate_async`) differ only in their hooks: when replicas stop,
sleep and receive weights.

By default timing decides two things, so two runs with one seed differ: where an abort or a weight
update cuts a request between two weight versions, and which complete groups fill a batch. With
`reproducible: true` in the mode's section neither does: a mode lets every request finish on the
weights it started with before the devices go to training (colocate) or before new weights land
(separate), and batches take the oldest groups in submission order, waiting for them. Each batch
is then sampled by exactly the weights of `num_warmup_batches` steps earlier, whatever the timing,
and a checkpoint never holds a half-generated group, so a resumed run repeats the uninterrupted
one. The price is overlap: colocate no longer trains while a request of the next batch is
unfinished; separate's trainer waits at each step's end for the pool to finish the batch ahead.
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.algorithms.advantages.otb import OTB_ESTIMATORS
from core_v1.config.schema import ConfigError
from core_v1.trainer.base import PPOTrainer
from core_v1.trainer.generation import TRAIN
from core_v1.trainer.off_policy import center_stale_advantages, uses_decoupled_loss
from core_v1.trainer.replay_buffer import every_group_complete
from core_v1.trainer.replay_buffer_async import ReplayBufferAsync


class AsyncPPOTrainer(PPOTrainer):
    """Base of the async modes; not registered itself. `mode_section` names the mode's config
    section under `trainer.v1` (it holds `num_warmup_batches`)."""

    partial_rollout = True
    replay_buffer_cls = ReplayBufferAsync
    mode_section = ""

    @classmethod
    def config_problems(cls, config: Any) -> list[str]:
        """The async modes' constraints: the pipeline depth against the staleness bound, the decoupled
        loss without rollout IS weights, ... (each naming the fix)."""
        warmup = getattr(config.trainer.v1, cls.mode_section).num_warmup_batches
        threshold = config.trainer.v1.sampler.max_off_policy_threshold
        problems = super().config_problems(config)
        if warmup < 0:
            problems.append(f"trainer.v1.{cls.mode_section}.num_warmup_batches={warmup} must be >= 0")
        if threshold < warmup + 1:
            problems.append(
                f"trainer.v1.sampler.max_off_policy_threshold={threshold} is below the pipeline depth: "
                f"with num_warmup_batches={warmup} a batch is trained {warmup + 1} steps after it is "
                f"submitted; raise the threshold to >= {warmup + 1} or lower "
                f"trainer.v1.{cls.mode_section}.num_warmup_batches"
            )
        if uses_decoupled_loss(config) and config.algorithm.rollout_correction.rollout_is:
            problems.append(
                "the decoupled loss already weights tokens by pi_prox / pi_behav; unset "
                "algorithm.rollout_correction.rollout_is (or use the vanilla loss with it)"
            )
        return problems

    def __init__(self, config: Any, components: Any):
        super().__init__(config, components)
        if self.reproducible:
            self._sample_in_submission_order()
        notice = self.small_train_set_notice()
        if notice:
            print(notice)

    def small_train_set_notice(self) -> Optional[str]:
        """A line for a train set smaller than the pipeline (None otherwise). Then every batch shares
        prompts with the one trained just before it, whose groups were sampled before that update:
        each such prompt is updated twice on samples that show neither update. Measured on the CPU
        quickstart (25 prompts, docs/design.md): with 16-prompt batches (32 groups in flight) an async
        run ends up to 0.1 from sync at the same seed; with 8-prompt batches, within 0.05."""
        dataset = getattr(self.components.train_sampler, "dataset", None)
        in_flight = (self.num_warmup_batches + 1) * self.train_batch_size
        if dataset is None or in_flight <= len(dataset):
            return None
        return (
            f"note: {self.config.trainer.v1.trainer_mode} keeps {in_flight} prompt groups in flight "
            f"((num_warmup_batches + 1) x data.train_batch_size) but the train set has {len(dataset)} "
            f"prompts: prompts recur before their last group is trained, so learning lags sync more than "
            f"on a train set many times larger than the pipeline"
        )

    @property
    def num_warmup_batches(self) -> int:
        return getattr(self.config.trainer.v1, self.mode_section).num_warmup_batches

    @property
    def reproducible(self) -> bool:
        return getattr(self.config.trainer.v1, self.mode_section).reproducible

    def _sample_in_submission_order(self) -> None:
        if not isinstance(self.replay_buffer, ReplayBufferAsync):
            raise ConfigError(
                f"trainer.v1.{self.mode_section}.reproducible=true needs batches taken in submission "
                f"order, which {type(self.replay_buffer).__name__} (trainer.v1.sampler.custom_sampler) "
                "does not do: derive it from core_v1.trainer.replay_buffer_async.ReplayBufferAsync, "
                "or set reproducible=false"
            )
        self.replay_buffer.in_submission_order = True

    def finish_generation(self) -> None:
        """Block until every group submitted so far has all its sessions in (checking that the
        generation side is alive): what `reproducible` waits for before weights change."""
        self.replay_buffer.wait_for_groups(TRAIN, every_group_complete)

    def submit_warmup_batches(self) -> dict:
        """Fill the pipeline before the first step (what `on_train_begin` of both modes does). A
        resumed run has its pipeline back from the checkpoint, as the uninterrupted run had it."""
        if self.global_steps > 0:
            return {}
        uids = self.pipeline.submit(self.num_warmup_batches * self.train_batch_size, self.global_steps)
        return {"training/off_policy/warmup_groups": len(uids)}

    def pipeline_accounting(self) -> dict:
        """Prove at a step's end that no prompt group was lost or trained twice (the pipeline's
        ledger against the store's live groups; raises AccountingError if not), as metrics."""
        return self.pipeline.accounting()

    def _compute_advantage(self, batch, metrics: dict):
        # A batch sampled by an older policy is trained with IS weights; without centring, the
        # weights tilt each group's zero-sum advantages toward the answers the policy is moving to.
        # A critic's advantages are not per group, and the optimal-token baselines weigh the IS
        # weights in themselves (squared, per token): neither is centred again.
        batch = super()._compute_advantage(batch, metrics)
        if (
            self.critic is not None
            or not self.rollout_correction.center_group_advantages
            or self.config.algorithm.adv_estimator in OTB_ESTIMATORS
            or "rollout_is_weights" not in batch.fields
        ):
            return batch
        return self._on_rank(
            batch, metrics, center_stale_advantages, fields=("rollout_is_weights",), outputs=("advantages",)
        )[0]

    def _add_batch_to_generate(self, metrics: dict) -> list[str]:
        """Top the pipeline up to `num_warmup_batches + 1` batches of groups in flight, unless the
        replay buffer holds admission (`wait` strategy behind a straggler); returns at once."""
        self.checkpoint_manager.wake_up_replicas()
        admitted = not isinstance(self.replay_buffer, ReplayBufferAsync) or self.replay_buffer.admission_open(
            self.global_steps
        )
        metrics["training/off_policy/admission_paused"] = float(not admitted)
        if not admitted:
            return []
        return self.pipeline.top_up((self.num_warmup_batches + 1) * self.train_batch_size, self.global_steps)
