"""Step metrics that say whether learning can go on."""

import torch

from core_v1.trainer.metrics import zero_variance_group_fraction


def test_zero_variance_groups_are_the_ones_whose_samples_all_scored_alike():
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5, 0.5, 0.5])
    # a: all right, c: all the same partial credit (no signal either); b: mixed.
    assert zero_variance_group_fraction(scores, list("aabbccc")) == 2 / 3
    assert zero_variance_group_fraction(scores[2:4], ["b", "b"]) == 0.0
