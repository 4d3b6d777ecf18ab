"""The math of PPO and its relatives, as plain functions on [B, R] tensors.

The V1 trainer and the V0 trainer both call these, so they agree number for number; definitions
follow verl's `core_algos.py` (the module that `verl.trainer.ppo.core_algos` imports migrate to).

- `masked`: sums, means, variance and whitening over the valid positions of `response_mask`.
- `logprob`: token log-probs, entropies and sums of squared probabilities from logits, memory-lean.
- `aggregation`: `agg_loss`, the four `loss_agg_mode`s.
- `kl`: KL estimators (k1/k2/k3, straight-through `+`), KL controllers, the in-reward penalty.
- `advantages`: `ADV_ESTIMATORS` (gae, grpo, grpo_vectorized, rloo, rloo_vectorized, opo,
  reinforce_plus_plus(_baseline), remax, grpo_passk, gdpo, optimal_token_baseline,
  tir_optimal_token_baseline; gpg registers from `gpg`) with one calling convention, plus
  multi-output sessions.
- `policy_loss`: `POLICY_LOSSES` (vanilla, decoupled, gspo, reinforce, bypass_mode); verl's further
  losses each in a small module beside it: `gpg`, `gmpo` (geo_mean), `sapo`, `cispo`, `dppo`
  (dppo_tv, dppo_kl), `entropy_cov` (clip_cov, kl_cov).
- `rollout_correction`: importance weights and rejection between rollout and training policies.
- `value_loss`: the clipped critic loss.
- `pf_ppo`: PF-PPO's reward-weighted resampling of the batch after the advantages.
- `variance_proxy`: verl's `variance_proxy/*` step metrics, gradient signal and noise estimated
  from `sum_pi_squared`.
"""

from core_v1.algorithms.advantages import (
    ADV_ESTIMATORS,
    UNIFORM_KEYWORDS,
    AdvantageEstimatorFn,
    broadcast_last_output_advantage,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_gdpo_outcome_advantage,
    compute_multi_output_advantage,
    compute_multi_turn_optimal_token_baseline_advantage,
    compute_opo_outcome_advantage,
    compute_optimal_token_baseline_advantage,
    compute_rloo_vectorized_outcome_advantage,
    compute_session_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator_fn,
    last_output_rows,
    register_adv_estimator,
)
from core_v1.algorithms.aggregation import LOSS_AGG_MODES, agg_loss
from core_v1.algorithms.errors import AlgorithmConfigError, AlgorithmInputError
from core_v1.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    KLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
)
from core_v1.algorithms.logprob import (
    entropy_from_logits,
    logprobs_and_entropy,
    logprobs_from_logits,
    sum_pi_squared_from_logits,
)
from core_v1.algorithms.masked import masked_mean, masked_sum, masked_var, masked_whiten
from core_v1.algorithms.policy_loss import (
    POLICY_LOSSES,
    PolicyLossFn,
    compute_policy_loss_bypass_mode,
    compute_policy_loss_decoupled,
    compute_policy_loss_gspo,
    compute_policy_loss_reinforce,
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
    register_policy_loss,
)
from core_v1.algorithms.rollout_correction import (
    ROLLOUT_IS_LEVELS,
    ROLLOUT_RS_OPTIONS,
    RolloutCorrection,
    RolloutCorrectionConfig,
    compute_offpolicy_metrics,
    compute_rollout_correction,
    compute_rollout_is_weights,
    compute_rollout_rejection_mask,
)
from core_v1.algorithms.value_loss import compute_value_loss
from core_v1.algorithms.variance_proxy import variance_proxy_metrics
from core_v1.algorithms import cispo, dppo, entropy_cov, gmpo, gpg, sapo  # noqa: E402,F401 - register verl's further losses

__all__ = [
    # masked statistics and log-probs
    "masked_sum",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "logprobs_from_logits",
    "entropy_from_logits",
    "logprobs_and_entropy",
    "sum_pi_squared_from_logits",
    # aggregation
    "LOSS_AGG_MODES",
    "agg_loss",
    # KL
    "KL_ESTIMATORS",
    "kl_penalty",
    "KLController",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
    "apply_kl_penalty",
    # advantages
    "ADV_ESTIMATORS",
    "UNIFORM_KEYWORDS",
    "AdvantageEstimatorFn",
    "register_adv_estimator",
    "get_adv_estimator_fn",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "compute_optimal_token_baseline_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_remax_outcome_advantage",
    "last_output_rows",
    "broadcast_last_output_advantage",
    "compute_multi_output_advantage",
    "compute_session_advantage",
    # policy and value losses
    "POLICY_LOSSES",
    "PolicyLossFn",
    "register_policy_loss",
    "get_policy_loss_fn",
    "compute_policy_loss_vanilla",
    "compute_policy_loss_decoupled",
    "compute_policy_loss_gspo",
    "compute_policy_loss_reinforce",
    "compute_policy_loss_bypass_mode",
    "compute_value_loss",
    # rollout correction
    "ROLLOUT_IS_LEVELS",
    "ROLLOUT_RS_OPTIONS",
    "RolloutCorrectionConfig",
    "RolloutCorrection",
    "compute_rollout_correction",
    "compute_rollout_is_weights",
    "compute_rollout_rejection_mask",
    "compute_offpolicy_metrics",
    # metrics
    "variance_proxy_metrics",
    # errors
    "AlgorithmConfigError",
    "AlgorithmInputError",
]
