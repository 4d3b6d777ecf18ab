"""Masked statistics and log-probs/entropies against hand-computed values."""

import math

import pytest
import torch

from core_v1.algorithms import (
    AlgorithmInputError,
    entropy_from_logits,
    logprobs_and_entropy,
    logprobs_from_logits,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
)
from core_v1.algorithms import logprob as logprob_module


def test_masked_sum_ignores_nan_in_padding():
    values = torch.tensor([[1.0, 2.0, float("nan")]])
    assert masked_sum(values, torch.tensor([[1, 1, 0]])).item() == 3.0


def test_masked_mean_per_row():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    torch.testing.assert_close(masked_mean(values, mask, dim=-1), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(masked_mean(values, mask), torch.tensor(7.0 / 3))


def test_masked_var_unbiased_and_biased():
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0, 100.0]])
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    torch.testing.assert_close(masked_var(values, mask), torch.tensor(5.0 / 3))
    torch.testing.assert_close(masked_var(values, mask, unbiased=False), torch.tensor(1.25))


def test_masked_var_needs_two_positions():
    with pytest.raises(AlgorithmInputError, match="at least 2 valid positions"):
        masked_var(torch.tensor([[1.0, 2.0]]), torch.tensor([[1, 0]]))


def test_masked_whiten_and_keep_mean():
    values = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    mask = torch.ones(1, 4)
    expected = [(x - 2.5) / math.sqrt(5.0 / 3 + 1e-8) for x in (1.0, 2.0, 3.0, 4.0)]
    torch.testing.assert_close(masked_whiten(values, mask), torch.tensor([expected]))
    torch.testing.assert_close(masked_whiten(values, mask, shift_mean=False), torch.tensor([expected]) + 2.5)


def test_logprobs_and_entropy_of_a_known_distribution():
    logits = torch.tensor([[[0.0, math.log(3.0)]]])  # softmax = [0.25, 0.75]
    torch.testing.assert_close(logprobs_from_logits(logits, torch.tensor([[1]])), torch.tensor([[math.log(0.75)]]))
    torch.testing.assert_close(logprobs_from_logits(logits, torch.tensor([[0]])), torch.tensor([[math.log(0.25)]]))
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    torch.testing.assert_close(entropy_from_logits(logits), torch.tensor([[entropy]]))


def test_chunked_logprobs_match_log_softmax_values_and_gradients(monkeypatch):
    monkeypatch.setattr(logprob_module, "_ROWS_PER_CHUNK", 3)  # 2 x 5 = 10 rows -> 4 chunks
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 5))
    ours = logprobs_from_logits(logits, labels)
    reference = torch.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours, reference)
    (grad_ours,) = torch.autograd.grad(ours.sum(), logits)
    (grad_reference,) = torch.autograd.grad(reference.sum(), logits)
    torch.testing.assert_close(grad_ours, grad_reference)
    probs = torch.softmax(logits, dim=-1)
    torch.testing.assert_close(entropy_from_logits(logits), -(probs * probs.log()).sum(-1))


@pytest.mark.parametrize("entropy_requires_grad", [False, True])
def test_log_probs_and_entropy_in_one_pass_equal_the_separate_functions(monkeypatch, entropy_requires_grad):
    monkeypatch.setattr(logprob_module, "_ROWS_PER_CHUNK", 3)
    torch.manual_seed(2)
    logits = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 7, (2, 5))
    log_probs, entropy = logprobs_and_entropy(logits, labels, entropy_requires_grad)
    torch.testing.assert_close(log_probs, logprobs_from_logits(logits, labels))
    torch.testing.assert_close(entropy, entropy_from_logits(logits))
    assert entropy.requires_grad == entropy_requires_grad
    (grad,) = torch.autograd.grad((log_probs.sum() + (entropy.sum() if entropy_requires_grad else 0)), logits)
    probs = torch.softmax(logits, dim=-1)
    reference = torch.log_softmax(logits, -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1).sum()
    if entropy_requires_grad:
        reference = reference - (probs * probs.log()).sum()
    torch.testing.assert_close(grad, torch.autograd.grad(reference, logits)[0])


def test_bf16_logits_are_computed_in_float32():
    torch.manual_seed(1)
    logits = torch.randn(3, 11).to(torch.bfloat16)
    labels = torch.tensor([0, 5, 10])
    ours = logprobs_from_logits(logits, labels)
    assert ours.dtype == torch.float32
    reference = torch.log_softmax(logits.double(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(ours.double(), reference, atol=1e-6, rtol=1e-6)


def test_logits_labels_shape_mismatch_is_explained():
    with pytest.raises(AlgorithmInputError, match="trailing vocabulary dimension"):
        logprobs_from_logits(torch.zeros(2, 3, 5), torch.zeros(2, 4, dtype=torch.long))
