"""On-policy distillation: a per-token divergence between the student's and a teacher's log-probs
of the tokens the student sampled, as verl's `distillation.distillation_loss.*` defines it.

With s = log pi_student(a_t) and t = log pi_teacher(a_t) on each sampled response token, the
per-token divergence `d_t` is one of the KL estimators of `core_v1.algorithms.kl` (`loss_mode`:
`kl`/`k1` = s - t, `abs`, `mse`/`k2`, `low_var_kl`/`k3`), all estimates of the reverse KL
KL(student || teacher) since the tokens are the student's own samples; `loss_max_clamp` clamps
it to [-c, c]. It enters the loss in one of two ways:

- supervised (`use_policy_gradient=false`, arXiv 2306.13649): `agg_loss(d)` is back-propagated
  through s. k1 is refused there: its gradient d(s - t)/ds does not depend on the teacher.
- as a reward (`use_policy_gradient=true`, Thinking Machines' on-policy distillation): each token's
  advantage is -d_t (no gradient), in PPO's clipped surrogate with the distillation's own clip
  ratios, around the behaviour policy's log-probs.

`combine_with_task_loss` then adds it to the RL loss times `distillation_loss_coef`
(`use_task_rewards=true`), or makes it the whole loss (`use_task_rewards=false`, coefficient 1).
"""

from __future__ import annotations

from typing import Optional

import torch

from core_v1.algorithms.aggregation import agg_loss
from core_v1.algorithms.errors import AlgorithmConfigError
from core_v1.algorithms.kl import KL_ESTIMATORS, kl_penalty
from core_v1.algorithms.masked import masked_mean
from core_v1.algorithms.policy_loss import compute_policy_loss_vanilla

DISTILLATION_LOSS_MODES = KL_ESTIMATORS


def check_distillation_loss_mode(loss_mode: str, use_policy_gradient: bool) -> None:
    """Refuse a loss mode this module does not compute, or k1 back-propagated directly."""
    if loss_mode not in DISTILLATION_LOSS_MODES:
        raise AlgorithmConfigError(
            f"distillation.distillation_loss.loss_mode={loss_mode!r} is not supported: rlbridge's distillation "
            f"compares the log-probs of the sampled tokens only (choose one of {', '.join(DISTILLATION_LOSS_MODES)}; "
            "verl's forward_kl_topk needs the teacher's top-k distribution, which rlbridge does not compute)"
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


def compute_distillation_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    teacher_log_prob: torch.Tensor,
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
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The distillation loss (a differentiable scalar) and its `distillation/*` metrics.

    `old_log_prob` is the behaviour policy's (used only as a reward, for PPO's ratio); `log_prob`
    the current student's, with gradient; `teacher_log_prob` the teacher's; all [B, R].
    """
    check_distillation_loss_mode(loss_mode, use_policy_gradient)
    losses = distillation_token_losses(log_prob, teacher_log_prob, loss_mode, loss_max_clamp)
    metrics = {"distillation/abs_loss": masked_mean(losses.detach().abs(), response_mask)}
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
