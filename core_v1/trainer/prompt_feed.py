"""Prompts for generation, a few at a time when needed."""

from __future__ import annotations

from typing import Any


class PromptFeed:
    """Hands out prompts from the epoch-shuffled sampler, which yields whole batches: a step takes a
    batch, a refill of evicted groups takes fewer, and leftovers wait for the next call."""

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self._pending: list[dict] = []

    def take(self, count: int) -> list[dict]:
        while len(self._pending) < count:
            self._pending.extend(self.sampler.next_batch())
        rows, self._pending = self._pending[:count], self._pending[count:]
        return rows
