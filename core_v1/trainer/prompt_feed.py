"""Prompts for generation, a few at a time when needed."""

from __future__ import annotations

from typing import Any


class PromptFeed:
    """Hands out prompts from the epoch-shuffled sampler, which yields whole batches: a step takes a
    batch, a refill of evicted groups takes fewer, and leftovers wait for the next call.

    Its position is the sampler's plus the leftovers: a checkpoint keeps both (`state_dict`), so a
    resumed run hands out the very prompts the uninterrupted run would have.
    """

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self._pending: list[dict] = []

    def take(self, count: int) -> list[dict]:
        while len(self._pending) < count:
            self._pending.extend(self.sampler.next_batch())
        rows, self._pending = self._pending[:count], self._pending[count:]
        return rows

    def state_dict(self) -> dict:
        return {"sampler": self.sampler.state_dict(), "pending": [dict(row) for row in self._pending]}

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state["sampler"])
        self._pending = [dict(row) for row in state["pending"]]
