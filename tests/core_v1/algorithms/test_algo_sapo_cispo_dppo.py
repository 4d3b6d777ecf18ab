"""verl's SAPO, CISPO and DPPO (TV and binary-KL) losses on hand-computed cases, and each selected
by its verl config key in a real actor (the key's value and options reach the loss)."""

from __future__ import annotations

import math

import pytest
import torch

from core_v1.algorithms import AlgorithmConfigError, get_policy_loss_fn
from core_v1.config import ConfigError, load_config
from tests.core_v1.workers.conftest import build_batch, tiny_model_dir  # noqa: F401 - a fixture


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def gate(ratio, tau):
    return sigmoid(tau * (ratio - 1)) * 4 / tau


def log_probs_from(old_probs, new_probs):
    old = torch.log(torch.tensor([old_probs]))
    new = torch.log(torch.tensor([new_probs])).requires_grad_(True)
    return old, new


# ------------------------------------------------------------------------------------------ SAPO
def test_sapo_gates_each_ratio_with_the_temperature_of_its_advantage_sign():
    old = torch.zeros(1, 3)
    log_prob = torch.log(torch.tensor([[1.2, 0.9, 1.0]])).requires_grad_(True)
    advantages = torch.tensor([[1.0, -1.0, 2.0]])
    loss, metrics = get_policy_loss_fn("sapo")(old, log_prob, advantages, torch.ones(1, 3), tau_pos=1.0, tau_neg=1.05)
    expected = (-1.0 * gate(1.2, 1.0) + 1.0 * gate(0.9, 1.05) - 2.0 * gate(1.0, 1.0)) / 3
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    (grad,) = torch.autograd.grad(loss, log_prob)
    # d f(r)/d log r = 4 s (1 - s) r with s = sigmoid(tau (r - 1)): at r = 1 the plain policy gradient.
    s = sigmoid(0.2)
    torch.testing.assert_close(grad[0, 0], torch.tensor(-1.0 * 4 * s * (1 - s) * 1.2 / 3))
    torch.testing.assert_close(grad[0, 2], torch.tensor(-2.0 / 3))
    assert float(metrics["actor/pg_clipfrac"]) == 0.0 and float(metrics["actor/pg_clipfrac_lower"]) == 0.0
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(-(math.log(1.2) + math.log(0.9)) / 3, rel=1e-5)


def test_sapo_always_averages_per_sequence_and_skips_padding():
    old = torch.zeros(2, 3)
    # Row 1 has one valid token; its padding holds a huge log-ratio that must not count.
    log_prob = torch.log(torch.tensor([[1.1, 1.3, 0.8], [0.7, 50.0, 50.0]]))
    advantages = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    weights = torch.tensor([[1.0, 0.5, 2.0], [1.5, 9.0, 9.0]])
    row0 = (-gate(1.1, 1.0) - 0.5 * gate(1.3, 1.0) - 2.0 * gate(0.8, 1.0)) / 3
    row1 = 1.5 * gate(0.7, 1.05)
    for mode in ("token-mean", "seq-mean-token-sum"):  # verl ignores loss_agg_mode for SAPO
        loss, _ = get_policy_loss_fn("sapo")(
            old, log_prob, advantages, mask, loss_agg_mode=mode, rollout_is_weights=weights
        )
        assert float(loss.detach()) == pytest.approx((row0 + row1) / 2, rel=1e-5)


def test_sapo_refuses_a_non_positive_temperature():
    with pytest.raises(AlgorithmConfigError, match="tau_neg=0"):
        get_policy_loss_fn("sapo")(
            torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), tau_neg=0.0
        )


# ----------------------------------------------------------------------------------------- CISPO
def test_cispo_clips_the_weight_and_keeps_every_tokens_gradient():
    old, log_prob = log_probs_from([0.4, 0.5, 0.2], [0.6, 0.25, 0.22])  # ratios 1.5, 0.5, 1.1
    advantages = torch.tensor([[1.0, 1.0, -1.0]])
    loss, metrics = get_policy_loss_fn("cispo")(old, log_prob, advantages, torch.ones(1, 3), clip_ratio=0.2)
    clipped = [1.2, 0.8, 1.1]
    logs = [math.log(0.6), math.log(0.25), math.log(0.22)]
    expected = (-clipped[0] * logs[0] - clipped[1] * logs[1] + clipped[2] * logs[2]) / 3
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    (grad,) = torch.autograd.grad(loss, log_prob)
    # No gradient through the ratio: -sg[w] * A / n per token, also where PPO's clip would give 0.
    torch.testing.assert_close(grad, torch.tensor([[-1.2 / 3, -0.8 / 3, 1.1 / 3]]))
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(2 / 3)


