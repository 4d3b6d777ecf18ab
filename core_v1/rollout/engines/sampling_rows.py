"""Per-row sampling state (`SamplingRows`) and the per-request seeds it carries.

Shared by the sampler in plain tensor operations (`sampling`) and its fused kernel
(`fused_sampling`), neither of which imports the other.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import torch

from core_v1.rollout.types import SamplingParams

_MASK64 = (1 << 64) - 1
MASK32 = 0xFFFFFFFF
# The largest uniform drawn: keeps u * total strictly below the last CDF entry under float32 rounding.
U_MAX = 1.0 - 2.0**-23


def position_seed(seed: int, position: int) -> int:
    """A well-mixed 63-bit seed for token `position` of a request seeded with `seed` (splitmix64)."""
    return _splitmix64(_splitmix64(seed & _MASK64) ^ position) >> 1


@functools.lru_cache(maxsize=1 << 16)  # rows are re-described whenever the batch changes
def seed_key(seed: int) -> tuple[int, int]:
    """The two 32-bit halves of a request seed's splitmix64 mix, which the device hash combines with
    each token position."""
    key = _splitmix64(seed & _MASK64)
    return key & MASK32, key >> 32


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


@dataclass
class SamplingRows:
    """Per-row sampling state as device tensors, in row order ([B] each)."""

    temperature: torch.Tensor  # float32; 1.0 for greedy rows (their log-probs are untempered)
    greedy: torch.Tensor  # bool
    key_lo: torch.Tensor  # int64, from seed_key
    key_hi: torch.Tensor  # int64
    position: torch.Tensor  # int64, response index of the token being drawn
    top_k: torch.Tensor  # int64; the vocabulary size when off
    top_p: torch.Tensor  # float32; 1.0 when off
    filtered: bool  # some row uses top-k or top-p (decided on the host: it changes the work done)

    @classmethod
    def build(
        cls,
        params: Sequence[SamplingParams],
        positions: Sequence[int],
        seeds: Sequence[int],
        vocab_size: int,
        device: torch.device | str,
    ) -> "SamplingRows":
        keys = [seed_key(seed) for seed in seeds]
        return cls(
            temperature=torch.tensor([1.0 if p.greedy else p.temperature for p in params], dtype=torch.float32),
            greedy=torch.tensor([p.greedy for p in params], dtype=torch.bool),
            key_lo=torch.tensor([k[0] for k in keys], dtype=torch.long),
            key_hi=torch.tensor([k[1] for k in keys], dtype=torch.long),
            position=torch.tensor(list(positions), dtype=torch.long),
            top_k=torch.tensor([p.top_k if p.top_k > 0 else vocab_size for p in params], dtype=torch.long),
            top_p=torch.tensor([p.top_p for p in params], dtype=torch.float32),
            filtered=any(p.top_k > 0 or p.top_p < 1.0 for p in params),
        ).to(device)

    def to(self, device: torch.device | str) -> "SamplingRows":
        moved = {name: getattr(self, name).to(device, non_blocking=True) for name in _ROW_TENSORS}
        return SamplingRows(**moved, filtered=self.filtered)

    def rows(self, count: int) -> "SamplingRows":
        """The first `count` rows (views: a captured graph reads the live buffers)."""
        return SamplingRows(**{name: getattr(self, name)[:count] for name in _ROW_TENSORS}, filtered=self.filtered)

    def copy_(self, other: "SamplingRows", count: int) -> None:
        """Overwrite the first `count` rows with `other`'s (in place, for graph input buffers)."""
        for name in _ROW_TENSORS:
            getattr(self, name)[:count].copy_(getattr(other, name), non_blocking=True)


_ROW_TENSORS = ("temperature", "greedy", "key_lo", "key_hi", "position", "top_k", "top_p")
