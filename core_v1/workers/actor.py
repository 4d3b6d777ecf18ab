"""The actor: the policy being trained, its log-probs, and the PPO update.

`ActorEngine` follows verl's `DataParallelPPOActor` (`compute_log_prob`, `update_policy`) on a
TensorDict batch laid out as in docs/CONTRACTS.md. One `update_policy` call is one trainer step:

- the batch is split, in order, into mini-batches of `ppo_mini_batch_size * rollout.n`
  trajectories (`ppo_mini_batch_size` counts prompts), one optimizer step each, repeated for
  `ppo_epochs`; each mini-batch is split into micro-batches of `ppo_micro_batch_size_per_gpu`
  rows whose gradients accumulate exactly (see `training.loss_weights`);
- the loss of a micro-batch is the policy loss named by `policy_loss.loss_mode`, minus
  `entropy_coeff` times the aggregated entropy, plus `kl_loss_coef` times the aggregated KL to
  `ref_log_prob` when `use_kl_loss` (estimator `kl_loss_type`), all aggregated with
  `loss_agg_mode`; with on-policy distillation (`distillation.enabled`), the teacher's term of
  `core_v1.workers.distillation` is added to it, or replaces it (`use_task_rewards=false`); a
  mixture-of-experts model's router losses (`moe.aux_loss_coeff`, `moe.z_loss_coeff`:
  `core_v1.workers.moe`) are added last;
- gradients are clipped to `grad_clip`; a step whose norm is not finite is skipped and counted;
- AdamW, then the LR schedule advances once.

With LoRA (`model.lora_rank > 0` or `model.lora_adapter_path`) only the adapter trains
(`core_v1.workers.lora`); the reference policy is then this model with its adapters disabled.

Log-probs use `logits / rollout.temperature`, the distribution the rollout sampled from, as
verl does; otherwise the PPO ratio of an unchanged policy would not be 1.

Every metric is the mini-batch's value averaged over the optimizer steps of the call:
`actor/pg_loss`, `actor/pg_clipfrac`, `actor/ppo_kl`, `actor/pg_clipfrac_lower`,
`actor/kl_loss` and `actor/kl_coef` (with `use_kl_loss`), `actor/grad_norm` (finite steps),
`actor/skipped_steps`, and `actor/lr` (the LR these steps used). `actor/entropy` comes from here
only when the update computes the entropy anyway: with an entropy bonus (`entropy_coeff`), or in
bypass mode, where no old-log-prob pass runs; otherwise the trainer reports the old-log-prob
pass's entropy (the policy before this update), as verl does, and the update skips three
vocabulary-sized passes per micro-batch.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Optional

import torch
from tensordict import TensorDict

from core_v1.algorithms import agg_loss, get_policy_loss_fn, kl_penalty
from core_v1.algorithms.rollout_correction import RolloutCorrectionConfig
from core_v1.config.schema import PPOConfig
from core_v1.workers import distributed
from core_v1.workers.distillation import TOPK_FIELDS, distillation_loss_of
from core_v1.workers.lora import LoraSettings, apply_lora
from core_v1.workers.model import (
    FORWARD_KEYS,
    forward_keys,
    freeze_vision_tower,
    load_causal_lm,
    response_log_probs,
    sampling_temperature,
)
from core_v1.workers.moe import RouterLosses
from core_v1.workers.training import (
    TrainingEngine,
    map_micro_batches,
    micro_batch_rows,
    micro_batching,
    require_fields,
    rows_per_rank,
)

_UPDATE_FIELDS = FORWARD_KEYS + ("response_mask", "old_log_probs", "advantages")
# policy_loss settings of the clip_cov and kl_cov losses, passed to every loss (the others ignore them).
_COV_LOSS_OPTIONS = ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")


def training_loss_mode(actor, rollout_correction: dict) -> str:
    """The policy loss the update runs: verl's flag for AReaL's decoupled objective selects
    `decoupled`; in bypass mode the default loss is the bypass loss (`training_loss_mode` of
    `RolloutCorrectionConfig` says why)."""
    if actor.use_decoupled_loss:
        return "decoupled"
    return RolloutCorrectionConfig.from_dict(rollout_correction).training_loss_mode(actor.policy_loss.loss_mode)


class ActorEngine(TrainingEngine):
    """The policy model with its optimizer; see the module docstring for the update it runs.

    Args:
        config: the whole run's config; `actor_rollout_ref.{model, actor, rollout}` and
            `algorithm.rollout_correction` are read here, once.
        model_path: weights to start from; default `actor_rollout_ref.model.path`.
        device: where the model runs (`"cpu"`, `"cuda"`, `"cuda:1"`); the caller chooses it.
    """

    metric_prefix = "actor"

    def __init__(self, config: PPOConfig, model_path: Optional[str] = None, device: str | torch.device = "cpu"):
        aro = config.actor_rollout_ref
        actor = aro.actor
        self.config = actor
        self.temperature = sampling_temperature(aro.rollout)
        device = torch.device(device)
        load = partial(
            load_causal_lm,
            dtype=actor.fsdp_config.model_dtype,
            trust_remote_code=aro.model.trust_remote_code,
            override_config=aro.model.override_config,
            config_key="actor_rollout_ref.model.path",
            device="cpu",
        )
        model = load(model_path or aro.model.path, gradient_checkpointing=aro.model.enable_gradient_checkpointing)
        if actor.freeze_vision_tower:
            freeze_vision_tower(model)
        self._router_losses = RouterLosses.of(actor.moe, model)  # a MoE model's router losses (actor.moe), or None
        model = apply_lora(
            model,
            LoraSettings.of(aro.model, "actor_rollout_ref.model"),
            gradient_checkpointing=aro.model.enable_gradient_checkpointing,
        )
        model = distributed.place_model(model, actor.fsdp_config, device)
        super().__init__(
            model,
            optim=actor.optim,
            grad_clip=actor.grad_clip,
            contents=actor.checkpoint,
            device=device,
            config_prefix="actor_rollout_ref.actor.optim",
            load_model=load,
        )
        self._rollout_correction = dataclasses.asdict(config.algorithm.rollout_correction)
        self._loss_mode = training_loss_mode(actor, self._rollout_correction)
        self._policy_loss = get_policy_loss_fn(self._loss_mode)  # an unknown name fails here, not mid-run
        self._update_computes_entropy = actor.entropy_coeff != 0 or self._rollout_correction["bypass_mode"]
        self._distillation = distillation_loss_of(config)  # the teacher's term (distillation.*), or None
        self._mini_batch_rows = rows_per_rank(
            actor.ppo_mini_batch_size * aro.rollout.n, "actor_rollout_ref.actor.ppo_mini_batch_size * rollout.n"
        )
        rows = micro_batch_rows(
            actor.ppo_micro_batch_size_per_gpu,
            actor.ppo_micro_batch_size,
            "actor_rollout_ref.actor.ppo_micro_batch_size",
        )
        log_prob_rows = (
            micro_batch_rows(
                aro.rollout.log_prob_micro_batch_size_per_gpu,
                aro.rollout.log_prob_micro_batch_size,
                "actor_rollout_ref.rollout.log_prob_micro_batch_size",
            )
            or rows
        )
        self._micro_batch_rows = micro_batching(
            actor.use_dynamic_bsz,
            actor.ppo_max_token_len_per_gpu,
            rows,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        )
        self._log_prob_rows = micro_batching(
            aro.rollout.log_prob_use_dynamic_bsz,
            aro.rollout.log_prob_max_token_len_per_gpu,
            log_prob_rows,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        )

    def compute_log_prob(
        self, batch: TensorDict, calculate_entropy: bool = False
    ) -> tuple[Optional[torch.Tensor], ...]:
        """Log-probs [B, R] of `batch["responses"]` under the current policy, and entropies [B, R]
        (None unless `calculate_entropy`); with `actor.calculate_sum_pi_squared` a third tensor,
        sum_v pi(v)^2 [B, R] of the same distribution, as verl's log-prob pass adds it.

        No gradient; micro-batches of `rollout.log_prob_micro_batch_size_per_gpu` rows. Results
        are float32 on CPU, 0 at response padding; tool tokens (`response_mask` 0) keep their values.
        """
        require_fields(batch, FORWARD_KEYS, "compute_log_prob")
        forward = partial(
            response_log_probs,
            self.model,
            temperature=self.temperature,
            calculate_entropy=calculate_entropy,
            calculate_sum_pi_squared=self.config.calculate_sum_pi_squared,
        )
        return tuple(
            map_micro_batches(self.model, batch, forward_keys(batch), self._log_prob_rows, self.device, forward)
        )

    def update_policy(self, batch: TensorDict) -> dict[str, float]:
        """One PPO update on `batch` (see the module docstring); returns the `actor/*` metrics."""
        fields = self._update_fields(batch)
        require_fields(batch, fields, "update_policy")
        return self._train(
            batch,
            fields=fields,
            mini_batch_rows=self._mini_batch_rows,
            micro_batch_rows=self._micro_batch_rows,
            epochs=self.config.ppo_epochs,
            loss_agg_mode=self.config.loss_agg_mode,
            micro_batch_loss=self._micro_batch_loss,
        )

    def _update_fields(self, batch: TensorDict) -> tuple[str, ...]:
        """The batch fields the update reads under this configuration."""
        fields = _UPDATE_FIELDS + forward_keys(batch)[len(FORWARD_KEYS) :]
        if self.config.use_kl_loss:
            fields += ("ref_log_prob",)
        if self._distillation is not None:
            fields += self._distillation.fields
        if self._loss_mode == "decoupled":
            fields += ("rollout_log_probs",)
        if "rollout_is_weights" in batch.keys():
            fields += ("rollout_is_weights",)
        return fields

    def _micro_batch_loss(self, micro_batch: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        actor = self.config
        mask = micro_batch["response_mask"]
        router_logits = None if self._router_losses is None else []
        teacher_ids = micro_batch[TOPK_FIELDS[1]] if self._distillation and self._distillation.uses_topk else None
        student_topk: list[torch.Tensor] = []
        # The entropy always feeds the metric; it carries gradient only when it is in the loss.
        log_prob, entropy = response_log_probs(
            self.model,
            micro_batch,
            temperature=self.temperature,
            calculate_entropy=self._update_computes_entropy,
            entropy_requires_grad=actor.entropy_coeff != 0,
            router_logits=router_logits,
            other_tokens=teacher_ids,
            other_log_probs=student_topk,
        )
        pg_loss, metrics = self._policy_loss(
            *self._policy_loss_inputs(micro_batch, log_prob), **self._policy_loss_options(micro_batch)
        )
        loss = pg_loss
        metrics = {**metrics, "actor/pg_loss": pg_loss.detach()}
        if entropy is not None:
            entropy_loss = agg_loss(entropy, mask, actor.loss_agg_mode)
            loss = loss - actor.entropy_coeff * entropy_loss
            metrics["actor/entropy"] = entropy_loss.detach()
        if actor.use_kl_loss:
            token_kl = kl_penalty(log_prob, micro_batch["ref_log_prob"], actor.kl_loss_type)
            kl_loss = agg_loss(token_kl, mask, actor.loss_agg_mode)
            loss = loss + actor.kl_loss_coef * kl_loss
            metrics.update({"actor/kl_loss": kl_loss.detach(), "actor/kl_coef": actor.kl_loss_coef})
        if self._distillation is not None:
            loss, distillation_metrics = self._distillation.add_to(
                loss, micro_batch, log_prob, actor.loss_agg_mode, student_topk[0] if student_topk else None
            )
            metrics.update(distillation_metrics)
        if self._router_losses is not None:
            loss, router_metrics = self._router_losses.add_to(loss, router_logits, micro_batch["attention_mask"])
            metrics.update(router_metrics)
        return loss, metrics

    def _policy_loss_inputs(self, micro_batch: TensorDict, log_prob: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # Decoupled PPO anchors on the behaviour (rollout) policy; the recomputed log-probs are
        # the proximal policy it clips around (passed as an option). In bypass mode the trainer
        # stores the rollout's log-probs as `old_log_probs`, since it skips recomputing them.
        behaviour = "rollout_log_probs" if self._loss_mode == "decoupled" else "old_log_probs"
        return micro_batch[behaviour], log_prob, micro_batch["advantages"], micro_batch["response_mask"]

    def _policy_loss_options(self, micro_batch: TensorDict) -> dict:
        actor = self.config
        options = dict(
            loss_agg_mode=actor.loss_agg_mode,
            clip_ratio=actor.clip_ratio,
            clip_ratio_low=actor.clip_ratio_low,
            clip_ratio_high=actor.clip_ratio_high,
            clip_ratio_c=actor.clip_ratio_c,
            rollout_correction=self._rollout_correction,
            behav_imp_weight_cap=actor.behav_imp_weight_cap,
            tau_pos=actor.tau_pos,
            tau_neg=actor.tau_neg,
            **{name: getattr(actor.policy_loss, name) for name in _COV_LOSS_OPTIONS},
        )
        if "rollout_is_weights" in micro_batch.keys():
            options["rollout_is_weights"] = micro_batch["rollout_is_weights"]
        if self._loss_mode == "decoupled":
            options["proximal_log_prob"] = micro_batch["old_log_probs"]
        return options
