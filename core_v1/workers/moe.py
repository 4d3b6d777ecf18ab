"""A mixture-of-experts actor's router losses (`actor_rollout_ref.actor.moe.*`) in its update.

The actor asks the model's forward for its routers' logits (`output_router_logits`, which Hugging
Face's MoE models take) and adds `aux_loss_coeff` times the load-balancing loss (unless
`load_balancing_type=none`, as in Megatron) and `z_loss_coeff` times the router z-loss of
`core_v1.algorithms.moe` to each micro-batch's loss, over the micro-batch's real tokens. Like every term of the micro-batch loss it is weighted by the micro-batch's share of the
mini-batch (`training.loss_weights`), as Megatron scales its per-layer terms by 1 / micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from core_v1.algorithms.moe import load_balancing_loss, router_z_loss
from core_v1.config.schema import MoELossConfig
from core_v1.workers.errors import WorkerConfigError


@dataclass(frozen=True)
class RouterLosses:
    balance_coeff: float  # the load-balancing loss's weight in effect
    z_loss_coeff: float
    top_k: int

    @classmethod
    def of(cls, config: MoELossConfig, model: Any) -> Optional["RouterLosses"]:
        """The actor's router losses, or None when both weights are 0. Raises WorkerConfigError for a
        model without routers: a dense model has nothing to balance."""
        balance_coeff = config.aux_loss_coeff if config.load_balancing_type == "aux_loss" else 0.0
        if balance_coeff == 0 and config.z_loss_coeff == 0:
            return None
        text_config = model.config.get_text_config()
        top_k = getattr(text_config, "num_experts_per_tok", None)
        if not top_k or not hasattr(text_config, "output_router_logits"):
            raise WorkerConfigError(
                f"actor_rollout_ref.actor.moe.aux_loss_coeff={config.aux_loss_coeff} / z_loss_coeff="
                f"{config.z_loss_coeff} need a mixture-of-experts model whose forward returns its routers' "
                f"logits (a {type(model).__name__} has none): set both to 0 for this model"
            )
        return cls(balance_coeff, config.z_loss_coeff, int(top_k))

    def add_to(
        self, loss: torch.Tensor, router_logits: Sequence[torch.Tensor], token_mask: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`loss` plus the weighted router losses of one micro-batch, and their unweighted values."""
        metrics = {}
        if self.balance_coeff > 0:
            balance = load_balancing_loss(router_logits, token_mask, self.top_k)
            loss = loss + self.balance_coeff * balance
            metrics["actor/moe_aux_loss"] = balance.detach()
        if self.z_loss_coeff > 0:
            z_loss = router_z_loss(router_logits, token_mask)
            loss = loss + self.z_loss_coeff * z_loss
            metrics["actor/moe_z_loss"] = z_loss.detach()
        return loss, metrics
