"""`PPOTrainer`: one training step as a list of named stages, plus five lifecycle hooks.

    step():  _add_batch_to_generate -> replay_buffer.sample -> _compute_reward_colocate
             -> _balance_batch -> _compute_old_log_prob -> [_compute_ref_log_prob]
             -> [_compute_values] -> _compute_advantage -> [_pf_ppo_resample] -> [_update_critic]
             -> _update_actor -> [_update_curriculum] -> [_dump_rollout_generations]
    hooks:   on_train_begin, on_step_begin, on_sample_begin, on_sample_end, on_step_end

Every stage has the same shape: `(batch, metrics) -> batch`; it reads fields of the batch and
writes fields back, and runs under a timer of its own name. A trainer mode (`sync`,
`colocate_async`, `separate_async`, or a user's, registered with `@register_trainer`) is a
subclass that overrides hooks to decide when generation runs and when weights move; a hook that
has something to report returns a metrics dict. Any stage can be overridden the same way.
"""

from __future__ import annotations

from typing import Any, Optional

from tensordict import TensorDict

from core_v1.algorithms.kl import get_kl_controller
from core_v1.config.schema import ConfigError
from core_v1.data.samplers import step_batch
from core_v1.reward.reward_model import build_reward_model
from core_v1.trainer.batch import column, session_layout
from core_v1.trainer.remax import greedy_baseline_rewards
from core_v1.trainer.components import TrainerComponents
from core_v1.trainer.generation_dump import dump_generations
from core_v1.trainer.metrics import (compute_data_metrics, compute_throughput_metrics,
                                    compute_variance_proxy_metrics, timed)
from core_v1.trainer.off_policy import correction_config
from core_v1.trainer.checkpointing import TrainerCheckpointer
from core_v1.trainer.setup import resolve_device
from core_v1.trainer.stages import (advantage_stage, balance_stage, old_log_prob_stage, pf_ppo_rows,
                                    reward_model_stage)
from core_v1.trainer.validation import Validator


