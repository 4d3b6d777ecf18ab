"""Next-token sampling for a batch of rows that each carry their own `SamplingParams`.

Three properties matter more than speed here:

- **Reproducible per request.** Every row has a seed (the request's own, or one the engine drew
  for it). The token at response index t is drawn with uniform numbers made from (seed, t, token)
  by an integer hash, so the draw does not depend on which other rows share the batch or on how
  many tokens were generated before a partial-rollout resume: a resumed request (prompt + tokens
  so far, seed_offset = len(tokens so far)) continues the very same stream.
- **On the device, without a host sync.** The hash is plain int64 tensor arithmetic and the draw
  is the exponential race, argmax_i(log p_i - log E_i) with E_i = -log u_i ~ Exp(1) i.i.d. per
  token, so a whole decode step, sampling included, can be captured in a CUDA graph; nothing is
  read back per token.
- **Log-probs the trainer can reproduce.** The reported log-prob of a sampled token is taken from
  log_softmax(logits / temperature) *before* top-k/top-p filtering. The trainer recomputes
  log-probs as log_softmax(logits / temperature) over the full vocabulary; reporting the
  filtered, renormalised value would make the rollout/trainer importance ratio differ from 1 even
  with identical weights. Greedy rows (temperature 0) report log_softmax(logits).

Why the race and not an inverse-CDF search with one uniform per token (cheaper: one hash per row
instead of one per vocabulary entry): both draw token i with probability p_i, and a one-token
check of the inverse CDF matched the model's softmax, yet GRPO on the CPU quickstart learned
systematically worse with it (last-three score 0.78-0.79 at two seeds, against 0.93-0.95 with the
race, same preset). Until that is understood, the engine keeps the sampler the trainer was tuned
with. Filtered tokens get probability 0 in place, so a row's draw is the same whether or not other
rows of its batch filter.
"""

from __future__ import annotations

import functools
import os
from typing import Sequence

import torch

# position_seed, seed_key and SamplingRows are importable from here, where callers first found them.
from core_v1.rollout.engines.sampling_rows import MASK32, U_MAX, SamplingRows, position_seed, seed_key  # noqa: F401
from core_v1.rollout.types import SamplingParams

_TOKEN_MIX = 0x85EBCA77


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2**32 for int64 tensors holding 32-bit values, split in 16-bit halves so
    no product overflows int64 (signed overflow is not something to rely on in a kernel)."""
    low = (x & 0xFFFF) * constant
    high = (((x >> 16) * constant) & 0xFFFF) << 16
    return (low + high) & MASK32


def _fmix32(h: torch.Tensor) -> torch.Tensor:
    """murmur3's 32-bit finaliser: every input bit flips each output bit with probability ~1/2."""
    h = h ^ (h >> 16)
    h = _mul32(h, 0x85EBCA6B)
    h = h ^ (h >> 13)
    h = _mul32(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def token_uniforms(key_lo: torch.Tensor, key_hi: torch.Tensor, position: torch.Tensor, vocab: int) -> torch.Tensor:
    """[B, vocab] uniform float32 in (0, 1), one per row and token, from the row's seed key and
    response position (23 bits, so that each value is exact in float32)."""
    token = torch.arange(vocab, device=key_lo.device)[None, :]
    h = _fmix32(key_lo[:, None] ^ _mul32(position & MASK32, 0x9E3779B9)[:, None])
    h = _fmix32(h ^ _mul32(token, _TOKEN_MIX))
    h = _fmix32(h ^ key_hi[:, None])
    return (((h >> 9).to(torch.float32) + 0.5) * 2.0**-23).clamp_max(U_MAX)


def sample(logits: torch.Tensor, rows: SamplingRows) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of `logits` [B, V]; returns (token_ids [B] long, log_probs [B] float32).
    No host synchronisation: safe inside a CUDA graph capture. On CUDA the draw runs as one fused
    kernel (`fused_sampling`, the same tokens) unless Triton is missing or RLBRIDGE_FUSED_SAMPLER=0."""
    fused = _fused_sampler() if logits.is_cuda else None
    if fused is not None:
        support = _filter_top_k_top_p(_tempered(logits, rows), rows.top_k, rows.top_p) if rows.filtered else None
        return fused(logits, rows, support)
    return sample_unfused(logits, rows)


def sample_unfused(logits: torch.Tensor, rows: SamplingRows) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` in plain tensor operations (any device)."""
    scaled = _tempered(logits, rows)
    probs = torch.softmax(scaled, dim=-1)
    support = torch.softmax(_filter_top_k_top_p(scaled, rows.top_k, rows.top_p), dim=-1) if rows.filtered else probs
    noise = -torch.log(token_uniforms(rows.key_lo, rows.key_hi, rows.position, support.shape[-1]))
    drawn = torch.argmax(torch.log(support) - torch.log(noise), dim=-1)
    tokens = torch.where(rows.greedy, scaled.argmax(dim=-1), drawn)
    return tokens, probs.gather(1, tokens[:, None]).squeeze(1).log()


def _tempered(logits: torch.Tensor, rows: SamplingRows) -> torch.Tensor:
    return torch.div(logits, rows.temperature[:, None])  # float32 by type promotion, in one pass


@functools.cache
def _fused_sampler():
    """`fused_sampling.fused_sample`, or None where Triton is not installed or the user turned it off."""
    if os.environ.get("RLBRIDGE_FUSED_SAMPLER", "1") == "0":
        return None
    try:
        from core_v1.rollout.engines.fused_sampling import fused_sample
    except ImportError:
        return None
    return fused_sample


def sample_next_tokens(
    logits: torch.Tensor, params: Sequence[SamplingParams], positions: Sequence[int], seeds: Sequence[int] | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """`sample` for rows given as SamplingParams; `seeds` default to each row's own seed (required then)."""
    if seeds is None:
        if any(p.seed is None for p in params):
            raise ValueError("sample_next_tokens: give seeds for rows whose SamplingParams have none")
        seeds = [p.seed for p in params]
    return sample(logits, SamplingRows.build(params, positions, seeds, logits.shape[-1], logits.device))


def _filter_top_k_top_p(scaled: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Set logits outside each row's top-k, then outside its top-p nucleus, to -inf (natural order kept)."""
    vocab = scaled.shape[-1]
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device)[None, :]
    keep = ranks < top_k[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs
    keep &= mass_before < top_p[:, None]  # the token that crosses top_p stays; the first always does
    sorted_logits = sorted_logits.masked_fill(~keep, float("-inf"))
    return torch.empty_like(scaled).scatter_(1, order, sorted_logits)