def test_cispo_takes_a_lower_bound_above_one_as_no_lower_bound():
    # verl's CISPO example: clip_ratio_low=10, clip_ratio_high=0.2.
    old, log_prob = log_probs_from([0.4, 0.5, 0.1], [0.6, 0.25, 0.01])  # ratios 1.5, 0.5, 0.1
    loss, metrics = get_policy_loss_fn("cispo")(
        old, log_prob, torch.ones(1, 3), torch.ones(1, 3), clip_ratio_low=10.0, clip_ratio_high=0.2
    )
    expected = -(1.2 * math.log(0.6) + 0.5 * math.log(0.25) + 0.1 * math.log(0.01)) / 3
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(1 / 3)


def test_cispo_aggregates_as_configured():
    old, log_prob = log_probs_from([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])
    log_prob = log_prob.detach().expand(2, 3)
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    advantages = torch.tensor([[1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    token_mean, _ = get_policy_loss_fn("cispo")(old.expand(2, 3), log_prob, advantages, mask)
    seq_mean, _ = get_policy_loss_fn("cispo")(
        old.expand(2, 3), log_prob, advantages, mask, loss_agg_mode="seq-mean-token-mean"
    )
    minus_log = -math.log(0.5)
    assert float(token_mean) == pytest.approx((3 * minus_log + 3 * minus_log) / 4, rel=1e-6)
    assert float(seq_mean) == pytest.approx((minus_log + 3 * minus_log) / 2, rel=1e-6)


# ------------------------------------------------------------------------------------------ DPPO
def test_dppo_tv_drops_tokens_whose_probability_moved_past_the_bound_in_the_advantages_direction():
    old_probs, new_probs = [0.5, 0.5, 0.1, 0.9, 0.01], [0.7, 0.6, 0.05, 0.7, 0.05]
    old, log_prob = log_probs_from(old_probs, new_probs)
    advantages = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0]])
    loss, metrics = get_policy_loss_fn("dppo_tv")(old, log_prob, advantages, torch.ones(1, 5), clip_ratio=0.15)
    # Kept: +0.1 (A > 0), -0.05 (A < 0), and the rare token's +0.04 although its ratio is 5.
    # Dropped: +0.2 (A > 0) and -0.2 (A < 0). clip_ratio_c = 3 truncates the ratio 5 to 3.
    expected = (-1.2 * math.log(0.6) + 0.5 * math.log(0.05) - 3.0 * math.log(0.05)) / 5
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    (grad,) = torch.autograd.grad(loss, log_prob)
    torch.testing.assert_close(grad, torch.tensor([[0.0, -1.2 / 5, 0.5 / 5, 0.0, -3.0 / 5]]))
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(2 / 5)
    assert float(metrics["actor/pg_clipfrac_lower"]) == pytest.approx(1 / 5)  # kept and truncated


def test_dppo_tv_asymmetric_thresholds_and_masking():
    old, log_prob = log_probs_from([0.5, 0.5, 0.5], [0.62, 0.38, 0.9])
    advantages = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, metrics = get_policy_loss_fn("dppo_tv")(
        old, log_prob, advantages, mask, clip_ratio_low=0.1, clip_ratio_high=0.15
    )
    # +0.12 <= 0.15 kept; -0.12 < -0.1 dropped; the padded token counts nowhere.
    assert float(loss.detach()) == pytest.approx(-(0.62 / 0.5) * math.log(0.62) / 2, rel=1e-5)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(1 / 2)


def binary_kl(old_p, p):
    return old_p * math.log(old_p / p) + (1 - old_p) * math.log((1 - old_p + 1e-8) / (1 - p + 1e-8))


