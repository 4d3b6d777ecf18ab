"""The router losses of a mixture-of-experts model, as Megatron-core adds them to the training loss.

verl's Megatron engine takes them from `megatron.override_transformer_config.moe_aux_loss_coeff`
and `moe_z_loss_coeff`; rlbridge's FSDP2 actor adds the same terms
(`actor_rollout_ref.actor.moe.{aux_loss_coeff,z_loss_coeff}`) from the routers' logits that a
Hugging Face MoE model returns with `output_router_logits=True`. Megatron-core computes both on
each MoE layer and adds each layer's gradient, so the terms here are sums over layers (Hugging
Face's own `load_balancing_loss_func` pools the layers and counts the k choices without dividing
by k: a different number, on purpose not used). Only real tokens count (`token_mask`): prompt
and response tokens alike, as Megatron routes every token of a packed sequence.

- `load_balancing_loss`: the Switch Transformer loss in Megatron-core's form, per layer
  `E / (k * T^2) * sum_e P_e * c_e`, with T real tokens, E experts, k experts a token is routed
  to, P_e the sum over tokens of the router's softmax probability of expert e, and c_e the number
  of tokens whose top-k choice includes e (a count: the gradient flows through P only). It is 1
  for a perfectly balanced router and grows to E when every token picks the same experts.
- `router_z_loss`: ST-MoE's z-loss, per layer the mean over tokens of logsumexp(logits)^2: it
  keeps the router's logits small.
"""

from __future__ import annotations

from typing import Sequence

import torch


def _real_tokens(layer_logits: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
    """A layer's router logits [tokens, E] at the real tokens (`token_mask`: [rows, length] or flat)."""
    return layer_logits[token_mask.reshape(-1).bool()].float()


def load_balancing_loss(router_logits: Sequence[torch.Tensor], token_mask: torch.Tensor, top_k: int) -> torch.Tensor:
    """Megatron-core's switch load-balancing loss summed over the MoE layers (see the module docstring)."""
    total = torch.zeros((), device=token_mask.device)
    for layer_logits in router_logits:
        logits = _real_tokens(layer_logits, token_mask)
        tokens, experts = logits.shape
        if tokens == 0:
            continue
        probs = torch.softmax(logits, dim=-1)
        chosen = torch.topk(probs, top_k, dim=-1).indices
        counts = torch.zeros(experts, device=logits.device).scatter_add_(
            0, chosen.reshape(-1), torch.ones(chosen.numel(), device=logits.device)
        )
        total = total + (probs.sum(0) * counts).sum() * experts / (top_k * tokens * tokens)
    return total


def router_z_loss(router_logits: Sequence[torch.Tensor], token_mask: torch.Tensor) -> torch.Tensor:
    """ST-MoE's router z-loss summed over the MoE layers: per layer, mean of logsumexp(logits)^2."""
    total = torch.zeros((), device=token_mask.device)
    for layer_logits in router_logits:
        logits = _real_tokens(layer_logits, token_mask)
        if logits.shape[0]:
            total = total + torch.logsumexp(logits, dim=-1).square().mean()
    return total


__all__ = ["load_balancing_loss", "router_z_loss"]
