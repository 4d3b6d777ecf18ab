"""Reward of the calculator example (`reward.custom_reward_function.path`): 1.0 when the model's
final answer is exactly `a*b+c`, else 0.0.

The reward sees the whole response decoded with special tokens skipped: model turns and tool
messages together. With a ChatML chat template (the tiny model's and Qwen's) every turn after a
tool message begins with an "assistant" line, so the final answer is the last number after the
last such line, and the calculator's own output earns nothing unless the model repeats it.
"""

from __future__ import annotations

import re

_TURN_START = "assistant\n"
_INTEGER = re.compile(r"-?\d+")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    final_turn = solution_str.rsplit(_TURN_START, 1)[-1]
    numbers = _INTEGER.findall(final_turn)
    exact = bool(numbers) and int(numbers[-1]) == int(ground_truth)
    return {
        "score": float(exact),
        "answered": float(bool(numbers)),
        "tool_rounds": float(solution_str.count(_TURN_START)),
    }
