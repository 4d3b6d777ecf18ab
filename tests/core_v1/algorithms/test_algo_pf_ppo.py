"""PF-PPO's weights against hand-computed values, and the resampled rows following them."""

import pytest
import torch

from core_v1.algorithms import AlgorithmConfigError
from core_v1.algorithms.pf_ppo import pf_ppo_generator, pf_ppo_metrics, pf_ppo_resample_indices, pf_ppo_weights
from core_v1.config import ConfigError, load_config


def on_last_token(scores, width=3):
    """[B, width] token scores holding each sequence score on the last token."""
    tokens = torch.zeros(len(scores), width)
    tokens[:, -1] = torch.tensor(scores, dtype=torch.float32)
    return tokens


SCORES = torch.tensor([-2.0, 0.5, 1.0, 1.0, 0.0])


def test_pow_weights_are_absolute_scores_to_the_power():
    assert torch.allclose(pf_ppo_weights(SCORES, "pow", 2.0), torch.tensor([4.0, 0.25, 1.0, 1.0, 0.0]))
    assert torch.allclose(pf_ppo_weights(SCORES, "pow", 1.0), SCORES.abs())


def test_max_min_keeps_every_row_at_either_extreme():
    assert pf_ppo_weights(SCORES, "max_min").tolist() == [1.0, 0.0, 1.0, 1.0, 0.0]


def test_max_random_favours_the_best_rows():
    assert torch.allclose(pf_ppo_weights(SCORES, "max_random"), torch.tensor([0.1, 0.1, 0.4, 0.4, 0.1]))


def test_unknown_method_is_a_config_error():
    with pytest.raises(AlgorithmConfigError, match="reweight_method='best'"):
        pf_ppo_weights(SCORES, "best")


def test_max_min_draws_only_extreme_rows():
    indices = pf_ppo_resample_indices(
        on_last_token([0.2, 0.9, 0.5, -1.0, 0.5, 0.9]), "max_min", generator=pf_ppo_generator(1, 1)
    )
    assert len(indices) == 6
    assert set(indices.tolist()) <= {1, 3, 5}


def test_pow_draw_frequencies_follow_the_weights():
    # 3000 rows with scores 0, 1 and 2 in equal numbers: weights 0, 1, 4 -> shares 0, 1/5, 4/5.
    scores = [0.0, 1.0, 2.0] * 1000
    indices = pf_ppo_resample_indices(on_last_token(scores), "pow", 2.0, generator=pf_ppo_generator(3, 7))
    drawn = torch.tensor(scores)[indices]
    shares = [(drawn == value).float().mean().item() for value in (0.0, 1.0, 2.0)]
    assert shares[0] < 0.001
    assert shares[1] == pytest.approx(0.2, abs=0.03) and shares[2] == pytest.approx(0.8, abs=0.03)


def test_all_zero_weights_sample_uniformly():
    indices = pf_ppo_resample_indices(torch.zeros(4000, 2), "pow", generator=pf_ppo_generator(0, 0))
    counts = torch.bincount(indices, minlength=4000)
    assert counts.max() < 12 and torch.unique(indices).numel() > 2000


def test_the_draw_is_fixed_by_seed_and_step():
    tokens = on_last_token([0.1, 0.4, 0.3, 0.9, 0.2, 0.7, 0.5, 0.6])
    first = pf_ppo_resample_indices(tokens, "pow", generator=pf_ppo_generator(5, 2))
    assert torch.equal(first, pf_ppo_resample_indices(tokens, "pow", generator=pf_ppo_generator(5, 2)))
    others = [pf_ppo_resample_indices(tokens, "pow", generator=pf_ppo_generator(5, step)) for step in range(3, 8)]
    assert any(not torch.equal(first, other) for other in others)


def test_unique_row_fraction():
    assert pf_ppo_metrics(torch.tensor([0, 0, 1, 3])) == {"pf_ppo/unique_row_fraction": 0.75}


def test_config_refuses_an_unknown_method(tiny_assets):
    from tests.conftest import quickstart_overrides

    overrides = quickstart_overrides(
        tiny_assets, "/tmp/unused", 1, "algorithm.use_pf_ppo=true", "algorithm.pf_ppo.reweight_method=best"
    )
    with pytest.raises(ConfigError, match="algorithm.pf_ppo.reweight_method='best' is not one of pow, max_min"):
        load_config(overrides, config_name="quickstart")
