"""On-policy distillation: a per-token divergence between the student's and a teacher's log-probs
of the tokens the student sampled, as verl's `distillation.distillation_loss.*` defines it.

With s = log pi_student(a_t) and t = log pi_teacher(a_t) on each sampled response token, the
per-token divergence `d_t` is one of the KL estimators of `core_v1.algorithms.kl` (`loss_mode`:
`kl`/`k1` = s - t, `abs`, `mse`/`k2`, `low_var_kl`/`k3`), all estimates of the reverse KL
KL(student || teacher) since the tokens are the student's own samples. `forward_kl_topk` is
instead the forward KL(teacher || student) over the teacher's k most likely tokens v at each
position: d_t = sum_v p_teacher(v) (log p_teacher(v) - log p_student(v)), both log-probs first
clamped below at `log_prob_min_clamp`, and d_t clamped at 0 (the k tokens do not hold all of either
distribution's mass, so the sum can go negative). `loss_max_clamp` clamps d_t to [-c, c]. It
enters the loss in one of two ways:

- supervised (`use_policy_gradient=false`, arXiv 2306.13649): `agg_loss(d)` is back-propagated
  through s. k1 is refused there: its gradient d(s - t)/ds does not depend on the teacher.
- as a reward (`use_policy_gradient=true`, Thinking Machines' on-policy distillation): each token's
  advantage is -d_t (no gradient), in PPO's clipped surrogate with the distillation's own clip
  ratios, around the behaviour policy's log-probs.

`combine_with_task_loss` then adds it to the RL loss times `distillation_loss_coef`
(`use_task_rewards=true`), or makes it the whole loss (`use_task_rewards=false`, coefficient 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from core_v1.algorithms.aggregation import agg_loss
from core_v1.algorithms.errors import AlgorithmConfigError
from core_v1.algorithms.kl import KL_ESTIMATORS, kl_penalty
from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import compute_policy_loss_vanilla

TOPK_LOSS_MODE = "forward_kl_topk"
DISTILLATION_LOSS_MODES = (*KL_ESTIMATORS, TOPK_LOSS_MODE)


@dataclass(frozen=True)
class TopKLogProbs:
    """`forward_kl_topk`'s inputs at each response position: the teacher's k largest log-probs
    [B, R, K] and the student's log-probs [B, R, K] of the same k token ids (with gradient)."""

    student: torch.Tensor
    teacher: torch.Tensor


def check_distillation_loss_mode(loss_mode: str, use_policy_gradient: bool) -> None:
    """Refuse a loss mode this module does not compute, or k1 back-propagated directly."""
    if loss_mode not in DISTILLATION_LOSS_MODES:
        raise AlgorithmConfigError(
            f"distillation.distillation_loss.loss_mode={loss_mode!r} is not supported: choose one of "
            f"{', '.join(DISTILLATION_LOSS_MODES)}"
        )
    if loss_mode in ("kl", "k1") and not use_policy_gradient:
        raise AlgorithmConfigError(
            f"distillation.distillation_loss.loss_mode={loss_mode} needs use_policy_gradient=true: the gradient "
            "of k1 back-propagated directly does not depend on the teacher (use k3 or k2 for the supervised form)"
        )


def distillation_token_losses(
    log_prob: torch.Tensor, teacher_log_prob: torch.Tensor, loss_mode: str, loss_max_clamp: Optional[float] = None
) -> torch.Tensor:
    """Per-token divergence d [B, R] of the student's `log_prob` from `teacher_log_prob` (see the
    module docstring), clamped to [-loss_max_clamp, loss_max_clamp] when given."""
    losses = kl_penalty(log_prob, teacher_log_prob, loss_mode)
    if loss_max_clamp is not None:
        losses = losses.clamp(min=-loss_max_clamp, max=loss_max_clamp)
    return losses


