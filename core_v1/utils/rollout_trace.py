"""`rollout_trace_op` and `rollout_trace_attr`: verl's rollout-tracing hooks, which record nothing here.

verl's `verl.utils.rollout_trace` sends a trace of each decorated call (arguments, result, the
sample's step and index) to a tracing backend (Weave or MLflow) when
`actor_rollout_ref.rollout.trace.backend` names one, and is a pass-through otherwise. rlbridge has
no tracing backend (those keys are accepted as no-ops: `shims/verl_keys/verdicts.py`), so both are
always the pass-through: user code decorated with them (a tool's `execute`, an agent loop's `run`)
runs unchanged and exactly as it would on verl with tracing off. Metrics of a run go to
`trainer.logger`.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def rollout_trace_op(func: F) -> F:
    """Mark `func` (a method, sync or async) as a traced rollout step: with no backend, `func` itself."""
    return func


@contextlib.contextmanager
def rollout_trace_attr(
    sample_index: Any = None,
    step: Any = None,
    rollout_n: Any = None,
    name: str = "rollout_trace",
    validate: bool = False,
) -> Iterator[None]:
    """verl's context manager that tags the traces made inside it with the sample; nothing to tag here."""
    yield
