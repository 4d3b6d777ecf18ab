"""The PPO stages whose logic both trainers share, as plain functions with explicit arguments.

Each takes the batch's tensors (a `TensorDict` in the layout of docs/CONTRACTS.md) and the step's
metrics, and returns the batch; whatever else it needs (the actor's log-prob call, the algorithm
section, the per-row uids) is an argument, never a trainer. `PPOTrainer`'s stage methods call them
with V1's handles; the deprecated V0 trainer calls the very same functions on its `DataProto`'s
tensors with its workers, which is why V0 and V1 `sync` agree number for number.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.algorithms import compute_session_advantage, get_adv_estimator_fn, masked_mean
from core_v1.algorithms.advantages.gdpo import gdpo_reward_metrics
from core_v1.algorithms.kl import apply_kl_penalty
from core_v1.algorithms.pf_ppo import pf_ppo_generator, pf_ppo_metrics, pf_ppo_resample_indices
from core_v1.reward.reward_model import rescore_training_batch
from core_v1.trainer.off_policy import apply_rollout_correction

LogProbFn = Callable[[TensorDict], tuple[Optional[torch.Tensor], ...]]
"""`batch -> (old log-probs [B, R], entropy [B, R] or None)` under the current policy, with
sum_v pi(v)^2 [B, R] third when the actor computes it (`actor.calculate_sum_pi_squared`)."""


def balance_stage(batch: TensorDict, metrics: dict) -> TensorDict:
    """Report the batch's lengths. Rows keep their order: the training ranks get token-balanced
    shards of each mini-batch later (`core_v1.workers.sharding`, under `trainer.balance_batch`)."""
    metrics["global_seqlen/mean"] = batch["attention_mask"].sum(-1).float().mean().item()
    return batch


def old_log_prob_stage(batch: TensorDict, metrics: dict, *, compute_log_prob: LogProbFn, correction: Any) -> TensorDict:
    """`old_log_probs` (and `entropys`, and `sum_pi_squared` when the actor computes it) from the
    current policy, then rollout correction.

    Bypass mode takes the rollout's own log-probs as the behaviour policy and skips the forward
    pass. `correction` is the parsed `algorithm.rollout_correction` (`off_policy.correction_config`).
    """
    if correction.bypass_mode and "rollout_log_probs" in batch.keys():
        batch["old_log_probs"] = batch["rollout_log_probs"].clone()
        return batch
    log_probs, entropy, *sum_pi_squared = compute_log_prob(batch)
    batch["old_log_probs"] = log_probs
    if sum_pi_squared:
        batch["sum_pi_squared"] = sum_pi_squared[0]
    if "rollout_log_probs" in batch.keys():
        # The rollout engine and the trainer should compute the same policy; a gap here is
        # numerical mismatch (or stale weights), which off-policy corrections then have to absorb.
        gap = (log_probs - batch["rollout_log_probs"]).abs()
        metrics["training/rollout_actor_logprob_diff/mean"] = masked_mean(gap, batch["response_mask"]).item()
    if entropy is not None:
        batch["entropys"] = entropy
    return apply_rollout_correction(batch, correction, metrics)


def reward_model_stage(
    batch: TensorDict, metrics: dict, *, reward_model: Any, combine: str, raw_prompts: Optional[Sequence]
) -> TensorDict:
    """Rescore `token_level_scores` with the served reward model (`reward.reward_model`), if any."""
    if reward_model is None:
        return batch
    batch["token_level_scores"], rm_metrics = rescore_training_batch(
        reward_model,
        combine,
        batch["token_level_scores"],
        batch["prompts"],
        batch["responses"],
        batch["attention_mask"],
        raw_prompts,
    )
    metrics.update(rm_metrics)
    return batch


def advantage_stage(
    batch: TensorDict,
    metrics: dict,
    *,
    algorithm: Any,
    kl_ctrl: Any,
    uids: Sequence,
    sessions: Sequence,
    output_index: Optional[Sequence],
    reward_extra: Optional[Sequence] = None,
) -> TensorDict:
    """`token_level_rewards` (`in_reward_kl`), then `advantages` and `returns` (`estimate_advantages`).

    `reward_extra` holds each row's extra numbers from the reward function (the `reward_extra`
    column); GDPO normalises the ones `algorithm.gdpo_reward_keys` names, and logs verl's
    `gdpo/<key>/*` statistics of them.
    """
    batch = in_reward_kl(batch, metrics, kl_ctrl=kl_ctrl, kl_penalty=algorithm.kl_penalty)
    if algorithm.adv_estimator == "gdpo" and reward_extra is not None:
        metrics.update(gdpo_reward_metrics(reward_extra, algorithm.gdpo_reward_keys))
    return estimate_advantages(
        batch,
        adv_estimator=algorithm.adv_estimator,
        uids=uids,
        sessions=sessions,
        output_index=output_index,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        reward_extra=reward_extra,
        gdpo_reward_keys=algorithm.gdpo_reward_keys,
        gdpo_reward_weights=algorithm.gdpo_reward_weights,
    )


def outcome_advantages(
    scores: Sequence[float],
    model_tokens: Sequence[int],
    metrics: dict,
    *,
    algorithm: Any,
    uids: Sequence,
    sessions: Sequence,
    output_index: Optional[Sequence],
    reward_extra: Optional[Sequence] = None,
) -> tuple[list[float], list[float]]:
    """(advantage, return) of each row by a per-row estimator (`PER_ROW_ESTIMATORS`), from one score
    per row: the advantage `advantage_stage` gives each of the row's model tokens, computed on a
    one-token-wide batch (a row without model tokens gets 0, as there)."""
    rewards = torch.tensor(list(scores), dtype=torch.float32)[:, None]
    has_tokens = (torch.tensor(list(model_tokens)) > 0).long()[:, None]
    batch = TensorDict({"token_level_rewards": rewards, "response_mask": has_tokens}, batch_size=[len(rewards)])
    if algorithm.adv_estimator == "gdpo" and reward_extra is not None:
        metrics.update(gdpo_reward_metrics(reward_extra, algorithm.gdpo_reward_keys))
    batch = estimate_advantages(
        batch,
        adv_estimator=algorithm.adv_estimator,
        uids=uids,
        sessions=sessions,
        output_index=output_index,
        gamma=algorithm.gamma,
        lam=algorithm.lam,
        norm_adv_by_std_in_grpo=algorithm.norm_adv_by_std_in_grpo,
        reward_extra=reward_extra,
        gdpo_reward_keys=algorithm.gdpo_reward_keys,
        gdpo_reward_weights=algorithm.gdpo_reward_weights,
    )
    return batch["advantages"][:, 0].tolist(), batch["returns"][:, 0].tolist()


def in_reward_kl(batch: TensorDict, metrics: dict, *, kl_ctrl: Any, kl_penalty: str) -> TensorDict:
    """`token_level_rewards`: the scores, minus `beta * KL(old || ref)` per token when `kl_ctrl` is set
    (`algorithm.use_kl_in_reward`)."""
    if kl_ctrl is None:
        batch["token_level_rewards"] = batch["token_level_scores"]
        return batch
    rewards, kl_metrics = apply_kl_penalty(
        batch["token_level_scores"],
        batch["old_log_probs"],
        batch["ref_log_prob"],
        batch["response_mask"],
        kl_ctrl,
        kl_penalty,
    )
    batch["token_level_rewards"] = rewards
    metrics.update(kl_metrics)
    return batch


def estimate_advantages(
    batch: TensorDict,
    *,
    adv_estimator: str,
    uids: Sequence,
    sessions: Sequence,
    output_index: Optional[Sequence] = None,
    gamma: float = 1.0,
    lam: float = 1.0,
    norm_adv_by_std_in_grpo: bool = True,
    reward_extra: Optional[Sequence] = None,
    gdpo_reward_keys: Optional[Sequence[str]] = None,
    gdpo_reward_weights: Optional[Sequence[float]] = None,
) -> TensorDict:
    """`advantages` and `returns` [B, R] by the estimator registered as `adv_estimator`, from
    `token_level_rewards` (and `values` / `reward_baselines` / `reward_extra` / `old_log_probs` /
    `sum_pi_squared` / `rollout_is_weights` where present), with `uids` as the prompt groups and
    the session as the unit (`core_v1.batch.layout.session_layout`)."""
    advantages, returns = compute_session_advantage(
        get_adv_estimator_fn(adv_estimator),
        sessions,
        output_index,
        token_level_rewards=batch["token_level_rewards"],
        response_mask=batch["response_mask"],
        index=None if uids is None else list(uids),
        values=batch.get("values", None),
        reward_baselines=batch.get("reward_baselines", None),
        reward_extra=None if reward_extra is None else list(reward_extra),
        gamma=gamma,
        lam=lam,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
        gdpo_reward_keys=gdpo_reward_keys,
        gdpo_reward_weights=gdpo_reward_weights,
        old_log_probs=batch.get("old_log_probs", None),
        sum_pi_squared=batch.get("sum_pi_squared", None),
        rollout_is_weights=batch.get("rollout_is_weights", None),
    )
    batch["advantages"], batch["returns"] = advantages, returns
    return batch


def pf_ppo_rows(batch: TensorDict, metrics: dict, *, pf_ppo: Any, seed: int, global_steps: int) -> torch.Tensor:
    """PF-PPO: the rows to train on, redrawn in proportion to their reward weights (each trainer
    selects them from its own container)."""
    indices = pf_ppo_resample_indices(
        batch["token_level_scores"], pf_ppo.reweight_method, pf_ppo.weight_pow, pf_ppo_generator(seed, global_steps)
    )
    metrics.update(pf_ppo_metrics(indices))
    return indices
