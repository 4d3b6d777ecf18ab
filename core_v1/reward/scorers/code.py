"""verl's code data sources: `codecontests`, `apps`, `codeforces`, `taco`.

A row of these is scored by running the model's program against its test cases (the row's
ground truth): in a Sandbox Fusion service when the run sets `reward.sandbox_fusion.url`
(`sandbox_fusion.compute_score`, with the run's `max_concurrent` and `memory_limit_mb`), else
locally (`prime_code.compute_score`), both with `continuous=True`, as verl's
`default_compute_score` does. The score is the fraction of the first 10 cases that pass (1.0 when
all pass).
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.reward.scorers import prime_code, sandbox_fusion
from core_v1.reward.scorers.registry import register_scorer

CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")


@register_scorer(*CODE_SOURCES)
def compute_score(
    solution_str: str,
    ground_truth: Any,
    sandbox_fusion_url: Optional[str] = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: Optional[int] = None,
    **kwargs: Any,
) -> tuple[Any, Any]:
    if sandbox_fusion_url:
        return sandbox_fusion.compute_score(
            sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, solution_str, ground_truth, continuous=True
        )
    return prime_code.compute_score(solution_str, ground_truth, continuous=True)
