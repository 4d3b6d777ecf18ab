"""The quickstart task: answer `a+b=` with the sum. Partial credit keeps a random policy above zero.

The score is 1 for the exact sum, falls off linearly with the distance to it (so a policy that
answers with any nearby number already earns a little, which is what lets RL start from a random
tiny model), and is 0 for text that is not a number.
"""

from __future__ import annotations

import re

from core_v1.reward.scorers import register_scorer

_LEADING_INT = re.compile(r"^\s*(-?\d+)")


@register_scorer("arithmetic", "rlbridge/arithmetic")
def compute_score(solution_str: str, ground_truth: str | int, tolerance: float = 5.0, **_) -> dict:
    match = _LEADING_INT.match(solution_str)
    if match is None:
        return {"score": 0.0, "exact": 0.0}
    distance = abs(int(match.group(1)) - int(ground_truth))
    return {"score": max(0.0, 1.0 - distance / tolerance), "exact": float(distance == 0)}
