"""Advantages for multi-output agent loops: one session, several training rows.

An agent loop may return several outputs per session (e.g. one per turn whose context was
rewritten), so a batch holds groups x n x outputs rows. The session is the unit being judged:
the estimator sees only the *last* output of each session (which carries the session's
reward), so group statistics count each session once, and that output's advantage is then
broadcast to every output of the session (docs/migration.md, "What changes in meaning").

Row keys: `index` is the prompt-group uid (as for any estimator); `session_index` identifies the
session (e.g. `f"{uid}_{session_id}"`); `output_index` orders the outputs of a session (the
store's `index`). Without `output_index`, the last row of a session in batch order is its last.

Broadcasting needs one number per session, so the estimator must give the last output the same
advantage on all its valid tokens: outcome estimators (grpo, rloo, reinforce_plus_plus_baseline,
remax with outcome rewards, ...) do; `gae` and the optimal token baselines do not and are refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from core_v1.algorithms.advantages.registry import AdvantageEstimatorFn
from core_v1.algorithms.errors import AlgorithmInputError

# Per-row inputs of the uniform estimator signature that must be subset with the rows.
_PER_ROW_INPUTS = (
    "token_level_rewards",
    "response_mask",
    "index",
    "values",
    "reward_baselines",
    "reward_extra",
    "old_log_probs",
    "sum_pi_squared",
    "rollout_is_weights",
)


def last_output_rows(
    session_index: Sequence | np.ndarray, output_index: Sequence | np.ndarray | None = None
) -> np.ndarray:
    """Row numbers of the last output of each session, in order of first appearance of the session."""
    sessions = np.asarray(session_index, dtype=object).astype(str)
    order = np.arange(len(sessions)) if output_index is None else np.asarray(output_index)
    if order.shape != sessions.shape:
        raise AlgorithmInputError(f"output_index has {order.shape[0]} entries for {sessions.shape[0]} rows")
    last: dict[str, int] = {}
    for row, session in enumerate(sessions):
        current = last.get(session)
        if current is not None and order[row] == order[current] and output_index is not None:
            raise AlgorithmInputError(
                f"session {session!r} has two rows with output_index {order[row]}; "
                "each output of a session needs its own index"
            )
        if current is None or order[row] > order[current]:
            last[session] = row
    return np.fromiter(last.values(), dtype=np.int64, count=len(last))


def broadcast_last_output_advantage(
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    session_index: Sequence | np.ndarray,
    output_index: Sequence | np.ndarray | None = None,
    atol: float = 1e-5,
) -> torch.Tensor:
    """Give every row of a session the advantage its last output has (spread over its own valid tokens).

    `advantages` [B, R] only needs to be meaningful on the last-output rows. A last output with no
    valid token passes 0. Raises if a last output's advantage varies across its valid tokens.
    """
    sessions = np.asarray(session_index, dtype=object).astype(str)
    last_rows = last_output_rows(sessions, output_index)
    mask = response_mask.to(advantages.dtype)
    per_session = {}
    for row in last_rows.tolist():
        valid = advantages[row][mask[row] != 0]
        if valid.numel() and float((valid - valid[0]).abs().max()) > atol:
            raise AlgorithmInputError(
                f"the last output of session {sessions[row]!r} has token-varying advantages, which cannot be "
                "broadcast to its other outputs; multi-output sessions need an outcome estimator "
                "(grpo, rloo, reinforce_plus_plus_baseline, ...), not gae or an optimal token baseline"
            )
        per_session[sessions[row]] = valid[0] if valid.numel() else advantages.new_zeros(())
    session_values = torch.stack([per_session[s] for s in sessions.tolist()])
    return session_values.unsqueeze(-1) * mask


def compute_multi_output_advantage(
    estimator: AdvantageEstimatorFn,
    *,
    session_index: Sequence | np.ndarray,
    output_index: Sequence | np.ndarray | None = None,
    **estimator_inputs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run `estimator` on the last output of each session and broadcast to all outputs.

    `estimator_inputs` are the uniform keywords (token_level_rewards, response_mask, index, ...)
    for the full batch; returns (advantages, returns), both [B, R], equal as for outcome estimators.
    """
    response_mask = estimator_inputs["response_mask"]
    last_rows = last_output_rows(session_index, output_index)
    subset = {
        name: _take_rows(value, last_rows) if name in _PER_ROW_INPUTS and value is not None else value
        for name, value in estimator_inputs.items()
    }
    last_advantages, _ = estimator(**subset)
    full = torch.zeros(response_mask.shape, dtype=last_advantages.dtype, device=last_advantages.device)
    full[torch.as_tensor(last_rows, device=full.device)] = last_advantages
    advantages = broadcast_last_output_advantage(full, response_mask, session_index, output_index)
    return advantages, advantages


def compute_session_advantage(
    estimator: AdvantageEstimatorFn,
    session_index: Sequence | np.ndarray,
    output_index: Sequence | np.ndarray | None = None,
    /,
    **estimator_inputs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`estimator` with the session as the unit: run as it is when every session has one output (the
    common case, and the only one `gae` allows), else through `compute_multi_output_advantage`."""
    sessions = np.asarray(session_index, dtype=object).astype(str)
    if len(set(sessions.tolist())) == len(sessions):
        return estimator(**estimator_inputs)
    return compute_multi_output_advantage(
        estimator, session_index=sessions, output_index=output_index, **estimator_inputs
    )


def _take_rows(value, rows: np.ndarray):
    if isinstance(value, torch.Tensor):
        return value[torch.as_tensor(rows, device=value.device)]
    return np.asarray(value, dtype=object)[rows]
