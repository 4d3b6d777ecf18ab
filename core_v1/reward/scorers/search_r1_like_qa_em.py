"""Search-R1 question answering: the last `<answer>...</answer>` matched against the golden answers.

The ground truth is a dict whose `target` holds the golden answers (a string or a list of them).
Answers compare after SQuAD's normalisation (lower case, no punctuation, no articles a/an/the,
single spaces). `compute_score` wants an exact match with one golden answer; `compute_score_subem`
is satisfied when a golden answer occurs inside the prediction. A response that spams the tags
(more than 10 opening or closing `<answer>` tags) earns a quarter of the exact-match score.

The names and results are verl's (`verl.utils.reward_score.search_r1_like_qa_em`); verl's random
debug printing of one response in 64 is left out. `method` is accepted and ignored, as in verl.
"""

from __future__ import annotations

import re
import string
from typing import Any, Iterable

from core_v1.reward.scorers.registry import register_scorer

SEARCH_R1_SOURCES = (
    "searchR1_nq",
    "searchR1_triviaqa",
    "searchR1_popqa",
    "searchR1_hotpotqa",
    "searchR1_2wikimultihopqa",
    "searchR1_musique",
    "searchR1_bamboogle",
)
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_NO_PUNCTUATION = str.maketrans("", "", string.punctuation)
_TAG_SPAM = 10  # more tags than this in one response cut the exact-match score to a quarter


def normalize_answer(s: str) -> str:
    """SQuAD's answer normalisation: lower case, punctuation and articles removed, spaces collapsed."""
    return " ".join(_ARTICLES.sub(" ", s.lower().translate(_NO_PUNCTUATION)).split())


def _golden(golden_answers: str | Iterable[str]) -> list[str]:
    answers = [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)
    return [normalize_answer(answer) for answer in answers]


def em_check(prediction: str, golden_answers: str | Iterable[str]) -> int:
    """1 when the prediction equals a golden answer after normalisation, else 0."""
    return int(normalize_answer(prediction) in _golden(golden_answers))


def subem_check(prediction: str, golden_answers: str | Iterable[str]) -> int:
    """1 when a golden answer occurs in the prediction after normalisation, else 0."""
    predicted = normalize_answer(prediction)
    return int(any(answer in predicted for answer in _golden(golden_answers)))


def extract_solution(solution_str: str) -> str | None:
    """The text of the last `<answer>...</answer>`, stripped; None without one."""
    answers = _ANSWER.findall(solution_str)
    return answers[-1].strip() if answers else None


def count_answer_tags(text: str) -> tuple[int, int]:
    """(opening, closing) `<answer>` tags in `text`."""
    return text.count("<answer>"), text.count("</answer>")


@register_scorer(*SEARCH_R1_SOURCES)
def compute_score(
    solution_str: str,
    ground_truth: dict,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **_: Any,
) -> float:
    """`score` for an exact match (a quarter of it when the tags are spammed), `format_score` for a
    wrong answer in tags, 0 without an answer."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    if not em_check(answer, ground_truth["target"]):
        return format_score
    return score / 4 if max(count_answer_tags(solution_str)) > _TAG_SPAM else score


def compute_score_subem(
    solution_str: str,
    ground_truth: dict,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
    **_: Any,
) -> float:
    """`score` when a golden answer occurs in the answer, `format_score` otherwise, 0 without an answer."""
    answer = extract_solution(solution_str)
    if answer is None:
        return 0
    return score if subem_check(answer, ground_truth["target"]) else format_score
