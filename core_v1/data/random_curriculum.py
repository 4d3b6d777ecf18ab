"""`RandomCurriculumSampler`: a uniform random order each pass, behind the curriculum interface.

verl's launch scripts for curriculum training name a sampler from verl's own test tree
(`data.sampler.class_path=pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu`,
`class_name=RandomCurriculumSampler`): a random sampler whose `update(batch)` hook exists and does
nothing. It shows the curriculum plumbing without changing the order. This is rlbridge's sampler
of that meaning; the codemod and the config shim point those scripts here
(`shims/rename_table.py`, rule `verl-test-sampler`).

    data.sampler.class_path=pkg://core_v1.data.random_curriculum
    data.sampler.class_name=RandomCurriculumSampler

Where it departs from verl's: verl's draws each pass from torch's global generator (it makes a
seeded generator and then does not hand it over), so its order changes from run to run. This one
draws each pass with its own generator seeded by `data.seed` (1, verl's test seed, when unset), and
keeps the generator's state at the start of the current pass in checkpoints, so a resumed run
draws the same order as the uninterrupted one.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any, Iterator

import torch

from core_v1.data.samplers import AbstractCurriculumSampler

DEFAULT_SEED = 1


class RandomCurriculumSampler(AbstractCurriculumSampler):
    """Each pass: a fresh uniform permutation of the dataset's indices. `update` changes nothing."""

    def __init__(self, data_source: Sized, data_config: Any):
        self.size = len(data_source)
        seed = data_config.get("seed") if data_config is not None else None
        self.generator = torch.Generator()
        self.generator.manual_seed(DEFAULT_SEED if seed is None else int(seed))
        self._pass_start = self.generator.get_state()  # where the current pass's permutation was drawn from

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[int]:
        self._pass_start = self.generator.get_state()
        return iter(torch.randperm(self.size, generator=self.generator).tolist())

    def update(self, batch: Any) -> None:
        """The curriculum hook: this sampler's order does not depend on what was trained."""

    def state_dict(self) -> dict:
        # The state before the current pass's draw: a resumed run draws that pass again and skips
        # what was already trained (core_v1.data.samplers.CustomSamplerFeed).
        return {"generator": self._pass_start.clone()}

    def load_state_dict(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self._pass_start = self.generator.get_state()