def topk_forward_kl(topk: TopKLogProbs, log_prob_min_clamp: Optional[float] = None) -> torch.Tensor:
    """Per-token forward KL [B, R] of the student from the teacher over the teacher's top-k tokens
    (see the module docstring), at least 0."""
    student, teacher = topk.student.float(), topk.teacher.float()
    if log_prob_min_clamp is not None:
        student, teacher = student.clamp_min(log_prob_min_clamp), teacher.clamp_min(log_prob_min_clamp)
    return (teacher.exp() * (teacher - student)).sum(dim=-1).clamp_min(0.0)


def topk_mass_metrics(topk: TopKLogProbs, response_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """How much of each distribution the teacher's k tokens hold, averaged over response tokens."""
    return {
        f"distillation/{who}_mass": masked_mean(log_probs.detach().float().exp().sum(dim=-1), response_mask)
        for who, log_probs in (("student", topk.student), ("teacher", topk.teacher))
    }


def compute_distillation_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    teacher_log_prob: Optional[torch.Tensor],
    response_mask: torch.Tensor,
    *,
    loss_mode: str,
    use_policy_gradient: bool,
    loss_agg_mode: str = "token-mean",
    loss_max_clamp: Optional[float] = None,
    clip_ratio: float = 0.2,
    clip_ratio_low: Optional[float] = None,
    clip_ratio_high: Optional[float] = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
    topk: Optional[TopKLogProbs] = None,
    log_prob_min_clamp: Optional[float] = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The distillation loss (a differentiable scalar) and its `distillation/*` metrics.

    `old_log_prob` is the behaviour policy's (used only as a reward, for PPO's ratio); `log_prob`
    the current student's, with gradient; `teacher_log_prob` the teacher's; all [B, R]. The
    `forward_kl_topk` mode reads `topk` instead of `teacher_log_prob`.
    """
    check_distillation_loss_mode(loss_mode, use_policy_gradient)
    metrics: dict[str, torch.Tensor] = {}
    if loss_mode == TOPK_LOSS_MODE:
        if topk is None:
            raise ValueError("loss_mode=forward_kl_topk needs the top-k log-probs of teacher and student (topk=)")
        losses = topk_forward_kl(topk, log_prob_min_clamp)
        if loss_max_clamp is not None:
            losses = losses.clamp(min=-loss_max_clamp, max=loss_max_clamp)
        metrics.update(topk_mass_metrics(topk, response_mask))
    else:
        if teacher_log_prob is None:
            raise ValueError(f"loss_mode={loss_mode} needs the teacher's log-probs of the sampled tokens")
        losses = distillation_token_losses(log_prob, teacher_log_prob, loss_mode, loss_max_clamp)
    metrics["distillation/abs_loss"] = masked_mean(losses.detach().abs(), response_mask)
    if not use_policy_gradient:
        loss = agg_loss(losses, response_mask, loss_agg_mode)
    else:
        loss, pg_metrics = compute_policy_loss_vanilla(
            old_log_prob,
            log_prob,
            -losses.detach(),
            response_mask,
            loss_agg_mode=loss_agg_mode,
            clip_ratio=clip_ratio,
            clip_ratio_low=clip_ratio_low,
            clip_ratio_high=clip_ratio_high,
            rollout_is_weights=rollout_is_weights,
        )
        metrics.update({f"distillation/{name.removeprefix('actor/')}": value for name, value in pg_metrics.items()})
    metrics["distillation/loss"] = loss.detach()
    return loss, metrics


def combine_with_task_loss(
    task_loss: torch.Tensor, distillation_loss: torch.Tensor, *, use_task_rewards: bool, distillation_loss_coef: float
) -> torch.Tensor:
    """The loss back-propagated: the RL loss plus `distillation_loss_coef` times the distillation
    loss, or the distillation loss alone (coefficient 1) without task rewards, as verl combines them."""
    if not use_task_rewards:
        return distillation_loss
    return task_loss + distillation_loss_coef * distillation_loss
