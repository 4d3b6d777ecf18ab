"""Rule-based scorers, one small module per task, registered by `data_source`.

Each scorer is `compute_score(solution_str, ground_truth, **kwargs) -> float | dict` (a dict
carries `score` plus extra per-sample metrics). `default_compute_score` dispatches on a row's
`data_source`, the way verl's `default_compute_score` does.
"""

from __future__ import annotations

from typing import Any, Callable

from core_v1.utils.registry import Registry

SCORERS: Registry[Callable[..., Any]] = Registry("reward scorer (by data_source)", check=callable,
                                                 config_key="the data's data_source column")


def register_scorer(*data_sources: str):
    def decorate(fn):
        for name in data_sources:
            SCORERS.register(name, fn)
        return fn
    return decorate


def default_compute_score(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None,
                          **kwargs: Any) -> float | dict:
    """Score one response with the scorer registered for its `data_source`."""
    return SCORERS.get(data_source)(solution_str, ground_truth, **kwargs)


# Built-in scorers register themselves on import.
from core_v1.reward.scorers import arithmetic, gsm8k  # noqa: E402,F401
