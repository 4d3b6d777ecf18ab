"""Reduce a [B, R] per-token loss to the scalar that is back-propagated.

The modes are verl's (`actor_rollout_ref.actor.loss_agg_mode`, `critic.loss_agg_mode`):

- `token-mean`: every valid token of the batch weighs the same (long answers weigh more).
- `seq-mean-token-sum`: sum over each sequence's tokens, mean over sequences.
- `seq-mean-token-mean`: mean over each sequence's tokens, mean over sequences (GSPO's choice).
- `seq-mean-token-sum-norm`: `seq-mean-token-sum` divided by a constant (the padded response
  length by default), Dr. GRPO's length-unbiased form.

Sequences with no valid token are left out of every sequence mean.

Gradient accumulation and data parallelism: a micro-batch's loss is normalised by its own
counts unless the caller passes the counts of the whole mini-batch across ranks
(`global_num_tokens` for `token-mean`, `global_num_seqs` for the sequence modes) together with
`dp_size`; then summing the micro-batch losses and averaging gradients over ranks gives exactly
the mini-batch loss. verl calls these `batch_num_tokens` and `global_batch_size`.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.errors import AlgorithmConfigError, AlgorithmInputError
from core_v1.algorithms.masked import masked_sum

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

# verl's guard for a sequence with no valid token in seq-mean-token-mean.
_SEQ_TOKEN_EPS = 1e-8


def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str,
    *,
    global_num_tokens: float | torch.Tensor | None = None,
    global_num_seqs: float | torch.Tensor | None = None,
    dp_size: int = 1,
    loss_scale_factor: float | None = None,
) -> torch.Tensor:
    """Aggregate `loss_mat` [B, R] over the positions where `loss_mask` [B, R] is 1.

    Args:
        loss_agg_mode: one of `LOSS_AGG_MODES`.
        global_num_tokens: valid tokens in the whole mini-batch on all ranks (`token-mean`).
        global_num_seqs: sequences with a valid token in the whole mini-batch on all ranks.
        dp_size: data-parallel ranks whose gradients are averaged; must come with the global count.
        loss_scale_factor: the `seq-mean-token-sum-norm` constant; default `loss_mask.shape[-1]`.
    """
    if loss_mat.shape != loss_mask.shape:
        raise AlgorithmInputError(
            f"loss matrix {tuple(loss_mat.shape)} and mask {tuple(loss_mask.shape)} must have the same [B, R] shape"
        )
    if loss_agg_mode == "token-mean":
        denominator = _global_count(global_num_tokens, loss_mask.to(loss_mat.dtype).sum(), dp_size, "global_num_tokens")
        return masked_sum(loss_mat, loss_mask) / denominator * dp_size
    if loss_agg_mode in ("seq-mean-token-sum", "seq-mean-token-sum-norm"):
        seq_losses = masked_sum(loss_mat, loss_mask, dim=-1)
        loss = _mean_over_sequences(seq_losses, loss_mask, global_num_seqs, dp_size)
        if loss_agg_mode == "seq-mean-token-sum-norm":
            loss = loss / (loss_mask.shape[-1] if loss_scale_factor is None else loss_scale_factor)
        return loss
    if loss_agg_mode == "seq-mean-token-mean":
        seq_token_counts = loss_mask.to(loss_mat.dtype).sum(dim=-1)
        seq_losses = masked_sum(loss_mat, loss_mask, dim=-1) / (seq_token_counts + _SEQ_TOKEN_EPS)
        return _mean_over_sequences(seq_losses, loss_mask, global_num_seqs, dp_size)
    raise AlgorithmConfigError(f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of: {', '.join(LOSS_AGG_MODES)}")


def _mean_over_sequences(
    seq_losses: torch.Tensor, loss_mask: torch.Tensor, global_num_seqs, dp_size: int
) -> torch.Tensor:
    has_tokens = (loss_mask.sum(dim=-1) > 0).to(seq_losses.dtype)
    denominator = _global_count(global_num_seqs, has_tokens.sum(), dp_size, "global_num_seqs")
    return masked_sum(seq_losses, has_tokens) / denominator * dp_size


def _global_count(given, local: torch.Tensor, dp_size: int, name: str):
    if given is not None:
        return given
    if dp_size > 1:
        raise AlgorithmInputError(
            f"{name} is required when dp_size > 1: pass the count over the whole "
            "mini-batch on all ranks, or each rank's loss is normalised differently"
        )
    # An all-padding micro-batch contributes zero loss rather than 0/0.
    return local.clamp(min=1)
