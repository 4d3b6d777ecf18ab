"""Token log-probabilities and entropies from logits, without a full-vocabulary copy.

A [B, R, V] logits tensor for a 150k vocabulary is the largest activation in RL training; a
plain `log_softmax(logits).gather(...)` allocates a second tensor of that size (and a third for
its gradient). Here the work is done over slices of rows, so the extra memory is one slice's
worth. Results are differentiable, and low-precision logits (bf16/fp16) are upcast to float32
inside each slice, so the returned log-probs and entropies are float32 for them.
"""

from __future__ import annotations

import torch

from core_v1.algorithms.errors import AlgorithmInputError

# Rows (token positions) processed at once; about 600 MB of float32 at a 150k vocabulary.
_ROWS_PER_CHUNK = 1024


def logprobs_from_logits(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """log p(label) under softmax(logits), for logits [..., V] and integer labels [...].

    Returns a tensor shaped like `labels` (float32 for low-precision logits).
    """
    return _per_slice(logits, labels, with_entropy=False)[0]


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) over the last dimension: logsumexp(z) - sum(softmax(z) * z)."""
    flat_logits = logits.reshape(-1, logits.shape[-1])
    pieces = []
    for start in range(0, flat_logits.shape[0], _ROWS_PER_CHUNK):
        chunk = _computation_precision(flat_logits[start : start + _ROWS_PER_CHUNK])
        probs = torch.softmax(chunk, dim=-1)
        pieces.append(torch.logsumexp(chunk, dim=-1) - (probs * chunk).sum(dim=-1))
    return _join(pieces, flat_logits).reshape(logits.shape[:-1])


def sum_pi_squared_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """sum_v softmax(logits)_v ** 2 over the last dimension, without gradient (float32 for low precision).

    Written exp(logsumexp(2z) - 2 logsumexp(z)), so no probability tensor is made; the optimal
    token baselines (`advantages.otb`) read it per response token.
    """
    flat_logits = logits.reshape(-1, logits.shape[-1])
    pieces = []
    with torch.no_grad():
        for start in range(0, flat_logits.shape[0], _ROWS_PER_CHUNK):
            chunk = _computation_precision(flat_logits[start : start + _ROWS_PER_CHUNK])
            pieces.append(torch.exp(torch.logsumexp(2.0 * chunk, dim=-1) - 2.0 * torch.logsumexp(chunk, dim=-1)))
    return _join(pieces, flat_logits).reshape(logits.shape[:-1])


def logprobs_and_entropy(
    logits: torch.Tensor, labels: torch.Tensor, entropy_requires_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """`logprobs_from_logits` and `entropy_from_logits` in one pass over each slice: the float32
    copy and the log-sum-exp are made once for both. The entropy takes part in autograd only with
    `entropy_requires_grad` (its graph holds a vocabulary-sized activation per token)."""
    return _per_slice(logits, labels, with_entropy=True, entropy_requires_grad=entropy_requires_grad)


def logprobs_of_tokens(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log p(v) under softmax(logits) [..., V] of each of the K token ids [..., K] at each position:
    `log_softmax(logits).gather(-1, token_ids)`, one slice of rows at a time (differentiable)."""
    if logits.shape[:-1] != token_ids.shape[:-1]:
        raise AlgorithmInputError(
            f"logits {tuple(logits.shape)} and token ids {tuple(token_ids.shape)} disagree: both must "
            "have the same leading dimensions"
        )
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_ids = token_ids.reshape(-1, token_ids.shape[-1]).long()
    pieces = []
    for start in range(0, flat_logits.shape[0], _ROWS_PER_CHUNK):
        chunk = _computation_precision(flat_logits[start : start + _ROWS_PER_CHUNK])
        log_sum_exp = torch.logsumexp(chunk, dim=-1, keepdim=True)
        pieces.append(chunk.gather(-1, flat_ids[start : start + _ROWS_PER_CHUNK]) - log_sum_exp)
    return _join(pieces, flat_logits).reshape(token_ids.shape)


def top_logprobs(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The k largest log-probs under softmax(logits) [..., V] at each position, [..., K] float32, and
    their token ids [..., K] int64, largest first (no gradient)."""
    with torch.no_grad():
        ids = torch.topk(logits, k=min(k, logits.shape[-1]), dim=-1).indices  # log_softmax keeps the order
        return logprobs_of_tokens(logits, ids), ids


def _per_slice(
    logits: torch.Tensor, labels: torch.Tensor, *, with_entropy: bool, entropy_requires_grad: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if logits.shape[:-1] != labels.shape:
        raise AlgorithmInputError(
            f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} disagree: logits must be "
            "labels' shape plus a trailing vocabulary dimension"
        )
    flat_logits = logits.reshape(-1, logits.shape[-1])
    flat_labels = labels.reshape(-1, 1).long()
    log_prob_pieces, entropy_pieces = [], []
    for start in range(0, flat_logits.shape[0], _ROWS_PER_CHUNK):
        chunk = _computation_precision(flat_logits[start : start + _ROWS_PER_CHUNK])
        log_sum_exp = torch.logsumexp(chunk, dim=-1)
        log_prob_pieces.append(chunk.gather(-1, flat_labels[start : start + _ROWS_PER_CHUNK]).squeeze(-1) - log_sum_exp)
        if with_entropy:
            with torch.set_grad_enabled(torch.is_grad_enabled() and entropy_requires_grad):
                probs = torch.exp(chunk - log_sum_exp[:, None])
                entropy_pieces.append(log_sum_exp - (probs * chunk).sum(dim=-1))
    log_probs = _join(log_prob_pieces, flat_logits).reshape(labels.shape)
    entropy = _join(entropy_pieces, flat_logits).reshape(labels.shape) if with_entropy else None
    return log_probs, entropy


def _computation_precision(chunk: torch.Tensor) -> torch.Tensor:
    # bf16/fp16 lose several digits in logsumexp over a large vocabulary; float32 is enough.
    return chunk if chunk.dtype in (torch.float32, torch.float64) else chunk.float()


def _join(pieces: list[torch.Tensor], flat_logits: torch.Tensor) -> torch.Tensor:
    if pieces:
        return torch.cat(pieces)
    dtype = flat_logits.dtype if flat_logits.dtype in (torch.float32, torch.float64) else torch.float32
    return flat_logits.new_zeros(0, dtype=dtype)
