"""Geometry3K answers: the last `\\boxed{}` graded like PRIME's math, plus a small format credit.

`compute_score = (1 - format_score) * acc_reward + format_score * format_reward`, where
`acc_reward` is 1.0 when the boxed answer (or, with `use_boxed=False`, the whole response) passes
`prime_math.grade_answer`, and `format_reward` is 1.0 for a response shaped
`<think>...</think> ... \\boxed{...}`. The names and the formula are verl's
(`verl.utils.reward_score.geo3k`); verl grades with the `mathruler` package, whose grader is the
PRM800K one that `prime_math` carries, so rlbridge needs no extra package.

Checked against mathruler 0.1.0: the default (boxed) scores agree on 31 responses
(tests/core_v1/reward). One known gap: mathruler reads LaTeX with pylatexenc, which drops macros
it does not know and keeps their argument, so with `use_boxed=False` a whole response like
`\\boxed{3}` grades as `3` there and as wrong here.
"""

from __future__ import annotations

import re
from typing import Any

from core_v1.reward.scorers.registry import register_scorer
from core_v1.reward.scorers.math import braced_group_end
from core_v1.reward.scorers.prime_math import grade_answer

_THINK_THEN_BOX = re.compile(r"<think>.*</think>.*\\boxed\{.*\}.*", re.DOTALL)


def extract_boxed_content(text: str) -> str:
    """The stripped content of the last `\\boxed{`'s braces, or the string "None" without one (as
    mathruler returns; unlike the math scorers, `\\fbox{}` does not count)."""
    start = text.rfind("\\boxed{")
    end = braced_group_end(text, start + len("\\boxed")) if start >= 0 else None
    return "None" if end is None else text[start + len("\\boxed{") : end].strip()


def format_reward(predict_str: str) -> float:
    """1.0 when the response thinks in `<think>` tags and then boxes an answer."""
    return 1.0 if _THINK_THEN_BOX.fullmatch(predict_str) else 0.0


def acc_reward(predict_str: str, ground_truth: str, use_boxed: bool = True) -> float:
    """1.0 when the boxed answer (the whole response, without `use_boxed`) is the ground truth."""
    answer = extract_boxed_content(predict_str) if use_boxed else predict_str
    return 1.0 if grade_answer(answer, str(ground_truth)) else 0.0


@register_scorer("hiyouga/geometry3k")
def compute_score(
    predict_str: str, ground_truth: str, use_boxed: bool = True, format_score: float = 0.1, **_: Any
) -> float:
    return (1.0 - format_score) * acc_reward(predict_str, ground_truth, use_boxed) + format_score * format_reward(
        predict_str
    )
