"""A curriculum sampler in verl's API: the prompts the policy does worst on come first.

    python -m examples.quickstart \
        data.sampler.class_path=examples/curriculum_sampler/difficulty_sampler.py \
        data.sampler.class_name=DifficultySampler

It runs as written on V1 and on V0 (`trainer.use_v1=false`), and a verl sampler of this shape runs
the same way once its import names `core_v1.data.samplers` (the codemod rewrites verl's
`verl.experimental.dataset.sampler` to it).

How it orders: each pass over the dataset draws, one prompt at a time, the prompt with the lowest
mean score so far among those not yet drawn in this pass; prompts never trained on come first, and
ties go by a permutation fixed by `data.seed`. The draw is lazy, so every `update(batch=...)` (the
trainer calls it after each step with the step's batch) reorders what the rest of the pass draws.

What it keeps for a resumed run: the scores (`state_dict`, the sampler's state) and the prompts
drawn in the current pass (the pass iterator's own `state_dict`), so a resumed run draws what the
uninterrupted run would have.
"""

from __future__ import annotations

import random

from core_v1.data.samplers import AbstractCurriculumSampler  # verl: verl.experimental.dataset.sampler


class DifficultySampler(AbstractCurriculumSampler):
    def __init__(self, data_source, data_config):
        self.size = len(data_source)
        # Batch rows name their prompt by `extra_info.index` (rlbridge fills it with the row number).
        self.position = {data_source[i]["extra_info"]["index"]: i for i in range(self.size)}
        tie_break = list(range(self.size))
        random.Random(data_config.get("seed") or 0).shuffle(tie_break)
        self.tie_break = {position: rank for rank, position in enumerate(tie_break)}
        self.scores: dict[int, list[float]] = {}  # dataset position -> [score sum, samples]

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> "_Pass":
        return _Pass(self)

    def difficulty(self, position: int) -> tuple:
        total, count = self.scores.get(position, (0.0, 0))
        return (count > 0, total / count if count else 0.0, self.tie_break[position])

    def update(self, batch) -> None:
        scores = batch.batch["token_level_scores"].sum(dim=-1).tolist()
        for extra_info, score in zip(batch.non_tensor_batch["extra_info"], scores):
            entry = self.scores.setdefault(self.position[extra_info["index"]], [0.0, 0])
            entry[0] += score
            entry[1] += 1

    def state_dict(self) -> dict:
        return {"scores": {position: list(entry) for position, entry in self.scores.items()}}

    def load_state_dict(self, state: dict) -> None:
        self.scores = {int(position): list(entry) for position, entry in state["scores"].items()}


class _Pass:
    """One pass: the hardest prompt not yet drawn, chosen when it is asked for."""

    def __init__(self, sampler: DifficultySampler):
        self.sampler = sampler
        self.drawn: list[int] = []

    def __iter__(self) -> "_Pass":
        return self

    def __next__(self) -> int:
        left = set(range(self.sampler.size)) - set(self.drawn)
        if not left:
            raise StopIteration
        position = min(left, key=self.sampler.difficulty)
        self.drawn.append(position)
        return position

    def state_dict(self) -> dict:
        return {"drawn": list(self.drawn)}

    def load_state_dict(self, state: dict) -> None:
        self.drawn = list(state["drawn"])
