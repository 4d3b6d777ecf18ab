"""verl's GPG estimator and loss, and GMPO's geo_mean loss, on hand-computed cases."""

from __future__ import annotations

import math

import torch

from core_v1.algorithms import get_adv_estimator_fn
from core_v1.algorithms.policy_loss import get_policy_loss_fn


def test_gpg_advantage_rescales_by_the_share_of_nonzero_scores():
    rewards = torch.zeros(6, 3)
    rewards[0, 2] = 1.0
    rewards[2, 1] = 1.0  # groups a: [1, 0], b: [1, 0], c: [0, 0] -> 2 of 6 rows score, alpha = 3
    mask = torch.ones(6, 3)
    advantages, returns = get_adv_estimator_fn("gpg")(
        token_level_rewards=rewards, response_mask=mask, index=["a", "a", "b", "b", "c", "c"]
    )
    assert advantages[:, 0].tolist() == [1.5, -1.5, 1.5, -1.5, 0.0, 0.0]
    assert torch.equal(advantages, returns)


def test_gpg_loss_is_the_plain_policy_gradient():
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, metrics = get_policy_loss_fn("gpg")(
        log_prob.detach() - 5, log_prob, torch.tensor([[2.0, 2.0]]), torch.ones(1, 2)
    )
    loss.backward()
    assert math.isclose(float(loss), 3.0) and log_prob.grad.tolist() == [[-1.0, -1.0]]  # no ratio, no clip
    assert float(metrics["actor/pg_clipfrac"]) == 0.0


def test_geo_mean_clips_each_token_pessimistically_and_weighs_sequences_equally():
    geo_mean = get_policy_loss_fn("geo_mean")
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    old = torch.zeros(2, 3)
    log_prob = torch.tensor([[0.5, 0.0, -0.1], [0.0, 0.0, 0.0]], requires_grad=True)
    loss, metrics = geo_mean(old, log_prob, advantages, mask, clip_ratio=0.2)
    loss.backward()
    # Sequence 1 (A > 0): the 0.5 log-ratio is clipped to 0.2, the others stay: ratio = exp((0.2 + 0 - 0.1) / 3).
    # Sequence 2 (A < 0): ratio 1. Loss = mean(-1 * ratio_1, 2 * 1).
    expected = (-math.exp(0.1 / 3) + 2.0) / 2
    assert math.isclose(float(loss), expected, rel_tol=1e-5)
    assert log_prob.grad[0, 0] == 0.0 and log_prob.grad[0, 1] != 0.0  # the clipped token gets no gradient
    assert math.isclose(float(metrics["actor/pg_clipfrac"]), 1 / 4, rel_tol=1e-5)  # 1 of the 4 valid tokens
