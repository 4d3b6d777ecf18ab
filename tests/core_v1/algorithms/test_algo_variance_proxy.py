"""verl's `variance_proxy/*` metrics against a row-by-row computation in plain Python, with and
without rollout IS weights, for one row, and without a grad norm; and the batch-side entry the
trainers call."""

import pytest
import torch
from tensordict import TensorDict

from core_v1.algorithms import variance_proxy_metrics
from core_v1.trainer.metrics import compute_variance_proxy_metrics

NAMES = ("proxy1_signal_strength", "proxy2_total_power", "proxy3_pure_noise", "expected_a_squared", "expected_w")

# Three rows, right-padded (padding holds junk the masks must drop): one short, one with a tool
# token (mask 0) inside, one of full length.
MASK = [[1, 1, 0, 0], [1, 0, 1, 1], [1, 1, 1, 1]]
PI = [[0.5, 0.9, 0.3, 0.3], [0.2, 0.7, 0.6, 0.05], [0.99, 0.4, 0.8, 0.1]]  # pi(y_t)
SUM_PI2 = [[0.4, 0.82, 9.0, 9.0], [0.3, 0.6, 0.5, 0.2], [0.98, 0.3, 0.7, 0.05]]
ADV = [[1.0, 0.5, 7.0, 7.0], [-0.4, 3.0, -0.2, -0.6], [0.25, 0.25, 0.25, 0.25]]
# rho: truncated weights, and a token IcePop zeroed (row 2, column 1)
RHO = [[1.2, 0.8, 0.0, 0.0], [0.5, 2.0, 1.0, 1.5], [1.0, 0.0, 0.9, 1.1]]


def _tensors(rows=slice(None)):
    return dict(
        advantages=torch.tensor(ADV)[rows],
        response_mask=torch.tensor(MASK)[rows],
        old_log_probs=torch.tensor(PI).log()[rows],
        sum_pi_squared=torch.tensor(SUM_PI2)[rows],
    )


def _by_hand(rows, grad_norm=None, rho=None):
    """verl's definitions, one row and one token at a time."""
    a_squared, w, power = [], [], []
    for i in rows:
        tokens = [t for t in range(4) if MASK[i][t]]
        a = sum(ADV[i][t] for t in tokens) / len(tokens)
        w_t = {t: 1 - 2 * PI[i][t] + SUM_PI2[i][t] for t in tokens}
        a_squared.append(a * a)
        if rho is None:
            w.append(sum(w_t.values()))
            power.append(a * a * max(w[-1], 0.0))
        else:
            w.append(sum(w_t[t] * rho[i][t] ** 2 for t in tokens))
            # verl unweights by dividing by max(rho^2, 1e-10): a zeroed token drops out
            unweighted = sum(w_t[t] * rho[i][t] ** 2 / max(rho[i][t] ** 2, 1e-10) for t in tokens)
            rho_bar = sum(rho[i][t] for t in tokens) / len(tokens)
            power.append(rho_bar**2 * a * a * max(unweighted, 0.0))
    n = len(rows)
    proxy2 = sum(power) / n
    proxy1 = None if grad_norm is None else grad_norm**2
    proxy3 = 0.0 if proxy1 is None or n == 1 else max(0.0, (proxy2 - proxy1) / (n - 1))
    return dict(zip(NAMES, (proxy1 or 0.0, proxy2, proxy3, sum(a_squared) / n, sum(w) / n)))


def _check(metrics, expected):
    assert set(metrics) == {f"variance_proxy/{name}" for name in NAMES}
    for name in NAMES:
        assert metrics[f"variance_proxy/{name}"] == pytest.approx(expected[name], rel=1e-5, abs=1e-7), name


def test_on_policy_the_proxies_are_verl_s_row_by_row_sums():
    metrics = variance_proxy_metrics(**_tensors(), grad_norm=0.3)
    _check(metrics, _by_hand(range(3), grad_norm=0.3))
    assert metrics["variance_proxy/proxy3_pure_noise"] > 0  # the case that exercises the formula


def test_rollout_is_weights_weigh_w_per_token_and_the_power_per_row():
    metrics = variance_proxy_metrics(**_tensors(), rollout_is_weights=torch.tensor(RHO), grad_norm=0.3)
    _check(metrics, _by_hand(range(3), grad_norm=0.3, rho=RHO))
    assert metrics != variance_proxy_metrics(**_tensors(), grad_norm=0.3)


def test_one_row_has_a_signal_but_no_noise_estimate():
    metrics = variance_proxy_metrics(**_tensors(slice(1, 2)), grad_norm=0.3)
    _check(metrics, _by_hand([1], grad_norm=0.3))
    assert metrics["variance_proxy/proxy1_signal_strength"] == pytest.approx(0.09)
    assert metrics["variance_proxy/proxy3_pure_noise"] == 0.0


def test_without_a_grad_norm_signal_and_noise_are_zero():
    metrics = variance_proxy_metrics(**_tensors())
    _check(metrics, _by_hand(range(3)))
    assert metrics["variance_proxy/proxy1_signal_strength"] == metrics["variance_proxy/proxy3_pure_noise"] == 0.0


def test_noise_is_floored_at_zero_when_the_signal_exceeds_the_power():
    assert variance_proxy_metrics(**_tensors(), grad_norm=100.0)["variance_proxy/proxy3_pure_noise"] == 0.0


def test_w_is_the_squared_norm_of_the_token_s_score_in_the_logits():
    logits = torch.tensor([0.3, -1.2, 2.0, 0.1], requires_grad=True)
    token = 1
    torch.log_softmax(logits, dim=-1)[token].backward()
    pi = torch.softmax(logits.detach(), dim=-1)
    assert logits.grad.pow(2).sum().item() == pytest.approx((1 - 2 * pi[token] + pi.pow(2).sum()).item(), rel=1e-6)


def test_the_trainers_entry_reads_the_batch_and_needs_sum_pi_squared():
    tensors = _tensors()
    batch = TensorDict({**tensors, "rollout_is_weights": torch.tensor(RHO)}, batch_size=[3])
    assert compute_variance_proxy_metrics(batch, 0.3) == variance_proxy_metrics(
        **tensors, rollout_is_weights=torch.tensor(RHO), grad_norm=0.3
    )
    del batch["sum_pi_squared"]  # calculate_sum_pi_squared off, or bypass mode
    assert compute_variance_proxy_metrics(batch, 0.3) == {}
