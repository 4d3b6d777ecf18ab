"""Next-token sampling for a batch of rows that each carry their own `SamplingParams`.

Two properties matter more than speed here:

- **Reproducible per request.** A seeded row draws its token at response index t from a generator
  seeded by (seed, t) alone. The draw therefore does not depend on which other rows share the
  batch or on how many tokens were generated before a partial-rollout resume; a resumed request
  (prompt + tokens so far, seed_offset = len(tokens so far)) continues the very same stream.
- **Log-probs the trainer can reproduce.** The reported log-prob of a sampled token is taken from
  log_softmax(logits / temperature) *before* top-k/top-p filtering. The trainer recomputes
  log-probs as log_softmax(logits / temperature) over the full vocabulary; reporting the
  filtered, renormalised value would make the rollout/trainer importance ratio differ from 1 even
  with identical weights. Greedy rows (temperature 0) report log_softmax(logits).

Sampling uses the exponential race: argmax_i(log p_i - log E_i) with E_i ~ Exp(1) i.i.d. picks i
with probability p_i, so one batched argmax samples every row once each row's noise is drawn.
"""

from __future__ import annotations

from typing import Sequence

import torch

from core_v1.rollout.types import SamplingParams

_MASK64 = (1 << 64) - 1


def position_seed(seed: int, position: int) -> int:
    """A well-mixed 63-bit seed for token `position` of a request seeded with `seed` (splitmix64)."""
    return _splitmix64(_splitmix64(seed & _MASK64) ^ position) >> 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def sample_next_tokens(logits: torch.Tensor, params: Sequence[SamplingParams], positions: Sequence[int],
                       generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row.

    logits: [B, V] next-token logits; params[i], positions[i]: row i's sampling params and the
    response index of the token being drawn (seed_offset + tokens generated so far).
    `generator` serves unseeded rows. Returns (token_ids [B] long, log_probs [B] float32).
    """
    logits = logits.float()
    greedy = torch.tensor([p.greedy for p in params], device=logits.device)
    temperature = torch.tensor([p.temperature if not p.greedy else 1.0 for p in params], device=logits.device)
    scaled = logits / temperature[:, None]
    token_log_probs = torch.log_softmax(scaled, dim=-1)

    tokens = torch.argmax(scaled, dim=-1)
    if not bool(greedy.all()):
        filtered = _filter_top_k_top_p(scaled, params)
        race = filtered - torch.log(_exponential_noise(logits.shape, params, positions, generator, logits.device))
        tokens = torch.where(greedy, tokens, torch.argmax(race, dim=-1))
    return tokens, token_log_probs.gather(1, tokens[:, None]).squeeze(1)


def _exponential_noise(shape: torch.Size, params: Sequence[SamplingParams], positions: Sequence[int],
                       generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """Exp(1) noise per row: seeded rows from their own (seed, position) generator, the rest from
    `generator`; greedy rows get 1 (log 1 = 0, unused)."""
    noise = torch.ones(shape, device=device)
    unseeded = [i for i, p in enumerate(params) if not p.greedy and p.seed is None]
    if unseeded:
        noise[unseeded] = torch.empty((len(unseeded), shape[1]), device=device).exponential_(generator=generator)
    row_generator = torch.Generator(device=device)
    for i, (p, position) in enumerate(zip(params, positions)):
        if not p.greedy and p.seed is not None:
            row_generator.manual_seed(position_seed(p.seed, position))
            noise[i].exponential_(generator=row_generator)
    # exponential_ may return exactly 0 in float32; log(0) would make that token win outright.
    return noise.clamp_min_(torch.finfo(noise.dtype).tiny)


def _filter_top_k_top_p(scaled: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Set logits outside each row's top-k, then outside its top-p nucleus, to -inf."""
    use_top_k = any(p.top_k > 0 for p in params)
    use_top_p = any(p.top_p < 1.0 for p in params)
    if not (use_top_k or use_top_p):
        return scaled
    vocab = scaled.shape[-1]
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    ranks = torch.arange(vocab, device=scaled.device)[None, :]
    keep = torch.ones_like(sorted_logits, dtype=torch.bool)
    if use_top_k:
        top_k = torch.tensor([p.top_k if p.top_k > 0 else vocab for p in params], device=scaled.device)
        keep &= ranks < top_k[:, None]
    if use_top_p:
        top_p = torch.tensor([p.top_p for p in params], device=scaled.device)
        probs = torch.softmax(sorted_logits.masked_fill(~keep, float("-inf")), dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        keep &= mass_before < top_p[:, None]  # the token that crosses top_p stays; the first always does
    sorted_logits = sorted_logits.masked_fill(~keep, float("-inf"))
    return torch.empty_like(scaled).scatter_(1, order, sorted_logits)
