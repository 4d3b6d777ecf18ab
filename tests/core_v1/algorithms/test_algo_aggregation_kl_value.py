"""agg_loss modes, KL estimators and controllers, the in-reward penalty, the critic loss."""

import math

import pytest
import torch

from core_v1.algorithms import (
    LOSS_AGG_MODES,
    AdaptiveKLController,
    AlgorithmConfigError,
    AlgorithmInputError,
    FixedKLController,
    agg_loss,
    apply_kl_penalty,
    compute_value_loss,
    get_kl_controller,
    kl_penalty,
)

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the third row has no valid token


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 4) / 3),
        ("seq-mean-token-sum", (3 + 4) / 2),
        ("seq-mean-token-mean", (1.5 + 4) / 2),
        ("seq-mean-token-sum-norm", (3 + 4) / 2 / 3),
    ],
)
def test_each_agg_mode(mode, expected):
    torch.testing.assert_close(agg_loss(LOSS, MASK, mode), torch.tensor(expected))


def test_sum_norm_takes_an_explicit_scale():
    torch.testing.assert_close(
        agg_loss(LOSS, MASK, "seq-mean-token-sum-norm", loss_scale_factor=7), torch.tensor(3.5 / 7)
    )


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_with_global_counts_sum_to_the_full_batch(mode):
    full = agg_loss(LOSS[:2], MASK[:2], mode)
    halves = sum(
        agg_loss(LOSS[i : i + 1], MASK[i : i + 1], mode, global_num_tokens=3, global_num_seqs=2, loss_scale_factor=3)
        for i in range(2)
    )
    torch.testing.assert_close(halves, full)


def test_all_padding_micro_batch_gives_zero_not_nan():
    assert agg_loss(LOSS[2:], MASK[2:], "token-mean").item() == 0.0


def test_dp_needs_global_counts_and_unknown_mode_lists_modes():
    with pytest.raises(AlgorithmInputError, match="global_num_tokens is required"):
        agg_loss(LOSS, MASK, "token-mean", dp_size=2)
    with pytest.raises(AlgorithmConfigError) as error:
        agg_loss(LOSS, MASK, "token-sum")
    assert all(mode in str(error.value) for mode in LOSS_AGG_MODES)


@pytest.mark.parametrize(
    "name, d_pos, d_neg",
    [
        ("kl", 0.5, -0.5),
        ("k1", 0.5, -0.5),
        ("abs", 0.5, 0.5),
        ("mse", 0.125, 0.125),
        ("k2", 0.125, 0.125),
        ("low_var_kl", math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1),
        ("k3", math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1),
    ],
)
def test_kl_estimators(name, d_pos, d_neg):
    # d = logprob - ref_logprob = +0.5 and -0.5
    got = kl_penalty(torch.tensor([-1.0, -1.5]), torch.tensor([-1.5, -1.0]), name)
    torch.testing.assert_close(got, torch.tensor([d_pos, d_neg]))


def test_k3_is_clamped_to_ten():
    assert kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl").item() == 10.0


def test_straight_through_keeps_value_and_takes_k2_gradient():
    logprob = torch.tensor([-1.0], requires_grad=True)
    ref = torch.tensor([-1.5])
    plain = kl_penalty(logprob, ref, "k3")
    straight = kl_penalty(logprob, ref, "k3+")
    torch.testing.assert_close(straight, plain)
    (grad_straight,) = torch.autograd.grad(straight.sum(), logprob)
    (grad_plain,) = torch.autograd.grad(kl_penalty(logprob, ref, "k3").sum(), logprob)
    torch.testing.assert_close(grad_straight, torch.tensor([0.5]))  # d(d^2/2)/dd = d
    torch.testing.assert_close(grad_plain, torch.tensor([1 - math.exp(-0.5)]))


def test_unknown_and_full_kl_are_explained():
    with pytest.raises(AlgorithmConfigError, match="low_var_kl"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "k4")
    with pytest.raises(AlgorithmConfigError, match="whole vocabulary"):
        kl_penalty(torch.zeros(1), torch.zeros(1), "full")


def test_adaptive_controller_moves_by_at_most_twenty_percent_per_horizon():
    controller = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    controller.update(current_kl=0.2, n_steps=10)  # error clipped to +0.2
    assert controller.value == pytest.approx(0.1 * 1.02)
    controller.update(current_kl=0.05, n_steps=10)  # error clipped to -0.2
    assert controller.value == pytest.approx(0.1 * 1.02 * 0.98)
    fixed = FixedKLController(0.3)
    fixed.update(5.0, 10)
    assert fixed.value == 0.3


def test_kl_controller_factory():
    adaptive = get_kl_controller({"type": "adaptive", "kl_coef": 0.3, "target_kl": 0.1, "horizon": 1000})
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.value == 0.3
    assert isinstance(get_kl_controller({"type": "fixed", "kl_coef": 0.2}), FixedKLController)
    with pytest.raises(AlgorithmConfigError, match="fixed, adaptive"):
        get_kl_controller({"type": "pid"})
    with pytest.raises(AlgorithmConfigError, match="horizon"):
        get_kl_controller({"type": "adaptive", "horizon": 0})


def test_apply_kl_penalty_subtracts_beta_kl_and_updates_controller():
    scores = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    old = torch.full((2, 3), -1.0)
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-1.0, -2.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    controller = AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    rewards, metrics = apply_kl_penalty(scores, old, ref, mask, controller, kl_penalty="kl")
    torch.testing.assert_close(rewards, torch.tensor([[-0.05, 0.0, 1.05], [0.0, 0.9, 0.0]]))
    assert metrics["actor/reward_kl_penalty"] == pytest.approx((0 / 3 + 1 / 2) / 2)
    assert metrics["actor/reward_kl_penalty_coeff"] == 0.1
    assert controller.value == pytest.approx(0.1 * (1 + 0.2 * 2 / 100))  # kl 0.25 vs target 0.1, n = B = 2


def test_value_loss_clips_around_old_values():
    vpreds = torch.tensor([[1.0, 2.0]], requires_grad=True)
    values = torch.tensor([[0.5, 2.0]])
    returns = torch.tensor([[2.0, 1.0]])
    # token 0: clip(1.0, 0.3, 0.7) = 0.7 -> max(1, 1.69) = 1.69 (clipped); token 1: max(1, 1) = 1.
    vf_loss, clipfrac = compute_value_loss(vpreds, returns, values, torch.ones(1, 2), cliprange_value=0.2)
    torch.testing.assert_close(vf_loss, torch.tensor(0.5 * (1.69 + 1.0) / 2))
    torch.testing.assert_close(clipfrac, torch.tensor(0.5))
    (grad,) = torch.autograd.grad(vf_loss, vpreds)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5 * 2 * (2.0 - 1.0) / 2]]))
