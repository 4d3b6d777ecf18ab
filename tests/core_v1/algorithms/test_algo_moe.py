"""The MoE router losses against hand computations (core_v1.algorithms.moe)."""

import math

import pytest
import torch

from core_v1.algorithms.moe import load_balancing_loss, router_z_loss

LN3 = math.log(3.0)
MASK = torch.tensor([[1, 1, 0]])  # two real tokens and a padded one, whose logits must not count
PADDING = [100.0, -100.0]


def _layer(*tokens):
    return torch.tensor([*tokens, PADDING], requires_grad=True)


def test_a_balanced_router_scores_one_and_a_collapsed_one_more():
    # probs [.75, .25] and [.25, .75]: P = [1, 1], counts [1, 1] -> 2 / (1 * 2^2) * 2 = 1
    balanced = _layer([LN3, 0.0], [0.0, LN3])
    assert load_balancing_loss([balanced], MASK, top_k=1).item() == pytest.approx(1.0)
    # both tokens pick expert 0: P = [1.5, 0.5], counts [2, 0] -> 2 / 4 * 3 = 1.5
    collapsed = _layer([LN3, 0.0], [LN3, 0.0])
    assert load_balancing_loss([collapsed], MASK, top_k=1).item() == pytest.approx(1.5)
    # layers add up, as each Megatron MoE layer adds its own term
    assert load_balancing_loss([balanced, collapsed], MASK, top_k=1).item() == pytest.approx(2.5)
    # top-2 of 2 experts: every count is T, P sums to T -> E / (k T^2) * T * T = E / k = 1
    assert load_balancing_loss([collapsed], MASK, top_k=2).item() == pytest.approx(1.0)


def test_the_gradient_flows_through_the_probabilities_toward_balance():
    collapsed = _layer([LN3, 0.0], [LN3, 0.0])
    load_balancing_loss([collapsed], MASK, top_k=1).backward()
    assert (collapsed.grad[:2, 0] > 0).all() and (collapsed.grad[:2, 1] < 0).all()  # descent lowers expert 0
    assert collapsed.grad[2].abs().sum() == 0  # the padded token is not routed


def test_the_z_loss_is_the_mean_squared_logsumexp_per_layer():
    layer = _layer([LN3, 0.0], [0.0, 0.0])
    expected = (math.log(4.0) ** 2 + math.log(2.0) ** 2) / 2
    assert router_z_loss([layer], MASK).item() == pytest.approx(expected)
    assert router_z_loss([layer, layer], MASK).item() == pytest.approx(2 * expected)
    assert router_z_loss([], MASK).item() == 0.0
