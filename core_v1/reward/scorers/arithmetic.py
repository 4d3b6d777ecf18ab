"""The quickstart task: answer `a + b =` with the sum.

The score is 1 for the exact sum and falls off linearly with the distance to it, reaching 0 at
`tolerance` (2: an answer off by one earns 0.5); text that does not start with a number earns 0.
A random policy that happens to emit a nearby digit already scores, which is what lets RL start
from a random tiny model. The tolerance is deliberately narrow: with a wide one, always answering
the median sum collects most of the credit and learning stops there; a flat "format" credit for
any number rewards long digit strings instead.
"""

from __future__ import annotations

import re

from core_v1.reward.scorers.registry import register_scorer

_LEADING_INT = re.compile(r"^\s*(-?\d+)")


@register_scorer("arithmetic", "rlbridge/arithmetic")
def compute_score(solution_str: str, ground_truth: str | int, tolerance: float = 2.0, **_) -> dict:
    match = _LEADING_INT.match(solution_str)
    if match is None:
        return {"score": 0.0, "exact": 0.0}
    distance = abs(int(match.group(1)) - int(ground_truth))
    return {"score": max(0.0, 1.0 - distance / tolerance), "exact": float(distance == 0)}
