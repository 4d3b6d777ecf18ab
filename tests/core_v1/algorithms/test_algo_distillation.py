"""On-policy distillation's loss (core_v1.algorithms.distillation) against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from core_v1.algorithms.distillation import (
    TopKLogProbs,
    combine_with_task_loss,
    compute_distillation_loss,
    distillation_token_losses,
)
from core_v1.algorithms.logprob import logprobs_of_tokens, top_logprobs
from core_v1.algorithms.errors import AlgorithmConfigError

# One row, three response tokens; the third is padding.
STUDENT = [[-1.0, -2.0, -0.5]]
TEACHER = torch.tensor([[-1.5, -1.0, -3.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0]])


def _student() -> torch.Tensor:
    return torch.tensor(STUDENT, requires_grad=True)


def test_supervised_k3_is_the_reverse_kl_estimate_and_its_gradient():
    student = _student()
    loss, metrics = compute_distillation_loss(
        student.detach(), student, TEACHER, MASK, loss_mode="k3", use_policy_gradient=False
    )
    # t - s = -0.5 and 1.0: k3 = e^(t-s) - (t-s) - 1
    k3 = [math.exp(-0.5) + 0.5 - 1, math.e - 1.0 - 1]
    assert loss.item() == pytest.approx(sum(k3) / 2, abs=1e-6)  # token-mean over the 2 valid tokens
    loss.backward()
    # d k3 / ds = 1 - e^(t-s), over 2 tokens; the padding token gets nothing
    expected = [(1 - math.exp(-0.5)) / 2, (1 - math.e) / 2, 0.0]
    assert student.grad[0].tolist() == pytest.approx(expected, abs=1e-6)
    assert metrics["distillation/loss"].item() == pytest.approx(sum(k3) / 2, abs=1e-6)
    assert metrics["distillation/abs_loss"].item() == pytest.approx(sum(k3) / 2, abs=1e-6)


def test_k1_as_a_reward_gives_each_token_the_teacher_minus_student_advantage():
    student = _student()
    loss, metrics = compute_distillation_loss(
        student.detach(), student, TEACHER, MASK, loss_mode="k1", use_policy_gradient=True
    )
    # advantage = -(s - t) = [-0.5, 1.0]; on-policy ratio 1: per-token loss -A = [0.5, -1.0]
    assert loss.item() == pytest.approx((0.5 - 1.0) / 2, abs=1e-6)
    loss.backward()
    assert student.grad[0].tolist() == pytest.approx([0.25, -0.5, 0.0], abs=1e-6)  # -A * ratio / 2
    assert metrics["distillation/pg_clipfrac"].item() == 0.0


def test_as_a_reward_the_ratio_is_clipped_with_the_distillation_clip_ratios():
    student = torch.tensor([[-0.5]], requires_grad=True)
    old, teacher, mask = torch.tensor([[-1.0]]), torch.tensor([[0.0]]), torch.tensor([[1.0]])
    loss, metrics = compute_distillation_loss(
        old,
        student,
        teacher,
        mask,
        loss_mode="k1",
        use_policy_gradient=True,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.2,
    )
    # A = -(s - t) = 0.5 > 0, ratio e^0.5 = 1.65 clipped at 1.2: loss -0.5 * 1.2, no gradient
    assert loss.item() == pytest.approx(-0.6, abs=1e-6)
    loss.backward()
    assert student.grad.abs().max().item() == 0.0
    assert metrics["distillation/pg_clipfrac"].item() == 1.0
    wider, _ = compute_distillation_loss(
        old, student.detach(), teacher, mask, loss_mode="k1", use_policy_gradient=True, clip_ratio_high=1.0
    )
    assert wider.item() == pytest.approx(-0.5 * math.exp(0.5), abs=1e-6)


def test_loss_max_clamp_bounds_each_token_both_ways():
    student = torch.tensor(STUDENT)
    assert distillation_token_losses(student, TEACHER, "k1")[0, :2].tolist() == pytest.approx([0.5, -1.0])
    clamped = distillation_token_losses(student, TEACHER, "k1", loss_max_clamp=0.3)
    assert clamped[0, :2].tolist() == pytest.approx([0.3, -0.3])
    loss, _ = compute_distillation_loss(
        student, student, TEACHER, MASK, loss_mode="k1", use_policy_gradient=True, loss_max_clamp=0.3
    )
    assert loss.item() == pytest.approx(0.0, abs=1e-6)  # per-token -A = [0.3, -0.3]


def test_k2_supervised_and_seq_mean_aggregation():
    student = torch.tensor([[-1.0, -2.0], [-1.0, 0.0]])
    teacher = torch.tensor([[-2.0, -2.0], [-1.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = compute_distillation_loss(
        student, student, teacher, mask, loss_mode="k2", use_policy_gradient=False, loss_agg_mode="seq-mean-token-mean"
    )
    # k2 = (s - t)^2 / 2: row 0 [0.5, 0], mean 0.25; row 1 [0] (the 0.0 token is padding): mean 0
    assert loss.item() == pytest.approx(0.125, abs=1e-6)


def test_combined_with_the_task_loss_or_alone():
    task, distill = torch.tensor(2.0), torch.tensor(0.4)
    assert combine_with_task_loss(
        task, distill, use_task_rewards=True, distillation_loss_coef=0.5
    ).item() == pytest.approx(2.2)
    assert combine_with_task_loss(
        task, distill, use_task_rewards=False, distillation_loss_coef=0.5
    ).item() == pytest.approx(0.4)


@pytest.mark.parametrize(
    "mode, policy_gradient, named",
    [
        ("reverse_kl_topk", False, "reverse_kl_topk"),
        ("k1", False, "use_policy_gradient=true"),
        ("kl", False, "use_policy_gradient=true"),
    ],
)
def test_modes_it_cannot_compute_are_refused_with_the_key(mode, policy_gradient, named):
    student = torch.tensor(STUDENT)
    with pytest.raises(AlgorithmConfigError, match=named) as error:
        compute_distillation_loss(student, student, TEACHER, MASK, loss_mode=mode, use_policy_gradient=policy_gradient)
    assert "distillation.distillation_loss.loss_mode" in str(error.value) and "\n" not in str(error.value)


def test_forward_kl_topk_is_the_teachers_kl_over_its_k_tokens_and_pulls_the_student_towards_them():
    vocabulary_logits = torch.tensor([[[2.0, 1.0, 0.0, -1.0]]])  # one row, one response token
    teacher, ids = top_logprobs(vocabulary_logits, 2)  # tokens 0 and 1
    assert ids[0, 0].tolist() == [0, 1]
    student_logits = torch.zeros(1, 1, 4, requires_grad=True)  # uniform: log 1/4 on every token
    student = logprobs_of_tokens(student_logits, ids)
    loss, metrics = compute_distillation_loss(
        student.detach()[..., 0],
        student[..., 0],
        None,
        torch.ones(1, 1),
        loss_mode="forward_kl_topk",
        use_policy_gradient=False,
        topk=TopKLogProbs(student, teacher),
        log_prob_min_clamp=-10.0,
    )
    p = torch.softmax(vocabulary_logits[0, 0], -1)[:2]
    expected = float((p * (p.log() - math.log(0.25))).sum())
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert metrics["distillation/teacher_mass"].item() == pytest.approx(float(p.sum()), abs=1e-6)
    assert metrics["distillation/student_mass"].item() == pytest.approx(0.5, abs=1e-6)
    loss.backward()
    # d/dz_v of -sum_k p_k log q_k: q_v * sum_k p_k - p_v; the teacher's two tokens gain logit
    grad = student_logits.grad[0, 0]
    assert grad.tolist() == pytest.approx((0.25 * p.sum() - torch.cat([p, torch.zeros(2)])).tolist(), abs=1e-6)
    assert grad[0] < 0 and grad[1] < 0 and grad[2] > 0


def test_forward_kl_topk_clamps_log_probs_and_never_goes_below_zero():
    teacher = torch.tensor([[[-0.1, -30.0]]])
    student = torch.tensor([[[-0.05, -50.0]]])  # more mass on the teacher's top token than the teacher
    loss, _ = compute_distillation_loss(
        student[..., 0],
        student[..., 0],
        None,
        torch.ones(1, 1),
        loss_mode="forward_kl_topk",
        use_policy_gradient=False,
        topk=TopKLogProbs(student, teacher),
        log_prob_min_clamp=-10.0,
    )
    # p(-0.1) * (-0.1 + 0.05) + p(-10) * (-10 + 10) < 0, clamped at 0
    assert loss.item() == 0.0
