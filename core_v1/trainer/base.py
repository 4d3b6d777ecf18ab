"""`PPOTrainer`: one training step as a list of named stages, plus five lifecycle hooks.

    step():  _add_batch_to_generate -> replay_buffer.sample -> _compute_reward_colocate
             -> _balance_batch -> _compute_old_log_prob -> [_compute_ref_log_prob] -> [_compute_teacher_log_prob]
             -> [_compute_values] -> _compute_advantage -> [_pf_ppo_resample] -> [_update_critic]
             -> _update_actor -> [_update_curriculum] -> [_dump_rollout_generations] -> release
    hooks:   on_train_begin, on_step_begin, on_sample_begin, on_sample_end, on_step_end

Every stage has the same shape: `(batch, metrics) -> batch`, where the batch is the step's
`BatchMeta` (`core_v1.batch.meta`): keys of the rows in the transfer store and per-row scalars,
never token tensors. The engines' stages run on the training ranks, which read and write the
rows' fields; a per-row advantage estimator runs here on the rows' scores; a token-level step
(another estimator, KL in the reward, rollout correction, verl's variance proxies) runs as a
stage function on rank 0 (`_on_rank`), so its tensors go from the store to that rank, not here.
Only the stages that work on token ids in the driver (a reward model, ReMax's baseline, the
dumps, a curriculum update) read the rows' tensors here (`_read`). Each stage runs under a timer
of its own name. A trainer mode (`sync`, `colocate_async`, `separate_async`, or a user's,
registered with `@register_trainer`) is a subclass that overrides hooks to decide when generation runs and when weights move; a hook that
has something to report returns a metrics dict. Any stage can be overridden the same way.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.algorithms.advantages.registry import is_per_row_estimator
from core_v1.algorithms.kl import get_kl_controller
from core_v1.batch.layout import column, stage_batch
from core_v1.batch.meta import BatchMeta
from core_v1.config.schema import ConfigError
from core_v1.data.samplers import step_batch
from core_v1.trainer.checkpointing import TrainerCheckpointer
from core_v1.trainer.components import TrainerComponents
from core_v1.trainer.generation_dump import dump_generations
from core_v1.trainer.metrics import compute_data_metrics, compute_throughput_metrics, timed, variance_proxy_stage
from core_v1.trainer.off_policy import correction_config, rollout_correction_stage, rollout_log_probs_as_old
from core_v1.trainer.remax import REMAX_OBJECTS, greedy_baseline_rewards
from core_v1.trainer.stages import advantage_stage, outcome_advantages, pf_ppo_rows, reward_model_stage
from core_v1.trainer.validation import Validator
from core_v1.workers.group import stage_task
from core_v1.workers.rank import run_stage_on_rows


class PPOTrainer:
    partial_rollout = False  # whether aborted requests resume on new weights (async modes)
    replay_buffer_cls = None  # None: the sync ReplayBuffer (or a custom sampler from config)

    @classmethod
    def config_problems(cls, config: Any) -> list[str]:
        """Every reason this mode cannot run `config`, each naming the fix (empty: it can). A mode
        declares its constraints here, extending its parent's; the validation pass
        (`core_v1.trainer.constraints`) and the dry run list them before anything starts."""
        if config.algorithm.adv_estimator == "remax" and cls.partial_rollout:
            return [
                f"algorithm.adv_estimator=remax needs trainer.v1.trainer_mode=sync, not "
                f"{config.trainer.v1.trainer_mode}: its greedy baseline is generated mid-step, while "
                "an async mode holds the replicas paused"
            ]
        return []

    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raise one ConfigError naming every problem `config_problems` finds."""
        problems = cls.config_problems(config)
        if problems:
            raise ConfigError("; ".join(problems))

    def __init__(self, config: Any, components: TrainerComponents):
        self.config = config
        self.components = components
        self.actor = components.actor
        self.ref = components.ref
        self.teacher = components.teacher
        self.critic = components.critic
        self.replay_buffer = components.replay_buffer
        self.checkpoint_manager = components.checkpoint_manager
        self.agent_loop_manager = components.agent_loop_manager
        self.pipeline = components.pipeline
        self.global_steps = 0
        self.kl_ctrl = get_kl_controller(config.algorithm.kl_ctrl) if config.algorithm.use_kl_in_reward else None
        self.rollout_correction = correction_config(config.algorithm.rollout_correction)
        self.reward_model = components.reward_model  # built by the composition root (setup.build_components)
        self.checkpointer = TrainerCheckpointer(config.trainer, components)
        self.validator = Validator(config, components)

    # ------------------------------------------------------------------ hooks (modes override)
    # The two hooks that decide when generation stops and when weights move default to sync's
    # choices, so a mode that leaves one out still trains on-policy rather than generating with
    # stale weights; a mode that wants otherwise says so by overriding it.
    def on_train_begin(self) -> Optional[dict]:
        """Before the first step (async modes fill their pipeline here). Default: nothing."""
        return None

    def on_step_begin(self) -> Optional[dict]:
        """Default: nothing."""
        return None

    def on_sample_begin(self) -> Optional[dict]:
        """Default: nothing."""
        return None

    def on_sample_end(self) -> Optional[dict]:
        """The step's batch is in. Default (sync's): put the replicas to sleep, their memory goes to
        training; a mode whose generation runs on during training overrides this."""
        self.checkpoint_manager.sleep_replicas()
        return None

    def on_step_end(self) -> Optional[dict]:
        """The step has trained. Default (sync's): send its weights to the replicas, so the next
        batch is sampled by them; a mode that syncs less often overrides this."""
        return self.checkpoint_manager.update_weights(self.global_steps)

    # ------------------------------------------------------------------------------ the step
    def step(self) -> dict:
        metrics: dict[str, Any] = {}
        with timed(metrics, "step"):
            metrics.update(self.on_step_begin() or {})
            with timed(metrics, "gen"):
                self._add_batch_to_generate(metrics)
                metrics.update(self.on_sample_begin() or {})
                sampled, sample_metrics = self.replay_buffer.sample(self.global_steps, "train", self.train_batch_size)
                metrics.update(sample_metrics)
                metrics.update(self.on_sample_end() or {})
            batch = self._stage("reward", self._compute_reward_colocate, sampled, metrics)
            batch = self._stage("balance", self._balance_batch, batch, metrics)
            batch = self._stage("old_log_prob", self._compute_old_log_prob, batch, metrics)
            if self.ref is not None:
                batch = self._stage("ref", self._compute_ref_log_prob, batch, metrics)
            if self.teacher is not None:
                batch = self._stage("teacher", self._compute_teacher_log_prob, batch, metrics)
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
            metrics.update(self._batch_metrics(batch, metrics))
            self.replay_buffer.release(sampled)
            metrics.update(self.on_step_end() or {})
        metrics.update(compute_throughput_metrics(batch, metrics["timing_s/step"]))
        return metrics

    def _stage(self, name: str, stage, batch: BatchMeta, metrics: dict) -> BatchMeta:
        with timed(metrics, name):
            batch = stage(batch, metrics)
        for role in (self.actor, self.ref, self.critic):  # e.g. a V0 worker's meta_info["metrics"]
            metrics.update(getattr(role, "drain_metrics", dict)())
        return batch

    def _batch_metrics(self, batch: BatchMeta, metrics: dict) -> dict:
        data = compute_data_metrics(batch, self.config.actor_rollout_ref.rollout.response_length)
        if "sum_pi_squared" in batch.fields:  # verl's variance proxies are token-level
            self._on_rank(
                batch,
                data,
                variance_proxy_stage,
                fields=("old_log_probs", "sum_pi_squared", "rollout_is_weights", "advantages"),
                grad_norm=metrics.get("actor/grad_norm"),
            )
        return data

    @property
    def train_batch_size(self) -> int:
        return self.config.data.train_batch_size

    # ------------------------------------------------------- stages over a batch's tensors
    def _on_rank(
        self,
        batch: BatchMeta,
        metrics: dict,
        stage,
        *,
        fields: Sequence[str] = (),
        outputs: Sequence[str] = (),
        row_totals: Sequence[str] = (),
        **kwargs: Any,
    ) -> tuple[BatchMeta, dict]:
        """Run a PPO stage function over the batch's padded tensors on a training rank (rank 0), which
        reads the rows' `fields` from the store and writes the stage's `outputs` back. Returns the
        batch (with the outputs' per-row summaries) and the keyword arguments as the stage left them
        (an adaptive KL controller with this batch's update); the stage's metrics go to `metrics`."""
        columns = {name: batch.column(name) for name in ("score", "reward_baselines", "uid") if batch.has(name)}
        args = dict(
            fields=self._stored(batch, fields),
            per_row=self._outcomes(batch),
            columns=columns,
            outputs=tuple(outputs),
            row_totals=tuple(row_totals),
        )
        workers = self.components.workers
        if workers is not None:
            stage_metrics, summaries, kwargs = workers.run_stage(stage, batch, **args, **kwargs)
        else:  # components built without training ranks (a harness): the same work, here
            task = stage_task(
                batch, args["fields"], args["per_row"], outputs, row_totals, self.replay_buffer.pad_token_id
            )
            stage_metrics, summaries, kwargs = run_stage_on_rows(self.components.store, task, stage, columns, kwargs)
        metrics.update(stage_metrics)
        batch.add_summaries(summaries)
        written = [name for name in outputs if f"{name}/sum" in summaries and name != "response_mask"]
        return batch.with_fields(written), kwargs

    @staticmethod
    def _stored(batch: BatchMeta, fields: Sequence[str]) -> list[str]:
        """Those of `fields` the batch's rows hold (`response_logprobs` where every row has them)."""
        rollout = all(batch.columns.get("has_logprobs", [False]))
        return [f for f in fields if f in batch.fields or (f == "response_logprobs" and rollout)]

    def _read(self, batch: BatchMeta, fields: Sequence[str] = (), objects: Iterable[str] = ()) -> TensorDict:
        """The batch's padded tensors in the driver, for the stages that work there on token ids: a
        reward model's rescoring, ReMax's greedy baseline, the dumps, a curriculum update (the only
        per-token reads a V1 driver makes, counted by `core_v1.transfer_store.traffic`), with the
        handle's columns and the object fields `objects` (those the rows hold) as object columns."""
        columns = {name: values for name, values in batch.columns.items() if "/" not in name}  # not summaries
        wanted = sorted(name for name in set(objects) & batch.objects if name not in columns)
        if wanted:
            columns.update(self.components.store.get_objects(batch.partition, batch.keys, wanted))
        return stage_batch(
            self.components.store,
            batch.partition,
            batch.keys,
            pad_token_id=self.replay_buffer.pad_token_id,
            fields=self._stored(batch, fields),
            per_row=self._outcomes(batch),
            columns=columns,
        )

    # ------------------------------------------------------------------------------- stages
    def _add_batch_to_generate(self, metrics: dict) -> list[str]:
        """Submit the next batch of prompts for generation and return at once."""
        self.checkpoint_manager.wake_up_replicas()
        return self.pipeline.submit(self.train_batch_size, self.global_steps)

    def _compute_reward_colocate(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """Scores were computed in the agent loop as each trajectory finished; this stage is where a
        colocated reward model rescores a whole batch, and where ReMax gets its greedy baseline."""
        if self.reward_model is None and self.config.algorithm.adv_estimator != "remax":
            return batch
        tensors = self._read(batch, objects=REMAX_OBJECTS + (self.config.data.reward_fn_key,))
        raw_prompts = column(tensors, "raw_prompt") if "raw_prompt" in tensors.keys() else None
        tensors = reward_model_stage(
            tensors,
            metrics,
            reward_model=self.reward_model,
            combine=self.config.reward.reward_model.combine,
            raw_prompts=raw_prompts,
        )
        batch.set_column("score", tensors["token_level_scores"].sum(-1).tolist())
        if self.config.algorithm.adv_estimator == "remax":
            baselines = greedy_baseline_rewards(
                tensors, config=self.config, components=self.components, reward_model=self.reward_model
            )
            batch.set_column("reward_baselines", baselines.tolist())
        return batch

    def _balance_batch(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """Report the batch's lengths; the ranks get token-balanced shards (`trainer.balance_batch`)."""
        metrics["global_seqlen/mean"] = sum(batch.total_lengths) / max(len(batch), 1)
        return batch

    def _compute_old_log_prob(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """`old_log_probs` and `entropys` (and `sum_pi_squared`) on the ranks, then rollout correction.
        Bypass mode takes the rollout's own log-probs as the behaviour policy and skips the pass."""
        correction = self.rollout_correction
        if correction.bypass_mode and all(batch.columns.get("has_logprobs", [False])):
            return self._on_rank(
                batch, metrics, rollout_log_probs_as_old, fields=("response_logprobs",), outputs=("old_log_probs",)
            )[0]
        batch.add_summaries(self.actor.compute_log_prob(batch, calculate_entropy=True))
        batch = batch.with_fields(f for f in ("old_log_probs", "entropys", "sum_pi_squared") if batch.has(f"{f}/sum"))
        if batch.has("rollout_logprob_gap/sum"):
            # The rollout engine and the trainer should compute the same policy; a gap here is
            # numerical mismatch (or stale weights), which off-policy corrections then have to absorb.
            metrics["training/rollout_actor_logprob_diff/mean"] = sum(batch.column("rollout_logprob_gap/sum")) / max(
                sum(batch.column("model_tokens")), 1
            )
        if correction.rollout_is is None and correction.rollout_rs is None:
            return batch
        return self._on_rank(
            batch,
            metrics,
            rollout_correction_stage,
            fields=("old_log_probs", "response_logprobs"),
            outputs=("rollout_is_weights", "response_mask"),
            correction=correction,
        )[0]

    def _compute_ref_log_prob(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        batch.add_summaries(self.ref.compute_ref_log_prob(batch))
        return batch.with_fields(["ref_log_prob"])

    def _compute_teacher_log_prob(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """On-policy distillation: each row's `teacher_log_prob` from its teacher, and the mean over the
        sampled tokens of log pi_old - log pi_teacher, an estimate of KL(student || teacher)."""
        batch.add_summaries(self.teacher.compute_teacher_log_prob(batch))
        tokens = max(sum(batch.column("model_tokens")), 1)
        metrics["distillation/teacher_kl"] = (
            sum(batch.column("old_log_probs/sum")) - sum(batch.column("teacher_log_prob/sum"))
        ) / tokens
        return batch.with_fields(list(self.teacher.fields))

    def _compute_values(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        batch.add_summaries(self.critic.compute_values(batch))
        return batch.with_fields(["values"])

    def _compute_advantage(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """Per-row estimators on the rows' scores in the driver; any other reads the fields it needs."""
        algorithm = self.config.algorithm
        sessions, output_index = batch.sessions()
        reward_extra = batch.column("reward_extra") if batch.has("reward_extra") else None
        if self.kl_ctrl is None and is_per_row_estimator(algorithm.adv_estimator):
            advantages, returns = outcome_advantages(
                batch.column("score"),
                batch.column("model_tokens"),
                metrics,
                algorithm=algorithm,
                uids=batch.column("uid"),
                sessions=sessions,
                output_index=output_index,
                reward_extra=reward_extra,
            )
            batch.set_column("advantage", advantages)
            batch.set_column("return", returns)
            batch.set_column("reward", batch.column("score"))
            return batch
        batch, stage_kwargs = self._on_rank(
            batch,
            metrics,
            advantage_stage,
            fields=sorted(batch.fields),
            outputs=("advantages", "returns", "token_level_rewards"),
            row_totals=("token_level_rewards",),
            algorithm=algorithm,
            kl_ctrl=self.kl_ctrl,
            uids=batch.column("uid"),
            sessions=sessions,
            output_index=output_index,
            reward_extra=reward_extra,
        )
        self.kl_ctrl = stage_kwargs["kl_ctrl"]  # an adaptive controller updated by this batch's KL
        batch.set_column("reward", batch.column("token_level_rewards/row_total"))
        return batch

    def _pf_ppo_resample(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        scores = torch.tensor(batch.column("score"), dtype=torch.float32)[:, None]
        return batch.select(
            pf_ppo_rows(
                {"token_level_scores": scores},
                metrics,
                pf_ppo=self.config.algorithm.pf_ppo,
                seed=self.config.trainer.seed,
                global_steps=self.global_steps,
            ).tolist()
        )

    def _update_critic(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        metrics.update(self.critic.update_critic(batch, per_row=self._outcomes(batch)))
        return batch

    def _update_actor(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        metrics.update(self.actor.update_policy(batch, per_row=self._outcomes(batch)))
        return batch

    @staticmethod
    def _outcomes(batch: BatchMeta) -> dict[str, list]:
        """A per-row estimator's advantage and return of each row, which the ranks spread over its tokens."""
        return {
            name: batch.column(column)
            for name, column in (("advantages", "advantage"), ("returns", "return"))
            if batch.has(column) and name not in batch.fields
        }

    def _update_curriculum(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """A curriculum sampler (`data.sampler`) sees the step's trained batch, as verl's does; the
        prompts it orders next are those not yet submitted (in the async modes, the pipeline's
        `num_warmup_batches` batches ahead were drawn before this update)."""
        tensors = self._read(batch, sorted(batch.fields), objects=batch.objects)
        self.components.train_sampler.update(step_batch(tensors, global_steps=self.global_steps))
        return batch

    def _dump_rollout_generations(self, batch: BatchMeta, metrics: dict) -> BatchMeta:
        """`trainer.rollout_data_dir`: the trained samples to `<dir>/<step>.jsonl`, as verl writes them.
        In the async modes a batch mixes groups submitted at earlier steps; the file's `step` is
        still this training step, the one that trained on them."""
        dump_generations(
            self.config.trainer.rollout_data_dir,
            self.global_steps,
            self._read(batch, objects=("reward_model",)),
            self.components.tokenizer,
        )
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
                metrics = {
                    **self.step(),
                    "training/global_step": self.global_steps,
                    "training/epoch": self.components.train_sampler.epoch,
                }
                if self.validator.due(self.global_steps):
                    metrics.update(self.validator.run(self.global_steps))
                # The row before the checkpoint: a kill between the two repeats this step on resume
                # (the resume drops the rows after its step), where the other order would lose the row.
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
