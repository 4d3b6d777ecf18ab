"""verl's Clip-Cov and KL-Cov losses against a direct token-by-token computation (Python floats)."""

from __future__ import annotations

import math

import pytest
import torch

from core_v1.algorithms import AlgorithmConfigError, get_policy_loss_fn


def case(seed: int, rows: int = 4, width: int = 12):
    torch.manual_seed(seed)
    old = -torch.rand(rows, width) * 3
    new = (old + torch.randn(rows, width) * 0.3).requires_grad_(True)
    advantages = torch.randn(rows, 1).expand(rows, width).contiguous() * 3
    mask = torch.ones(rows, width)
    mask[1, 8:] = 0
    mask[3, 5:] = 0
    return old, new, advantages, mask


def token_list(*tensors):
    return [t.detach().flatten().tolist() for t in tensors]


def covariances(advantages, log_prob, mask):
    a, lp, m = token_list(advantages, log_prob, mask)
    valid = [i for i, v in enumerate(m) if v > 0]
    mean_a = sum(a[i] for i in valid) / len(valid)
    mean_lp = sum(lp[i] for i in valid) / len(valid)
    return [(a[i] - mean_a) * (lp[i] - mean_lp) for i in range(len(a))], valid


def test_clip_cov_removes_exactly_the_tokens_in_the_covariance_band_that_ppo_did_not_clip():
    old, new, advantages, mask = case(0)
    low = high = 0.2
    cov, valid = covariances(advantages, new, mask)
    o, n, a = token_list(old, new, advantages)
    ranked = sorted(cov[i] for i in valid)
    lb, ub = (ranked[len(valid) // 2] + ranked[len(valid) // 2 + 1]) / 2, max(cov) + 1  # the upper half
    ratio = [math.exp(n[i] - o[i]) for i in range(len(o))]
    unclipped = [-a[i] * ratio[i] for i in range(len(o))]
    clipped = [-a[i] * min(max(ratio[i], 1 - low), 1 + high) for i in range(len(o))]
    band = {i for i in valid if clipped[i] <= unclipped[i] and lb < cov[i] < ub}
    assert 0 < len(band) < len(valid)
    # A budget as large as the batch removes every token of the band, so the result is not random.
    loss, metrics = get_policy_loss_fn("clip_cov")(
        old, new, advantages, mask, clip_ratio=0.2, clip_cov_ratio=1.0, clip_cov_lb=lb, clip_cov_ub=ub
    )
    per_token = [0.0 if i in band else max(unclipped[i], clipped[i]) for i in range(len(o))]
    assert float(loss) == pytest.approx(sum(per_token[i] for i in valid) / len(valid), rel=1e-5)
    assert float(metrics["actor/pg_clipfrac"]) == pytest.approx(len(band) / len(valid))
    (grad,) = torch.autograd.grad(loss, new)
    assert all(grad.flatten()[i] == 0 for i in band)
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(sum(o[i] - n[i] for i in valid) / len(valid), rel=1e-5)


def test_clip_cov_draws_its_budget_at_random_from_the_band():
    old, new, advantages, mask = case(1)
    cov, valid = covariances(advantages, new, mask)
    lb = min(cov[i] for i in valid) - 1  # every valid token is in the band (clip_ratio=10: PPO clips none)
    budget_ratio = 3.5 / len(valid)  # floor(3.5) = 3 tokens
    removed = set()
    for seed in range(6):
        loss, metrics = get_policy_loss_fn("clip_cov")(
            old,
            new,
            advantages,
            mask,
            clip_cov_ratio=budget_ratio,
            clip_cov_lb=lb,
            clip_cov_ub=1e9,
            clip_ratio=0.9,
            generator=torch.Generator().manual_seed(seed),
        )
        (grad,) = torch.autograd.grad(loss, new)
        zero = frozenset(i for i in valid if grad.flatten()[i] == 0)
        assert len(zero) == 3 and float(metrics["actor/pg_clipfrac"]) == pytest.approx(3 / len(valid))
        removed.add(zero)
    assert len(removed) > 1
    with pytest.raises(AlgorithmConfigError, match="clip_cov_ratio"):
        get_policy_loss_fn("clip_cov")(old, new, advantages, mask, clip_cov_ratio=0.0)


def test_kl_cov_penalises_the_tokens_of_largest_covariance_and_clips_nothing():
    old, new, advantages, mask = case(2)
    cov, valid = covariances(advantages, new, mask)
    o, n, a = token_list(old, new, advantages)
    k = int(len(valid) * 0.25)
    top = set(sorted(valid, key=lambda i: cov[i], reverse=True)[:k])
    coef = 0.7
    per_token = [-a[i] * math.exp(n[i] - o[i]) + (coef * abs(n[i] - o[i]) if i in top else 0.0) for i in range(len(o))]
    loss, metrics = get_policy_loss_fn("kl_cov")(old, new, advantages, mask, kl_cov_ratio=0.25, ppo_kl_coef=coef)
    assert float(loss) == pytest.approx(sum(per_token[i] for i in valid) / len(valid), rel=1e-5)
    assert float(metrics["actor/ppo_kl"]) == pytest.approx(sum(abs(n[i] - o[i]) for i in valid) / len(valid), rel=1e-5)
    assert float(metrics["actor/pg_clipfrac"]) == 0.0
    # A tiny ratio still penalises one token (verl's floor of 1).
    one, _ = get_policy_loss_fn("kl_cov")(old, new, advantages, mask, kl_cov_ratio=1e-9, ppo_kl_coef=coef)
    best = max(valid, key=lambda i: cov[i])
    expected = sum(-a[i] * math.exp(n[i] - o[i]) for i in valid) + coef * abs(n[best] - o[best])
    assert float(one) == pytest.approx(expected / len(valid), rel=1e-5)
