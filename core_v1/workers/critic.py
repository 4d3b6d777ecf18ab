"""The critic: a value model trained on the returns of GAE, with PPO's clipped value loss.

`CriticEngine` follows verl's `DataParallelPPOCritic`: `compute_values` scores each response
token with the value of the state that chose it (zero where `response_mask` is 0), and
`update_critic` runs the same mini-batch / micro-batch / epoch loop as the actor
(`training.TrainingEngine`), with mini-batches of `critic.ppo_mini_batch_size * critic.rollout_n`
trajectories and the loss `0.5 * agg(max((V - G)^2, (clip(V, V_old +- cliprange_value) - G)^2))`.

Metrics, averaged over the optimizer steps of a call: `critic/vf_loss`, `critic/vf_clipfrac`,
`critic/vpred_mean`, `critic/grad_norm`, `critic/skipped_steps`, `critic/lr`.
"""

from __future__ import annotations

from functools import partial
from typing import Optional

import torch
from tensordict import TensorDict

from core_v1.algorithms import compute_value_loss, masked_mean
from core_v1.config.schema import PPOConfig
from core_v1.workers import distributed
from core_v1.workers.model import FORWARD_KEYS, forward_keys, load_value_model, response_values
from core_v1.workers.training import (
    TrainingEngine,
    map_micro_batches,
    micro_batch_rows,
    micro_batching,
    require_fields,
    rows_per_rank,
)

_VALUE_FIELDS = FORWARD_KEYS + ("response_mask",)
_UPDATE_FIELDS = _VALUE_FIELDS + ("values", "returns")


def _row_inputs(batch: TensorDict) -> tuple[str, ...]:
    """The rows' images (and videos), which a vision-language value model's forwards take."""
    return forward_keys(batch)[len(FORWARD_KEYS) :]


class CriticEngine(TrainingEngine):
    """The value model with its optimizer.

    Args:
        config: the run's config (`critic.*` is read).
        model_path: weights to start from (a causal-LM checkpoint gets a fresh value head, a
            critic checkpoint keeps its own); default `critic.model.path`.
        device: where the model runs; the caller chooses it.
    """

    metric_prefix = "critic"

    def __init__(self, config: PPOConfig, model_path: Optional[str] = None, device: str | torch.device = "cpu"):
        critic = config.critic
        self.config = critic
        device = torch.device(device)
        load = partial(
            load_value_model,
            dtype=critic.fsdp.model_dtype,
            trust_remote_code=critic.model.trust_remote_code,
            override_config=critic.model.override_config,
            config_key="critic.model.path",
            device="cpu",
        )
        model = load(model_path or critic.model.path, gradient_checkpointing=critic.model.enable_gradient_checkpointing)
        model = distributed.place_model(model, critic.fsdp, device)
        super().__init__(
            model,
            optim=critic.optim,
            grad_clip=critic.grad_clip,
            contents=critic.checkpoint,
            device=device,
            config_prefix="critic.optim",
            load_model=load,
        )
        self._mini_batch_rows = rows_per_rank(
            critic.ppo_mini_batch_size * critic.rollout_n, "critic.ppo_mini_batch_size * critic.rollout_n"
        )
        rows = micro_batch_rows(
            critic.ppo_micro_batch_size_per_gpu, critic.ppo_micro_batch_size, "critic.ppo_micro_batch_size"
        )
        forward_rows = (
            micro_batch_rows(
                critic.forward_micro_batch_size_per_gpu,
                critic.forward_micro_batch_size,
                "critic.forward_micro_batch_size",
            )
            or rows
        )
        self._micro_batch_rows = micro_batching(
            critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu, rows, "critic.ppo_max_token_len_per_gpu"
        )
        self._forward_rows = micro_batching(
            critic.use_dynamic_bsz,
            critic.forward_max_token_len_per_gpu,
            forward_rows,
            "critic.forward_max_token_len_per_gpu",
        )

    def compute_values(self, batch: TensorDict) -> torch.Tensor:
        """Values [B, R] of the response tokens (float32, CPU), zero where `response_mask` is 0."""
        require_fields(batch, _VALUE_FIELDS, "compute_values")
        (values,) = map_micro_batches(
            self.model,
            batch,
            _VALUE_FIELDS + _row_inputs(batch),
            self._forward_rows,
            self.device,
            lambda micro: (response_values(self.model, micro),),
        )
        return values

    def update_critic(self, batch: TensorDict) -> dict[str, float]:
        """One critic update towards `batch["returns"]`, clipped around `batch["values"]`."""
        require_fields(batch, _UPDATE_FIELDS, "update_critic")
        return self._train(
            batch,
            fields=_UPDATE_FIELDS + _row_inputs(batch),
            mini_batch_rows=self._mini_batch_rows,
            micro_batch_rows=self._micro_batch_rows,
            epochs=self.config.ppo_epochs,
            loss_agg_mode=self.config.loss_agg_mode,
            micro_batch_loss=self._micro_batch_loss,
        )

    def _micro_batch_loss(self, micro_batch: TensorDict) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        mask = micro_batch["response_mask"]
        vpreds = response_values(self.model, micro_batch)
        vf_loss, vf_clipfrac = compute_value_loss(
            vpreds,
            micro_batch["returns"],
            micro_batch["values"],
            mask,
            cliprange_value=self.config.cliprange_value,
            loss_agg_mode=self.config.loss_agg_mode,
        )
        return vf_loss, {
            "critic/vf_loss": vf_loss.detach(),
            "critic/vf_clipfrac": vf_clipfrac,
            "critic/vpred_mean": masked_mean(vpreds, mask).detach(),
        }