class PPOTrainer:
    partial_rollout = False  # whether aborted requests resume on new weights (async modes)
    replay_buffer_cls = None  # None: the sync ReplayBuffer (or a custom sampler from config)

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Refuse, before anything starts, a config this mode cannot run (raise ConfigError)."""
        if config.algorithm.adv_estimator == "remax" and cls.partial_rollout:
            raise ConfigError(f"algorithm.adv_estimator=remax needs trainer.v1.trainer_mode=sync, not "
                              f"{config.trainer.v1.trainer_mode}: its greedy baseline is generated mid-step, while "
                              "an async mode holds the replicas paused")


    def __init__(self, config: Any, components: TrainerComponents):
        self.config = config
        self.components = components
        self.actor = components.actor
        self.ref = components.ref
        self.critic = components.critic
        self.replay_buffer = components.replay_buffer
        self.checkpoint_manager = components.checkpoint_manager
        self.agent_loop_manager = components.agent_loop_manager
        self.pipeline = components.pipeline
        self.global_steps = 0
        self.kl_ctrl = get_kl_controller(config.algorithm.kl_ctrl) if config.algorithm.use_kl_in_reward else None
        self.rollout_correction = correction_config(config.algorithm.rollout_correction)
        self.reward_model = build_reward_model(config.reward.reward_model, components.tokenizer,
                                               resolve_device(config))
        self.checkpointer = TrainerCheckpointer(config.trainer, components)
        self.validator = Validator(config, components)

    # ------------------------------------------------------------------ hooks (modes override)
    def on_train_begin(self) -> Optional[dict]:
        return None

    def on_step_begin(self) -> Optional[dict]:
        return None

    def on_sample_begin(self) -> Optional[dict]:
        return None

    def on_sample_end(self) -> Optional[dict]:
        return None

    def on_step_end(self) -> Optional[dict]:
        return None

    # ------------------------------------------------------------------------------ the step
    def step(self) -> dict:
        metrics: dict[str, Any] = {}
        with timed(metrics, "step"):
            metrics.update(self.on_step_begin() or {})
            with timed(metrics, "gen"):
                self._add_batch_to_generate(metrics)
                metrics.update(self.on_sample_begin() or {})
                batch, sample_metrics = self.replay_buffer.sample(self.global_steps, "train", self.train_batch_size)
                metrics.update(sample_metrics)
                metrics.update(self.on_sample_end() or {})
            batch = self._stage("reward", self._compute_reward_colocate, batch, metrics)
            batch = self._stage("balance", self._balance_batch, batch, metrics)
            batch = self._stage("old_log_prob", self._compute_old_log_prob, batch, metrics)
            if self.ref is not None:
                batch = self._stage("ref", self._compute_ref_log_prob, batch, metrics)
            if self.critic is not None:
                batch = self._stage("values", self._compute_values, batch, metrics)
            batch = self._stage("adv", self._compute_advantage, batch, metrics)
            if self.config.algorithm.use_pf_ppo:
                batch = self._stage("pf_ppo", self._pf_ppo_resample, batch, metrics)
            if self.critic is not None:
                batch = self._stage("update_critic", self._update_critic, batch, metrics)
            if self.global_steps > self.config.trainer.critic_warmup:
                batch = self._stage("update_actor", self._update_actor, batch, metrics)
            if getattr(self.components.train_sampler, "curriculum", False):
                batch = self._stage("update_curriculum", self._update_curriculum, batch, metrics)
            if self.config.trainer.rollout_data_dir:
                batch = self._stage("dump_rollout_generations", self._dump_rollout_generations, batch, metrics)
            metrics.update(self.on_step_end() or {})
        metrics.update(compute_data_metrics(batch, self.config.actor_rollout_ref.rollout.response_length))
        metrics.update(compute_variance_proxy_metrics(batch, metrics.get("actor/grad_norm")))
        metrics.update(compute_throughput_metrics(batch, metrics["timing_s/step"]))
        return metrics

    def _stage(self, name: str, stage, batch: TensorDict, metrics: dict) -> TensorDict:
        with timed(metrics, name):
            batch = stage(batch, metrics)
        for role in (self.actor, self.ref, self.critic):  # e.g. a V0 worker's meta_info["metrics"]
            metrics.update(getattr(role, "drain_metrics", dict)())
        return batch

    @property
    def train_batch_size(self) -> int:
        return self.config.data.train_batch_size

    # ------------------------------------------------------------------------------- stages
    def _add_batch_to_generate(self, metrics: dict) -> list[str]:
        """Submit the next batch of prompts for generation and return at once."""
        self.checkpoint_manager.wake_up_replicas()
        return self.pipeline.submit(self.train_batch_size, self.global_steps)

    def _compute_reward_colocate(self, batch: TensorDict, metrics: dict) -> TensorDict:
        """Scores were computed in the agent loop as each trajectory finished; this stage is where a
        colocated reward model rescores a whole batch, and where ReMax gets its greedy baseline."""
        raw_prompts = column(batch, "raw_prompt") if "raw_prompt" in batch.keys() else None
        batch = reward_model_stage(batch, metrics, reward_model=self.reward_model,
                                   combine=self.config.reward.reward_model.combine, raw_prompts=raw_prompts)
        if self.config.algorithm.adv_estimator == "remax":
            batch["reward_baselines"] = greedy_baseline_rewards(batch, config=self.config, components=self.components,
                                                                reward_model=self.reward_model)
        return batch

    def _balance_batch(self, batch: TensorDict, metrics: dict) -> TensorDict:
        return balance_stage(batch, metrics)

    def _compute_old_log_prob(self, batch: TensorDict, metrics: dict) -> TensorDict:
        return old_log_prob_stage(batch, metrics, correction=self.rollout_correction,
                                  compute_log_prob=lambda b: self.actor.compute_log_prob(b, calculate_entropy=True))

    def _compute_ref_log_prob(self, batch: TensorDict, metrics: dict) -> TensorDict:
        batch["ref_log_prob"] = self.ref.compute_ref_log_prob(batch)
        return batch

    def _compute_values(self, batch: TensorDict, metrics: dict) -> TensorDict:
        batch["values"] = self.critic.compute_values(batch)
        return batch

    def _compute_advantage(self, batch: TensorDict, metrics: dict) -> TensorDict:
        sessions, output_index = session_layout(batch)
        return advantage_stage(batch, metrics, algorithm=self.config.algorithm, kl_ctrl=self.kl_ctrl,
                               uids=column(batch, "uid"), sessions=sessions, output_index=output_index,
                               reward_extra=column(batch, "reward_extra") if "reward_extra" in batch.keys() else None)

    def _pf_ppo_resample(self, batch: TensorDict, metrics: dict) -> TensorDict:
        return batch[pf_ppo_rows(batch, metrics, pf_ppo=self.config.algorithm.pf_ppo, seed=self.config.trainer.seed,
                                 global_steps=self.global_steps)]

    def _update_critic(self, batch: TensorDict, metrics: dict) -> TensorDict:
        metrics.update(self.critic.update_critic(batch))
        return batch

    def _update_actor(self, batch: TensorDict, metrics: dict) -> TensorDict:
        metrics.update(self.actor.update_policy(batch))
        return batch

    def _update_curriculum(self, batch: TensorDict, metrics: dict) -> TensorDict:
        """A curriculum sampler (`data.sampler`) sees the step's trained batch, as verl's does; the
        prompts it orders next are those not yet submitted (in the async modes, the pipeline's
        `num_warmup_batches` batches ahead were drawn before this update)."""
        self.components.train_sampler.update(step_batch(batch, global_steps=self.global_steps))
        return batch

    def _dump_rollout_generations(self, batch: TensorDict, metrics: dict) -> TensorDict:
        """`trainer.rollout_data_dir`: the trained samples to `<dir>/<step>.jsonl`, as verl writes them.
        In the async modes a batch mixes groups submitted at earlier steps; the file's `step` is
        still this training step, the one that trained on them."""
        dump_generations(self.config.trainer.rollout_data_dir, self.global_steps, batch, self.components.tokenizer)
        return batch

    # --------------------------------------------------------------------------- the loop
    def fit(self) -> list[dict]:
        """Train for `total_training_steps`; returns every step's metrics."""
        history: list[dict] = []
        self._resume()
        trainer_cfg = self.config.trainer
        if trainer_cfg.val_only:
            return [self._validate_only()]
        begin = self.on_train_begin() or {}
        if trainer_cfg.val_before_train and self.validator.enabled and self.global_steps == 0:
            self.components.tracking.log({**begin, **self.validator.run(self.global_steps)}, step=0)
        progress = self.components.progress(total=self.components.total_training_steps, initial=self.global_steps)
        try:
            while self.global_steps < self.components.total_training_steps:
                self.global_steps += 1
                metrics = {**self.step(), "training/global_step": self.global_steps,
                           "training/epoch": self.components.train_sampler.epoch}
                if self.validator.due(self.global_steps):
                    metrics.update(self.validator.run(self.global_steps))
                # The row before the checkpoint: a kill between the two repeats this step on resume
                # (its row twice), where the other order would lose the row for good.
                self.components.tracking.log(metrics, step=self.global_steps)
                if self.checkpointer.due(self.global_steps):
                    self.checkpointer.save(self.global_steps, self._checkpoint_state())
                history.append(metrics)
                progress.update(1)
        finally:
            progress.close()
        return history

    def _validate_only(self) -> dict:
        """`trainer.val_only`: validate the initial (or resumed) policy once, log it, train nothing."""
        metrics = self.validator.run(self.global_steps)
        self.components.tracking.log(metrics, step=self.global_steps)
        return metrics

    def _checkpoint_state(self) -> dict:
        """What of the trainer's own state a checkpoint keeps (the pipeline and roles save theirs)."""
        return {"kl_coef": self.kl_ctrl.value} if self.kl_ctrl is not None else {}

    def _resume(self) -> None:
        state = self.checkpointer.maybe_resume()
        if state is None:
            return
        self.global_steps = int(state["global_steps"])
        if self.kl_ctrl is not None and "kl_coef" in state:
            self.kl_ctrl.value = float(state["kl_coef"])
