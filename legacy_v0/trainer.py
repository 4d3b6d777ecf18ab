"""`RayPPOTrainer`: the V0 synchronous PPO loop, one controller and one padded `DataProto`.

Each step takes a batch of prompts and passes one `DataProto` through every stage, each under a
timer of its own name (the names V1 uses):

    gen -> reward -> balance -> old_log_prob -> [ref] -> [values] -> adv -> [pf_ppo] -> [update_critic]
        -> update_actor (after `trainer.critic_warmup` steps)

It is deliberately the same training as V1 `sync`, number for number: the workers run
`core_v1.workers`' engines and `core_v1.rollout`'s server; advantages, KL and metrics are
`core_v1.algorithms` and `core_v1.trainer.metrics`; prompts are numbered and sampled exactly as
V1's agent-loop manager does it (the same uid for the same submission, the same seed for each
sample), and the batch has V1's row order and padding. Agent loops are V1's own,
run in the worker's rollout (`legacy_v0.workers`). What V0 lacks are V1's decoupled parts: no
transfer store, no multi-output agent loops, no asynchronous modes.

Everything runs in this process (the name is verl's; no Ray is needed). Workers are built from
`role_worker_mapping`, so a subclass of `ActorRolloutRefWorker` given there (or by a
`legacy_v0.main_ppo.TaskRunner` subclass) is the one the loop calls.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any, Callable, Optional

import numpy as np
import torch
from omegaconf import DictConfig

from core_v1.agent_loop.base import encode_chat
from core_v1.algorithms import get_kl_controller
from core_v1.config import PPOConfig, to_config
from core_v1.data import PromptDataset, PromptSampler, build_dataset
from core_v1.trainer.checkpointing import (
    CheckpointDirectory,
    checkpoint_due,
    load_resume_checkpoint,
    load_roles,
    read_trainer_state,
    write_checkpoint,
)
from core_v1.batch.layout import session_layout
from core_v1.trainer.generation_dump import dump_generations
from core_v1.trainer.off_policy import correction_config
from core_v1.trainer.metrics import (
    compute_data_metrics,
    compute_throughput_metrics,
    compute_variance_proxy_metrics,
    timed,
)
from core_v1.trainer.remax import first_row_of_each_group, group_score_per_row
from core_v1.trainer.replay_buffer import AllSamplesFailedError, trajectory_staleness_metrics
from core_v1.trainer.validation import validation_due, validation_enabled, validation_metrics
from core_v1.trainer.stages import (
    advantage_stage,
    balance_stage,
    estimate_advantages,
    in_reward_kl,
    old_log_prob_stage,
    pf_ppo_rows,
    reward_model_stage,
)
from core_v1.reward.loop import reward_extra_values
from core_v1.reward.reward_model import build_reward_model
from core_v1.device import resolve_device, share_cores_with_the_replicas
from core_v1.trainer.setup import total_steps
from core_v1.utils.seeding import derive_uid
from core_v1.utils.tracking import Tracking
from legacy_v0 import warn_deprecated
from legacy_v0.startup_checks import refuse_agent_loops
from legacy_v0.protocol import DataProto, object_column
from legacy_v0.reward import compute_reward, load_reward_manager, score_generated
from legacy_v0.workers import (
    AGENT_LOOP_COLUMNS,
    GENERATED_COLUMNS,
    ActorRolloutRefWorker,
    CriticWorker,
    left_pad,
    load_tokenizer,
    pad_token_id,
)

warn_deprecated(stacklevel=3)

_GEN_INPUT_KEYS = ["input_ids", "attention_mask", "position_ids"]


class Role(enum.Enum):
    """Which worker a `role_worker_mapping` entry builds (verl's names)."""

    Actor = 0
    Rollout = 1
    ActorRollout = 2
    Critic = 3
    RefPolicy = 4
    RewardModel = 5
    ActorRolloutRef = 6


def default_role_worker_mapping() -> dict[Role, type]:
    return {Role.ActorRollout: ActorRolloutRefWorker, Role.RefPolicy: ActorRolloutRefWorker, Role.Critic: CriticWorker}


def as_ppo_config(config: PPOConfig | DictConfig) -> PPOConfig:
    """The typed config from a composed DictConfig (what `core_v1.main_ppo` hands over) or as given."""
    return config if isinstance(config, PPOConfig) else to_config(config)


# ------------------------------------------------------------------------- advantages and KL
def apply_kl_penalty(data: DataProto, kl_ctrl: Any, kl_penalty: str = "kl") -> tuple[DataProto, dict]:
    """`token_level_rewards = token_level_scores - beta * KL(old || ref)` (verl's in-reward KL), V1's stage."""
    metrics: dict = {}
    in_reward_kl(data.batch, metrics, kl_ctrl=kl_ctrl, kl_penalty=kl_penalty)
    return data, metrics


def compute_advantage(
    data: DataProto,
    adv_estimator: str,
    gamma: float = 1.0,
    lam: float = 1.0,
    num_repeat: int = 1,
    norm_adv_by_std_in_grpo: bool = True,
    config: Any = None,
    **_: Any,
) -> DataProto:
    """Write `advantages` and `returns` [B, R] with the estimator registered as `adv_estimator`
    (V1's `estimate_advantages`).

    Reads `token_level_rewards`, `response_mask`, the `uid` column (prompt groups), and
    `values` / `reward_baselines` where present. `num_repeat` is verl's and unused: groups come
    from `uid`. `config` (the algorithm section) gives GDPO its `gdpo_reward_keys/weights`; their
    values come from the `reward_extra` column, or from columns named by the keys, as verl keeps them.
    """
    sessions, output_index = session_layout(data.non_tensor_batch, len(data))
    keys = _section_value(config, "gdpo_reward_keys")
    estimate_advantages(
        data.batch,
        adv_estimator=adv_estimator,
        uids=data.non_tensor_batch.get("uid"),
        sessions=sessions,
        output_index=output_index,
        gamma=gamma,
        lam=lam,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        reward_extra=_reward_extra_rows(data.non_tensor_batch, keys, len(data)),
        gdpo_reward_keys=keys,
        gdpo_reward_weights=_section_value(config, "gdpo_reward_weights"),
    )
    return data


def _section_value(section: Any, key: str) -> Any:
    """`section.key` of a mapping (DictConfig, dict) or a typed section; None when absent."""
    return section.get(key) if isinstance(section, Mapping) else getattr(section, key, None)


def _reward_extra_rows(columns: dict, keys: Optional[Sequence[str]], rows: int) -> Optional[list]:
    """The per-row reward extras: the `reward_extra` column, else verl's layout of one column per key."""
    if "reward_extra" in columns:
        return list(columns["reward_extra"])
    if keys and all(key in columns for key in keys):
        return [{key: columns[key][row] for key in keys} for row in range(rows)]
    return None


# ------------------------------------------------------------------------------- the trainer
class RayPPOTrainer:
    """The V0 PPO trainer (see the module docstring).

    Args:
        config: the run's config: a typed `PPOConfig` or the composed `DictConfig`.
        tokenizer: default: loaded from `actor_rollout_ref.model.tokenizer_path` or the model.
        role_worker_mapping: `{Role: worker class}`; defaults to the V0 workers of this package.
        resource_pool_manager, ray_worker_group_cls, processor, collate_fn, device_name: verl's
            arguments, accepted so old callers work; the V0 trainer runs every worker in this
            process on `trainer.device`, and prompts are text.
        reward_fn, val_reward_fn: reward managers; default: `load_reward_manager(config, ...)`.
        train_dataset, val_dataset: `core_v1.data.PromptDataset`s; default: `data.train_files`,
            `data.val_files`. train_sampler: a `PromptSampler` (default: seeded from the config).
    """

    def __init__(
        self,
        config: PPOConfig | DictConfig,
        tokenizer: Any = None,
        role_worker_mapping: Optional[dict[Role, type]] = None,
        resource_pool_manager: Any = None,
        ray_worker_group_cls: Any = None,
        processor: Any = None,
        reward_fn: Optional[Callable] = None,
        val_reward_fn: Optional[Callable] = None,
        train_dataset: Optional[PromptDataset] = None,
        val_dataset: Optional[PromptDataset] = None,
        collate_fn: Any = None,
        train_sampler: Optional[PromptSampler] = None,
        device_name: Optional[str] = None,
    ):
        warn_deprecated()
        self.config = as_ppo_config(config)
        cfg = self.config
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(cfg)
        self.role_worker_mapping = {**default_role_worker_mapping(), **(role_worker_mapping or {})}
        self.reward_fn = reward_fn or load_reward_manager(cfg, self.tokenizer, num_examine=0)
        self.val_reward_fn = val_reward_fn or load_reward_manager(cfg, self.tokenizer, num_examine=1)
        self.reward_model = build_reward_model(cfg.reward.reward_model, self.tokenizer, resolve_device(cfg))
        self.train_dataset = train_dataset or build_dataset(cfg.data, cfg.data.train_files, self.tokenizer)
        if val_dataset is None and cfg.data.val_files:
            val_dataset = build_dataset(cfg.data, cfg.data.val_files, self.tokenizer, train=False)
        self.val_dataset = val_dataset
        refuse_agent_loops(cfg, [d for d in (self.train_dataset, val_dataset) if d is not None])
        seed = cfg.data.seed if cfg.data.seed is not None else cfg.trainer.seed
        self.train_sampler = train_sampler or PromptSampler(
            self.train_dataset, cfg.data.train_batch_size, cfg.data.shuffle, seed
        )
        self.total_training_steps = total_steps(cfg, self.train_sampler)
        self.use_critic = cfg.use_critic
        self.use_reference_policy = cfg.use_reference_policy
        self.kl_ctrl_in_reward = get_kl_controller(cfg.algorithm.kl_ctrl) if cfg.algorithm.use_kl_in_reward else None
        self.rollout_correction = correction_config(cfg.algorithm.rollout_correction)
        self.global_steps = 0
        # Prompts are numbered across train and val in submission order, as V1 numbers them, so
        # the same prompt gets the same uid (and so the same sampling seeds) on both trainers.
        self.submitted_prompts = 0
        self.actor_rollout_wg: Optional[ActorRolloutRefWorker] = None
        self.ref_policy_wg: Optional[ActorRolloutRefWorker] = None
        self.critic_wg: Optional[CriticWorker] = None
        self.logger: Optional[Tracking] = None

    # ---------------------------------------------------------------------------- workers
    def init_workers(self) -> None:
        """Build and load the workers, in V1's order after V1's seed (the critic's fresh value
        head draws from the same RNG state, so both trainers start from the same critic)."""
        torch.manual_seed(self.config.trainer.seed)
        share_cores_with_the_replicas(self.config)  # V0 trains in this process
        self.actor_rollout_wg = self.role_worker_mapping[Role.ActorRollout](self.config, role="actor_rollout")
        self.actor_rollout_wg.init_model()
        self.actor_rollout_wg.set_total_training_steps(self.total_training_steps)
        if self.use_reference_policy:
            self.ref_policy_wg = self.role_worker_mapping[Role.RefPolicy](self.config, role="ref")
            self.ref_policy_wg.init_model()
        if self.use_critic:
            self.critic_wg = self.role_worker_mapping[Role.Critic](self.config)
            self.critic_wg.init_model()
            self.critic_wg.set_total_training_steps(self.total_training_steps)

    def shutdown(self) -> None:
        for worker in (self.actor_rollout_wg, self.ref_policy_wg, self.critic_wg):
            if worker is not None:
                worker.shutdown()

    # ---------------------------------------------------------------------------- the loop
    def fit(self) -> list[dict]:
        """Train for `total_training_steps` (validating and checkpointing as configured); returns
        every step's metrics, which are also logged (`trainer.logger`, e.g. `metrics.jsonl`)."""
        if self.actor_rollout_wg is None:
            self.init_workers()
        trainer_cfg = self.config.trainer
        self.logger = Tracking(
            trainer_cfg.logger, trainer_cfg.default_local_dir, trainer_cfg.project_name, trainer_cfg.experiment_name
        )
        history: list[dict] = []
        progress = self._progress_bar()
        try:
            self._load_checkpoint()
            progress.update(self.global_steps)
            if self._validation_enabled and trainer_cfg.val_before_train and self.global_steps == 0:
                self.logger.log(self._validate(), step=0)
            if trainer_cfg.val_only:
                return history
            while self.global_steps < self.total_training_steps:
                self.global_steps += 1
                metrics = {
                    **self.train_step(self.train_sampler.next_batch()),
                    "training/global_step": self.global_steps,
                    "training/epoch": self.train_sampler.epoch,
                }
                if self._validation_due():
                    metrics.update(self._validate())
                self.logger.log(metrics, step=self.global_steps)  # before the checkpoint, as on V1
                if self._checkpoint_due():
                    self._save_checkpoint()
                history.append(metrics)
                progress.update(1)
        finally:
            progress.close()
            self.logger.close()
        return history

    def train_step(self, rows: list[dict]) -> dict:
        """One PPO step on a batch of dataset rows; returns the step's metrics."""
        metrics: dict[str, Any] = {}
        with timed(metrics, "step"):
            with timed(metrics, "gen"):
                batch = self._generate(rows, metrics)
            batch = self._stage("reward", self._compute_reward, batch, metrics)
            batch = self._stage("balance", self._balance_batch, batch, metrics)
            batch = self._stage("old_log_prob", self._compute_old_log_prob, batch, metrics)
            if self.use_reference_policy:
                batch = self._stage("ref", self._compute_ref_log_prob, batch, metrics)
            if self.use_critic:
                batch = self._stage("values", self._compute_values, batch, metrics)
            batch = self._stage("adv", self._compute_advantage, batch, metrics)
            if self.config.algorithm.use_pf_ppo:
                batch = self._stage("pf_ppo", self._pf_ppo_resample, batch, metrics)
            if self.use_critic:
                batch = self._stage("update_critic", self._update_critic, batch, metrics)
            if self.global_steps > self.config.trainer.critic_warmup:
                batch = self._stage("update_actor", self._update_actor, batch, metrics)
            if self.config.trainer.rollout_data_dir:
                batch = self._stage("dump_rollout_generations", self._dump_rollout_generations, batch, metrics)
        view = batch.to_tensordict()
        metrics.update(compute_data_metrics(view, self.config.actor_rollout_ref.rollout.response_length))
        metrics.update(compute_variance_proxy_metrics(view, metrics.get("actor/grad_norm")))
        metrics.update(compute_throughput_metrics(view, metrics["timing_s/step"]))
        # A curriculum sampler (data.sampler) sees each finished step's batch, as verl's does.
        update_sampler = getattr(self.train_sampler, "update", None)
        if update_sampler is not None:
            update_sampler(batch)
        return metrics

    def _stage(
        self, name: str, stage: Callable[[DataProto, dict], DataProto], batch: DataProto, metrics: dict
    ) -> DataProto:
        with timed(metrics, name):
            return stage(batch, metrics)

    # -------------------------------------------------------------------------------- stages
    def _generate(self, rows: list[dict], metrics: dict) -> DataProto:
        """Number the prompts, repeat each `rollout.n` times, generate every sample."""
        batch = self._prompt_groups(rows, "train", self.config.actor_rollout_ref.rollout.n)
        return self._generate_for(batch, metrics)

    def _generate_for(self, batch: DataProto, metrics: dict) -> DataProto:
        gen_input = batch.pop(batch_keys=_GEN_INPUT_KEYS)
        gen_input.non_tensor_batch = dict(batch.non_tensor_batch)
        gen_input.meta_info = dict(batch.meta_info)
        output = _take_metrics(self.actor_rollout_wg.generate_sequences(gen_input), metrics)
        batch.batch = None
        # What the rollout reports replaces a dataset column of the same name, as in V1's trajectory
        # rows: a row's `agent_name` None (the default loop) becomes the loop that ran it.
        for key in set(GENERATED_COLUMNS + AGENT_LOOP_COLUMNS) & set(output.non_tensor_batch):
            batch.non_tensor_batch.pop(key, None)
        return batch.union(output)

    def _compute_reward(self, batch: DataProto, metrics: dict) -> DataProto:
        """Score with the reward manager (an agent loop's own score stands, as on V1: `score_generated`);
        samples whose agent loop or score raised leave the batch (counted, as V1's replay buffer
        counts and evicts them); then V1's reward-model stage and ReMax's baseline."""
        reward_tensor, extra_info, failed = score_generated(batch, self.reward_fn)
        batch.batch["token_level_scores"] = reward_tensor
        batch.non_tensor_batch["reward_extra"] = object_column(_extras_per_row(extra_info, len(batch)))
        batch = self._drop_failed_samples(batch, failed, metrics)
        columns = batch.non_tensor_batch
        batch.batch = reward_model_stage(
            batch.batch,
            metrics,
            reward_model=self.reward_model,
            combine=self.config.reward.reward_model.combine,
            raw_prompts=columns.get("raw_prompt"),
        )
        if self.config.algorithm.adv_estimator == "remax":
            batch.batch["reward_baselines"] = self._greedy_baseline_rewards(batch)
        return batch

    def _drop_failed_samples(self, batch: DataProto, failed: dict[int, str], metrics: dict) -> DataProto:
        """Train on the samples whose agent loop and score did not raise (`failed`: row -> error); report
        `rollout/failed_samples` and the staleness of what is trained, with the functions V1's replay
        buffer uses. Only the failed sample is dropped; the rest of its group trains, as on V1."""
        metrics["rollout/failed_samples"] = len(failed)
        if len(failed) == len(batch):
            raise AllSamplesFailedError(
                f"all {len(batch)} samples of step {self.global_steps} failed (their agent "
                f"loop or reward function raised); the first error: "
                f"{failed[min(failed)]}"
            )
        if failed:
            batch = batch.select_idxs([row for row in range(len(batch)) if row not in failed])
        # V1 numbers weight versions by step, the V0 worker by update (none during critic warm-up):
        # compare each sample's versions with those of the policy that trains on it.
        metrics.update(trajectory_staleness_metrics(_version_tags(batch), self.actor_rollout_wg.weight_version + 1))
        return batch

    def _greedy_baseline_rewards(self, batch: DataProto) -> torch.Tensor:
        """ReMax's baseline: the reward of a greedy response to each prompt, one per row [B]."""
        uids = list(batch.non_tensor_batch["uid"])
        first_rows = first_row_of_each_group(uids)
        columns = {
            key: column[first_rows]
            for key, column in batch.non_tensor_batch.items()
            if key not in GENERATED_COLUMNS + AGENT_LOOP_COLUMNS
        }  # the greedy generation writes its own
        greedy_input = DataProto(non_tensor_batch=columns, meta_info={"do_sample": False})
        greedy = greedy_input.union(_take_metrics(self.actor_rollout_wg.generate_sequences(greedy_input), {}))
        reward_tensor, _ = compute_reward(greedy, self.reward_fn)
        greedy.batch["token_level_scores"] = reward_tensor  # scored as the samples are, reward model included
        scores = reward_model_stage(
            greedy.batch,
            {},
            reward_model=self.reward_model,
            combine=self.config.reward.reward_model.combine,
            raw_prompts=greedy.non_tensor_batch.get("raw_prompt"),
        )["token_level_scores"]
        return group_score_per_row(uids, first_rows, scores.sum(-1).tolist())

    def _balance_batch(self, batch: DataProto, metrics: dict) -> DataProto:
        batch.batch = balance_stage(batch.batch, metrics)
        return batch

    def _compute_old_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        def worker_log_probs(_tensors):
            output = _take_metrics(self.actor_rollout_wg.compute_log_prob(batch), metrics)
            batch.union(output)  # verl's union: whatever else a worker subclass returns stays on the batch
            return output.batch["old_log_probs"], output.batch.get("entropys", None)

        batch.batch = old_log_prob_stage(
            batch.batch, metrics, compute_log_prob=worker_log_probs, correction=self.rollout_correction
        )
        return batch

    def _compute_ref_log_prob(self, batch: DataProto, metrics: dict) -> DataProto:
        return batch.union(_take_metrics(self.ref_policy_wg.compute_ref_log_prob(batch), metrics))

    def _compute_values(self, batch: DataProto, metrics: dict) -> DataProto:
        return batch.union(_take_metrics(self.critic_wg.compute_values(batch), metrics))

    def _compute_advantage(self, batch: DataProto, metrics: dict) -> DataProto:
        sessions, output_index = session_layout(batch.non_tensor_batch, len(batch))
        batch.batch = advantage_stage(
            batch.batch,
            metrics,
            algorithm=self.config.algorithm,
            kl_ctrl=self.kl_ctrl_in_reward,
            uids=batch.non_tensor_batch["uid"],
            sessions=sessions,
            output_index=output_index,
            reward_extra=batch.non_tensor_batch.get("reward_extra"),
        )
        return batch

    def _pf_ppo_resample(self, batch: DataProto, metrics: dict) -> DataProto:
        """PF-PPO: train on rows redrawn by reward weight, the same draw V1 makes."""
        return batch.select_idxs(
            pf_ppo_rows(
                batch.batch,
                metrics,
                pf_ppo=self.config.algorithm.pf_ppo,
                seed=self.config.trainer.seed,
                global_steps=self.global_steps,
            )
        )

    def _update_critic(self, batch: DataProto, metrics: dict) -> DataProto:
        _take_metrics(self.critic_wg.update_critic(batch), metrics)
        return batch

    def _update_actor(self, batch: DataProto, metrics: dict) -> DataProto:
        _take_metrics(self.actor_rollout_wg.update_actor(batch), metrics)
        return batch

    def _dump_rollout_generations(self, batch: DataProto, metrics: dict) -> DataProto:
        """`trainer.rollout_data_dir`: the trained samples to `<dir>/<step>.jsonl`, V1's file."""
        dump_generations(self.config.trainer.rollout_data_dir, self.global_steps, batch.to_tensordict(), self.tokenizer)
        return batch

    # ------------------------------------------------------------------------------ prompts
    def _prompt_groups(self, rows: list[dict], partition: str, n: int) -> DataProto:
        """Left-padded prompts for `rows`, each with the next uid, repeated `n` times (interleaved:
        a group's samples are adjacent, `session_id` 0..n-1, V1's row order)."""
        template = dict(self.config.data.apply_chat_template_kwargs)
        prompt_ids = [encode_chat(self.tokenizer, list(row["raw_prompt"]), **template) for row in rows]
        input_ids, attention_mask = left_pad(prompt_ids, pad_token_id(self.tokenizer))
        keys = dict.fromkeys(key for row in rows for key in row)  # rows may lack optional columns
        columns = {key: object_column([row.get(key) for row in rows]) for key in keys}
        columns["raw_prompt_ids"] = object_column(prompt_ids)
        columns["uid"] = object_column([self._next_uid(partition) for _ in rows])
        prompts = DataProto.from_dict(
            tensors={
                "input_ids": input_ids,
                "attention_mask": attention_mask,
                "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            },
            non_tensors=columns,
            meta_info={"global_steps": self.global_steps},
        )
        groups = prompts.repeat(repeat_times=n, interleave=True)
        groups.non_tensor_batch["session_id"] = object_column(np.tile(np.arange(n), len(rows)).tolist())
        return groups

    def _next_uid(self, partition: str) -> str:
        # V1: `derive_uid(trainer.seed, partition, submission number)` in AgentLoopManager.submit.
        uid = derive_uid(self.config.trainer.seed, partition, self.submitted_prompts)
        self.submitted_prompts += 1
        return uid

    # ---------------------------------------------------------------------------- validation
    @property
    def _validation_enabled(self) -> bool:
        return validation_enabled(self.config.trainer, self.val_dataset is not None)

    def _validation_due(self) -> bool:
        return validation_due(
            self.config.trainer, self.global_steps, self.total_training_steps, self.val_dataset is not None
        )

    def _validate(self) -> dict[str, float]:
        """Generate for every validation prompt (`rollout.val_kwargs` sampling) and report what V1's
        validator reports (`core_v1.trainer.validation.validation_metrics`): samples whose agent loop
        or score raised count as failed, not as 0."""
        batch = self._prompt_groups(
            [dict(row) for row in self.val_dataset.rows], "val", self.config.actor_rollout_ref.rollout.val_kwargs.n
        )
        batch.meta_info["validate"] = True
        batch = self._generate_for(batch, metrics={})  # generation timings are not validation results
        reward_tensor, extra_info, failed = score_generated(batch, self.val_reward_fn)
        scored = [row for row in range(len(batch)) if row not in failed]
        sources, scores = batch.non_tensor_batch["data_source"], reward_tensor.sum(-1).tolist()
        if self.config.trainer.validation_data_dir:
            batch.batch["token_level_scores"] = reward_tensor
            batch.non_tensor_batch["reward_extra"] = object_column(_extras_per_row(extra_info, len(batch)))
            dump_generations(
                self.config.trainer.validation_data_dir,
                self.global_steps,
                batch.select_idxs(scored).to_tensordict(),
                self.tokenizer,
                validation=True,
            )
        return validation_metrics(
            [sources[row] for row in scored],
            [scores[row] for row in scored],
            n=self.config.actor_rollout_ref.rollout.val_kwargs.n,
            failed=len(failed),
        )

    # --------------------------------------------------------------------------- checkpoints
    @property
    def _checkpoint_root(self) -> Path:
        return Path(self.config.trainer.default_local_dir)

    def _checkpoint_due(self) -> bool:
        return checkpoint_due(self.config.trainer, self.global_steps, self.total_training_steps)

    def _save_checkpoint(self) -> Path:
        """`<default_local_dir>/global_step_<N>/{actor,critic,trainer_state.pt}`: V1's layout, atomic
        and durable commit, pruning and `trainer.default_hdfs_dir` copy (`core_v1.trainer.checkpointing`)."""
        step = self.global_steps
        trainer_cfg = self.config.trainer
        critic = (lambda path: self.critic_wg.save_checkpoint(path, global_step=step)) if self.critic_wg else None
        return write_checkpoint(
            CheckpointDirectory(
                self._checkpoint_root, trainer_cfg.max_actor_ckpt_to_keep, trainer_cfg.default_hdfs_dir
            ),
            step,
            lambda path: self.actor_rollout_wg.save_checkpoint(path, global_step=step),
            critic,
            lambda _staging: {
                "sampler": self.train_sampler.state_dict(),
                "weight_version": step,
                "submitted_prompts": self.submitted_prompts,
            },
        )

    def _load_checkpoint(self) -> Optional[Path]:
        """Resume from the checkpoint `trainer.resume_mode` points at, if any (for `auto` the newest
        that loads, as on V1: `load_resume_checkpoint`)."""
        loaded = load_resume_checkpoint(self.config.trainer, self._load_checkpoint_folder)
        if loaded is None:
            return None
        path, state = loaded
        self.global_steps = int(state["global_steps"])
        self.train_sampler.load_state_dict(state["sampler"])
        self.submitted_prompts = int(state.get("submitted_prompts", 0))
        self.logger.forget_steps_after(self.global_steps)  # the steps this run repeats
        print(f"resumed from {path} at step {self.global_steps}")
        return path

    def _load_checkpoint_folder(self, path: Path) -> dict:
        state = read_trainer_state(path)
        version = int(state["weight_version"])
        load_roles(
            path,
            lambda actor: self.actor_rollout_wg.load_checkpoint(actor, global_step=version),
            self.critic_wg.load_checkpoint if self.critic_wg is not None else None,
        )
        return state

    def _progress_bar(self):
        from tqdm.auto import tqdm

        return tqdm(
            total=self.total_training_steps,
            desc="training (V0)",
            unit="step",
            dynamic_ncols=True,
            disable=not self.config.trainer.progress_bar,
            file=sys.stderr,
        )


def _take_metrics(output: DataProto, metrics: dict) -> DataProto:
    """Move a worker result's `meta_info["metrics"]` (verl's convention) into the step metrics."""
    metrics.update(output.meta_info.pop("metrics", None) or {})
    return output


def _version_tags(batch: DataProto) -> list[dict]:
    """Each row as V1's store tags it for the staleness metrics: the oldest and newest weight version
    that produced it (the worker's `min_global_steps` / `max_global_steps` columns) and its length."""
    columns, tensors = batch.non_tensor_batch, batch.batch
    lengths = tensors["attention_mask"][:, tensors["prompts"].shape[1] :].sum(-1).tolist()
    return [
        {
            "response_len": int(lengths[row]),
            **{key: int(columns[key][row]) for key in ("min_global_steps", "max_global_steps") if key in columns},
        }
        for row in range(len(batch))
    ]


def _extras_per_row(extra_info: dict[str, list], rows: int) -> list[dict[str, float | str]]:
    """Each row's extra outputs of the reward function, kept as V1 keeps them (its `reward_extra`
    column: `core_v1.reward.loop.reward_extra_values`)."""
    return [reward_extra_values({key: values[row] for key, values in extra_info.items()}) for row in range(rows)]
