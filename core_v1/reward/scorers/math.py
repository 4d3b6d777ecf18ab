"""Hendrycks MATH answers: the last `\\boxed{}` of a response, compared after string normalisation.

The response's final answer is the last `\\boxed{...}` (braces matched, so `\\boxed{\\frac{1}{2}}` is
whole), `\\boxed 5` (up to the next `$`) or `\\fbox{...}`. It and the ground truth are normalised
by `strip_string` (the MATH benchmark's rules: `\\dfrac` is `\\frac`, units after `\\text{ ` and
`\\%`, `^\\circ`, `\\left`/`\\right` and spaces go, `\\frac12` is `\\frac{1}{2}`, `1/2` and `0.5`
are `\\frac{1}{2}`, a short `x = ` prefix goes) and compared as strings: no algebra, so `2/4` is not
`1/2` (see `prime_math` for a sympy-backed grader). The score is 1.0 or 0.0.

The names are verl's (`verl.utils.reward_score.math`, renamed `math_reward` in verl 0.6), so a
migrated reward file keeps calling `last_boxed_only_string`, `remove_boxed`, `is_equiv`,
`strip_string` and `compute_score`. Departures: where a response holds both a `\\boxed 5` and a later
`\\boxed{6}`, the later one is the answer (verl preferred any space form); `remove_boxed` also opens
`\\fbox{}` and raises ValueError (not AssertionError) on text that is not boxed.
"""

from __future__ import annotations

import re
from typing import Any

from core_v1.reward.scorers.registry import register_scorer

_BOX_COMMANDS = ("\\boxed", "\\fbox")


def braced_group_end(text: str, start: int) -> int | None:
    """Index of the `}` closing the first `{` at or after `start`; None when it never closes."""
    depth = 0
    for index in range(start, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return None


def last_boxed_only_string(string: str) -> str | None:
    """The last boxed answer with its command, `\\boxed{...}` or `\\boxed ...`; None without one."""
    start = max(string.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    if string.startswith("\\boxed ", start):  # `\boxed 5$`: the answer runs to the closing dollar
        return "\\boxed " + string[start + len("\\boxed ") :].split("$")[0]
    end = braced_group_end(string, start)
    return None if end is None else string[start : end + 1]


def remove_boxed(s: str) -> str:
    """The answer inside `\\boxed{...}`, `\\fbox{...}` or after `\\boxed `."""
    if s is not None and s.startswith("\\boxed "):
        return s[len("\\boxed ") :]
    for command in _BOX_COMMANDS:
        if s is not None and s.startswith(command + "{") and s.endswith("}"):
            return s[len(command) + 1 : -1]
    raise ValueError(f"not a boxed answer: {s!r}")


def fix_sqrt(string: str) -> str:
    """`\\sqrt3` -> `\\sqrt{3}`: a one-character radicand gets its braces."""
    return re.sub(r"\\sqrt([^{])", r"\\sqrt{\1}", string)


_SHORT_FRAC = re.compile(r"\\frac([^{])(.)")


def fix_fracs(string: str) -> str:
    """`\\frac12` -> `\\frac{1}{2}`, `\\frac1{72}` -> `\\frac{1}{72}` (one-character numerators)."""

    def braced(match: re.Match) -> str:
        numerator, after = match.groups()
        return f"\\frac{{{numerator}}}" + ("{" if after == "{" else f"{{{after}}}")

    return _SHORT_FRAC.sub(braced, string)


def fix_a_slash_b(string: str) -> str:
    """`3/4` -> `\\frac{3}{4}`, for plain integers only."""
    match = re.fullmatch(r"(-?\d+)/(-?\d+)", string)
    if match is None or string != f"{int(match.group(1))}/{int(match.group(2))}":  # no `03/4`
        return string
    return f"\\frac{{{match.group(1)}}}{{{match.group(2)}}}"


def remove_right_units(string: str) -> str:
    """Drop a trailing unit: in MATH answers `\\text{ ` (with the space) only ever opens one."""
    return string.split("\\text{ ")[0]


# Plain substitutions, applied in order before the structural fixes.
_REPLACEMENTS = (
    ("\n", ""),
    ("\\!", ""),
    ("\\\\", "\\"),
    ("tfrac", "frac"),
    ("dfrac", "frac"),
    ("\\left", ""),
    ("\\right", ""),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\$", ""),
)


def strip_string(string: str) -> str:
    """Normalise a MATH answer so that equal answers written differently compare equal as strings."""
    for old, new in _REPLACEMENTS:
        string = string.replace(old, new)
    string = remove_right_units(string)
    string = string.replace("\\%", "").replace(" .", " 0.").replace("{.", "{0.")
    if not string:
        return string
    if string.startswith("."):
        string = "0" + string
    left, equals, right = string.partition("=")
    if equals and "=" not in right and len(left) <= 2:  # `k = 5`, `x=3`: keep the value
        string = right
    string = fix_fracs(fix_sqrt(string).replace(" ", ""))
    if string == "0.5":
        return "\\frac{1}{2}"
    return fix_a_slash_b(string)


def is_equiv(str1: str | None, str2: str | None, verbose: bool = False) -> bool:
    """Do two answers agree after `strip_string`? Two missing answers agree; one missing does not."""
    if str1 is None or str2 is None:
        return str1 is None and str2 is None
    left, right = strip_string(str1), strip_string(str2)
    if verbose:
        print(left, right)
    return left == right


@register_scorer("lighteval/MATH", "DigitalLearningGmbH/MATH-lighteval", "HuggingFaceH4/MATH-500")
def compute_score(solution_str: str, ground_truth: Any, **_: Any) -> float:
    """1.0 when the response's last boxed answer equals the ground truth after normalisation, else 0.0."""
    boxed = last_boxed_only_string(solution_str)
    try:
        answer = remove_boxed(boxed)
    except ValueError:  # no box, or a box command whose braces do not follow it at once
        return 0.0
    return 1.0 if is_equiv(answer, str(ground_truth)) else 0.0
