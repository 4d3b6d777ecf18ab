"""GSM8K-style answers: the final answer follows `#### ` (strict) or is the last number (flexible)."""

from __future__ import annotations

import re

from core_v1.reward.scorers.registry import register_scorer

_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_NUMBER = re.compile(r"(\-?[0-9\.\,]+)")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    if method not in ("strict", "flexible"):
        raise ValueError(f"gsm8k extraction method {method!r} is not one of strict, flexible")
    # Long generations: only the tail can hold the final answer, and regexes over the head are wasted.
    tail = solution_str[-300:]
    if method == "strict":
        matches = _STRICT.findall(tail)
        return matches[-1].replace(",", "").replace("$", "") if matches else None
    for candidate in reversed(_NUMBER.findall(tail)):
        if candidate not in ("", "."):
            return candidate.replace(",", "")
    return None


@register_scorer("openai/gsm8k", "gsm8k")
def compute_score(
    solution_str: str, ground_truth: str, method: str = "strict", format_score: float = 0.0, score: float = 1.0, **_
) -> float:
    """`score` for the right answer, `format_score` for a well-formed wrong one, 0 otherwise."""
    answer = extract_solution(solution_str, method)
    if answer is None:
        return 0.0
    return score if answer == str(ground_truth).strip() else format_score
