"""The reference policy: the starting weights, frozen, for the KL loss or the KL penalty.

It loads the same checkpoint as the actor (`actor_rollout_ref.model.path`) in
`actor_rollout_ref.ref.fsdp_config.model_dtype`, never trains, and scores responses with the
rollout's temperature exactly as the actor does, so that an untrained actor and the reference
agree token for token (the KL is then zero).

When the actor trains LoRA adapters, its base weights never change: they are the starting
policy. The reference then holds no weights of its own; it runs the actor's model with the
adapters disabled, as verl does (`ref_in_actor`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Optional

import torch
from tensordict import TensorDict

from core_v1.config.schema import PPOConfig
from core_v1.workers import distributed
from core_v1.workers.lora import adapters_disabled, is_lora
from core_v1.workers.model import FORWARD_KEYS, forward_keys, load_causal_lm, response_log_probs, sampling_temperature
from core_v1.workers.training import map_micro_batches, micro_batch_rows, micro_batching, require_fields


class ReferenceEngine:
    """Frozen policy weights; `compute_ref_log_prob` is its only operation.

    Args:
        config: the run's config (`actor_rollout_ref.{model, ref, rollout}` are read).
        model_path: weights to load; default `actor_rollout_ref.model.path`.
        device: where the model runs; the caller chooses it.
        actor: the actor engine of the same process, if any; a LoRA actor's base model is then
            the reference (nothing is loaded).
    """

    def __init__(
        self,
        config: PPOConfig,
        model_path: Optional[str] = None,
        device: str | torch.device = "cpu",
        actor: Optional[Any] = None,
    ):
        aro = config.actor_rollout_ref
        self.device = torch.device(device)
        self.temperature = sampling_temperature(aro.rollout)
        self.shares_actor = actor is not None and model_path is None and is_lora(actor.model)
        if self.shares_actor:
            self.model = actor.model
        else:
            model = load_causal_lm(
                model_path or aro.model.path,
                dtype=aro.ref.fsdp_config.model_dtype,
                device="cpu",
                trust_remote_code=aro.model.trust_remote_code,
                override_config=aro.model.override_config,
            )
            model.requires_grad_(False)
            self.model = distributed.place_model(model.eval(), aro.ref.fsdp_config, self.device)
        rows = micro_batch_rows(
            aro.ref.log_prob_micro_batch_size_per_gpu,
            aro.ref.log_prob_micro_batch_size,
            "actor_rollout_ref.ref.log_prob_micro_batch_size",
        )
        self._micro_batch_rows = micro_batching(
            aro.ref.log_prob_use_dynamic_bsz,
            aro.ref.log_prob_max_token_len_per_gpu,
            rows,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        )

    def compute_ref_log_prob(self, batch: TensorDict) -> torch.Tensor:
        """Log-probs [B, R] of `batch["responses"]` under the reference policy (float32, CPU; 0 at response padding)."""
        require_fields(batch, FORWARD_KEYS, "compute_ref_log_prob")
        forward = partial(response_log_probs, self.model, temperature=self.temperature)
        with adapters_disabled(self.model):
            log_probs, _ = map_micro_batches(
                self.model, batch, forward_keys(batch), self._micro_batch_rows, self.device, forward
            )
        return log_probs
