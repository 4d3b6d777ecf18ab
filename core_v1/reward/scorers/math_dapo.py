"""DAPO's math answers: the last `Answer: ...` line (or, strictly, the last `\\boxed{}`), +1 or -1.

Two ways to read the answer from the last 300 characters of a response:

- the default (Minerva's): the text after the last `Answer:` (any case, to the end of its line),
  and the ground truth, both normalised by `normalize_final_answer` (the part after the last `=`;
  units, `\\text{}`, `$`, spaces and thousands separators removed; `\\frac12` braced) and compared
  as strings;
- `strict_box_verify=True`: the last `\\boxed{...}` in the final 100 characters (counted back from
  `pause_tokens_index[-1]` when given) must equal the ground truth exactly, without normalisation.

`compute_score` returns `{"score": 1.0 or -1.0, "acc": bool, "pred": the answer read}`. The names,
signatures and results are verl's (`verl.utils.reward_score.math_dapo`), so migrated reward files
that import `last_boxed_only_string`, `remove_boxed` or `normalize_final_answer` keep working;
`remove_boxed` raises ValueError (verl: AssertionError) on text that is not `\\boxed{...}`.
"""

from __future__ import annotations

import re
from typing import Any

from core_v1.reward.scorers.registry import register_scorer
from core_v1.reward.scorers.math import braced_group_end

# Everything a response may put after `=`, before normalisation, that does not change the answer.
# Order matters: articles go before spaces, `,\text{and}` before `\text{and}`.
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    ("an ", ""),
    ("a ", ""),
    (".$", "$"),
    ("\\$", ""),
    ("\\ ", ""),
    (" ", ""),
    ("mbox", "text"),
    (",\\text{and}", ","),
    ("\\text{and}", ","),
    ("\\text{m}", "\\text{}"),
)
# Units, filler words and TeX spacing dropped wherever they occur (after SUBSTITUTIONS).
REMOVED_EXPRESSIONS: tuple[str, ...] = (
    "square",
    "ways",
    "integers",
    "dollars",
    "mph",
    "inches",
    "hours",
    "km",
    "units",
    "\\ldots",
    "sue",
    "points",
    "feet",
    "minutes",
    "digits",
    "cents",
    "degrees",
    "cm",
    "gm",
    "pounds",
    "meters",
    "meals",
    "edges",
    "students",
    "childrentickets",
    "multiples",
    "\\text{s}",
    "\\text{.}",
    "\\text{\ns}",
    "\\text{}^2",
    "\\text{}^3",
    "\\text{\n}",
    "\\text{}",
    r"\mathrm{th}",
    r"^\circ",
    r"^{\circ}",
    r"\;",
    r",\!",
    "{,}",
    '"',
    "\\dots",
)
# (pattern, replacement) pairs that unwrap markup and brace TeX shorthand, in order.
_UNWRAP = (
    (re.compile(r"(.*?)(\$)(.*?)(\$)(.*)"), r"$\3$"),  # keep the first $...$ span only
    (re.compile(r"\\text\{(.*?)\}"), r"\1"),
    (re.compile(r"\\textbf\{(.*?)\}"), r"\1"),
    (re.compile(r"\\overline\{(.*?)\}"), r"\1"),
    (re.compile(r"\\boxed\{(.*)\}"), r"\1"),
    (re.compile(r"frac([^{])(.)"), r"frac{\1}{\2}"),  # \frac12 -> \frac{1}{2}
    (re.compile(r"sqrt([^{])"), r"sqrt{\1}"),  # \sqrt2 -> \sqrt{2}
)
MINERVA_ANSWER_PATTERN = r"(?i)Answer\s*:\s*([^\n]+)"
_INVALID = "[INVALID]"


def last_boxed_only_string(string: str) -> str | None:
    """The last `\\boxed{...}` (braces matched) of `string`, command included; None without one."""
    start = string.rfind("\\boxed{")
    if start < 0:
        return None
    end = braced_group_end(string, start)
    return None if end is None else string[start : end + 1]


def remove_boxed(s: str) -> str:
    """The text inside `\\boxed{...}`."""
    if s is None or not (s.startswith("\\boxed{") and s.endswith("}")):
        raise ValueError(f"box error: {s!r} is not \\boxed{{...}}")
    return s[len("\\boxed{") : -1]


def normalize_final_answer(final_answer: str) -> str:
    """Normalise a final answer to a quantitative question (Minerva's rules), for string comparison."""
    answer = final_answer.split("=")[-1]
    for old, new in SUBSTITUTIONS:
        answer = answer.replace(old, new)
    for expression in REMOVED_EXPRESSIONS:
        answer = answer.replace(expression, "")
    for pattern, replacement in _UNWRAP:
        answer = pattern.sub(replacement, answer)
    answer = answer.replace("$", "")
    if answer.replace(",", "").isdigit():
        answer = answer.replace(",", "")
    return answer.strip()


def is_correct_minerva(
    solution_str: str, gt: str, gt_need_extract: bool = False, answer_pattern: str = MINERVA_ANSWER_PATTERN
) -> tuple[bool, str]:
    """(right?, normalised prediction) for the last `Answer:` line; `[INVALID]` when there is none.

    `gt_need_extract`: the ground truth is a worked solution whose last `\\boxed{}` is the answer.
    """
    found = re.findall(answer_pattern, solution_str)
    prediction = normalize_final_answer(found[-1] if found else _INVALID)
    truth = remove_boxed(last_boxed_only_string(gt)) if gt_need_extract else gt
    return prediction == normalize_final_answer(truth), prediction


def is_correct_strict_box(pred: str, gt: str, pause_tokens_index: list[int] | None = None) -> tuple[int, str | None]:
    """(1 or -1, the boxed text or None): the last box near the end must equal `gt` character for character.

    `pause_tokens_index` (four positions): look at the 100 characters before the last one instead.
    """
    if pause_tokens_index is not None:
        if len(pause_tokens_index) != 4:
            raise ValueError(f"pause_tokens_index needs 4 positions, got {len(pause_tokens_index)}")
        tail = pred[max(pause_tokens_index[-1] - 100, 0) :]
    else:
        tail = pred[-100:]
    boxed = last_boxed_only_string(tail)
    extracted = None if boxed is None else remove_boxed(boxed)
    return (1 if extracted == gt else -1), extracted


def verify(
    solution_str: str, answer: str, strict_box_verify: bool = False, pause_tokens_index: list[int] | None = None
) -> tuple[bool, str | None]:
    """(right?, the prediction read) by the strict box rule or by Minerva's."""
    if strict_box_verify:
        sign, prediction = is_correct_strict_box(solution_str, answer, pause_tokens_index)
        return sign == 1, prediction
    return is_correct_minerva(solution_str, answer)


@register_scorer("math_dapo", "math", "math_dapo_reasoning", "aime")
def compute_score(
    solution_str: str,
    ground_truth: str,
    strict_box_verify: bool = False,
    pause_tokens_index: list[int] | None = None,
    **_: Any,
) -> dict:
    """`{"score": 1.0 | -1.0, "acc": bool, "pred": str | None}` for one response."""
    # The final answer sits at the end; MATH-500's longest is 159 characters.
    correct, prediction = verify(solution_str[-300:], str(ground_truth), strict_box_verify, pause_tokens_index)
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": prediction}