def test_dppo_kl_bounds_the_binary_kl_only_against_the_advantages_push():
    old_probs, new_probs = [0.5, 0.5, 0.5, 0.5, 0.5], [0.7, 0.55, 0.2, 0.9, 0.2]
    advantages = [1.0, 1.0, 1.0, -1.0, -1.0]
    assert binary_kl(0.5, 0.7) > 0.05 > binary_kl(0.5, 0.55) and binary_kl(0.5, 0.2) > 0.05
    old, log_prob = log_probs_from(old_probs, new_probs)
    loss, metrics = get_policy_loss_fn("dppo_kl")(
        old, log_prob, torch.tensor([advantages]), torch.ones(1, 5), clip_ratio=0.05
    )
    # Kept: p 0.55 (small KL); p fell with A > 0; p rose with A < 0. Dropped: 0.7 (A > 0), 0.2 (A < 0).
    kept = [False, True, True, True, False]
    expected = sum(-a * (p / o) * math.log(p) for a, o, p, k in zip(advantages, old_probs, new_probs, kept) if k) / 5
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(2 / 5)


def test_dppo_refuses_a_negative_threshold():
    with pytest.raises(AlgorithmConfigError, match="divergence thresholds"):
        get_policy_loss_fn("dppo_tv")(
            torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), torch.ones(1, 1), clip_ratio_low=-0.1
        )


# ----------------------------------------------------------------------- selected by verl's keys
LOSS = "actor_rollout_ref.actor."


@pytest.mark.parametrize(
    "overrides, options",
    [
        (
            [f"{LOSS}policy_loss.loss_mode=sapo", f"{LOSS}tau_pos=2.0", f"{LOSS}tau_neg=3.0"],
            dict(tau_pos=2.0, tau_neg=3.0),
        ),
        (
            [f"{LOSS}policy_loss.loss_mode=cispo", f"{LOSS}clip_ratio_low=10", f"{LOSS}clip_ratio_high=0.01"],
            dict(clip_ratio_low=10.0, clip_ratio_high=0.01),
        ),
        (
            [f"{LOSS}policy_loss.loss_mode=dppo_tv", f"{LOSS}clip_ratio=0.001", f"{LOSS}clip_ratio_c=1.02"],
            dict(clip_ratio=0.001, clip_ratio_c=1.02),
        ),
        (
            [f"{LOSS}policy_loss.loss_mode=dppo_kl", f"{LOSS}clip_ratio=0.0001", f"{LOSS}clip_ratio_c=1.02"],
            dict(clip_ratio=0.0001, clip_ratio_c=1.02),
        ),
    ],
    ids=["sapo", "cispo", "dppo_tv", "dppo_kl"],
)
def test_the_verl_loss_mode_and_its_options_reach_the_actors_loss(tiny_model_dir, overrides, options):  # noqa: F811 - the fixture
    from core_v1.workers import ActorEngine

    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "data.train_files=unused.parquet",
            "data.train_batch_size=8",
            f"{LOSS}ppo_mini_batch_size=8",
            f"{LOSS}optim.lr=1e-3",
            *overrides,
        ]
    )
    actor = ActorEngine(config)
    batch = build_batch(rows=8, seed=1)
    log_prob, _ = actor.compute_log_prob(batch)
    noise = torch.randn(log_prob.shape, generator=torch.Generator().manual_seed(2))
    batch["old_log_probs"] = log_prob + 0.3 * noise  # ratios spread around 1
    loss_fn = get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)
    inputs = (batch["old_log_probs"], log_prob, batch["advantages"], batch["response_mask"])
    expected, _ = loss_fn(*inputs, **options)
    with_defaults, _ = loss_fn(*inputs)
    assert abs(float(expected) - float(with_defaults)) > 1e-3  # the options change this loss
    metrics = actor.update_policy(batch)  # one mini-batch: pg_loss is measured before the step
    assert metrics["actor/pg_loss"] == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


def test_sapo_temperatures_must_be_positive_in_the_config():
    with pytest.raises(ConfigError, match="tau_pos and tau_neg"):
        load_config(["data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused", f"{LOSS}tau_pos=0"])
