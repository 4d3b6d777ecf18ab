"""Advantage estimators (`algorithm.adv_estimator`), registered by name with one calling convention.

See `registry` for the convention, `gae`, `group`, `reinforce`, `gdpo` and `otb` for the built-in
estimators, and `sessions` for multi-output agent loops.
"""

from core_v1.algorithms.advantages.registry import (
    ADV_ESTIMATORS,
    UNIFORM_KEYWORDS,
    AdvantageEstimatorFn,
    get_adv_estimator_fn,
    register_adv_estimator,
)
from core_v1.algorithms.advantages.gae import compute_gae_advantage_return
from core_v1.algorithms.advantages.gdpo import compute_gdpo_outcome_advantage
from core_v1.algorithms.advantages.group import (
    compute_grpo_outcome_advantage,
    compute_grpo_passk_outcome_advantage,
    compute_grpo_vectorized_outcome_advantage,
    compute_opo_outcome_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_rloo_outcome_advantage,
    compute_rloo_vectorized_outcome_advantage,
)
from core_v1.algorithms.advantages.otb import (
    OTB_ESTIMATORS,
    compute_optimal_token_baseline_advantage,
    compute_multi_turn_optimal_token_baseline_advantage,
)
from core_v1.algorithms.advantages.reinforce import (
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
)
from core_v1.algorithms.advantages.sessions import (
    broadcast_last_output_advantage,
    compute_multi_output_advantage,
    compute_session_advantage,
    last_output_rows,
)

__all__ = [
    "ADV_ESTIMATORS",
    "UNIFORM_KEYWORDS",
    "AdvantageEstimatorFn",
    "get_adv_estimator_fn",
    "register_adv_estimator",
    "compute_gae_advantage_return",
    "compute_gdpo_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_grpo_passk_outcome_advantage",
    "compute_grpo_vectorized_outcome_advantage",
    "compute_opo_outcome_advantage",
    "compute_rloo_vectorized_outcome_advantage",
    "OTB_ESTIMATORS",
    "compute_optimal_token_baseline_advantage",
    "compute_multi_turn_optimal_token_baseline_advantage",
    "compute_reinforce_plus_plus_baseline_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "compute_reinforce_plus_plus_outcome_advantage",
    "compute_remax_outcome_advantage",
    "broadcast_last_output_advantage",
    "compute_multi_output_advantage",
    "compute_session_advantage",
    "last_output_rows",
]
