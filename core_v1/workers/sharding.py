"""Which rows of a batch each data-parallel rank works on.

A PPO update takes one optimizer step per *mini-batch* of consecutive rows of the batch. Every
rank must step on its part of the same global mini-batch, so rows are dealt mini-batch by
mini-batch: rank r's shard is its part of mini-batch 0, then its part of mini-batch 1, ...; the
engine on each rank then cuts its shard into pieces of `mini_batch_rows / world` rows and sees
exactly its part of each global mini-batch. The set of rows in a mini-batch therefore does not
depend on the number of ranks, which is what makes 2 ranks train as 1 does.

Within a mini-batch, `balance=True` (`trainer.balance_batch`) deals the rows, longest first, to
the rank with the fewest tokens so far (every rank gets the same number of rows); otherwise rank
r takes a contiguous slice.

Every forward and backward under FSDP is a collective, so each rank must get the same number of
rows. When a mini-batch does not split evenly (a batch that lost failed samples), the short
ranks get *padding rows*: a copy of one of their rows flagged `padding`, whose outputs are
dropped and whose `response_mask` is zeroed for updates, so it adds nothing to any loss or count.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence


@dataclasses.dataclass(frozen=True)
class Shard:
    """One rank's rows: indices into the batch (padding rows repeat a real one) and which are padding."""

    rows: tuple[int, ...]
    padding: tuple[bool, ...]

    @property
    def real_rows(self) -> list[int]:
        return [row for row, pad in zip(self.rows, self.padding) if not pad]


def shard_rows(
    lengths: Sequence[int], world: int, mini_batch_rows: Optional[int] = None, balance: bool = True
) -> list[Shard]:
    """Deal `len(lengths)` rows (with those token counts) to `world` ranks, mini-batch by mini-batch.

    `mini_batch_rows=None` treats the whole batch as one mini-batch (forward passes).
    """
    total = len(lengths)
    chunk = mini_batch_rows or total or 1
    rows: list[list[int]] = [[] for _ in range(world)]
    padding: list[list[bool]] = [[] for _ in range(world)]
    for start in range(0, total, chunk):
        members = list(range(start, min(start + chunk, total)))
        share = -(-len(members) // world)
        dealt = _deal_balanced(members, lengths, world, share) if balance else _deal_contiguous(members, world, share)
        for rank, mine in enumerate(dealt):
            filler = mine[-1] if mine else members[0]
            rows[rank] += mine + [filler] * (share - len(mine))
            padding[rank] += [False] * len(mine) + [True] * (share - len(mine))
    return [Shard(tuple(r), tuple(p)) for r, p in zip(rows, padding)]


def _deal_contiguous(members: list[int], world: int, share: int) -> list[list[int]]:
    return [members[rank * share : (rank + 1) * share] for rank in range(world)]


def _deal_balanced(members: list[int], lengths: Sequence[int], world: int, share: int) -> list[list[int]]:
    dealt: list[list[int]] = [[] for _ in range(world)]
    tokens = [0] * world
    for row in sorted(members, key=lambda r: (-lengths[r], r)):
        rank = min((r for r in range(world) if len(dealt[r]) < share), key=lambda r: (tokens[r], r))
        dealt[rank].append(row)
        tokens[rank] += lengths[row]
    # Keep the batch's order inside each rank's part (the order of micro-batches then follows it).
    return [sorted(mine) for mine in dealt]


def token_imbalance(lengths: Sequence[int], shards: Sequence[Shard]) -> float:
    """max / mean tokens per rank over the real rows (1.0 is perfectly balanced)."""
    per_rank = [sum(lengths[row] for row in shard.real_rows) for shard in shards]
    mean = sum(per_rank) / max(1, len(per_rank))
    return max(per_rank) / mean if mean else 1.0
