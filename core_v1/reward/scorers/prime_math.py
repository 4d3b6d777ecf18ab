"""PRIME's math answers (NuminaMath sources): the answer is found in prose, then graded with sympy.

`match_answer` reads the final answer from a free-form response: after the last "answer:" /
"answer is", before "is the answer", inside the last `\\boxed{}`, after the last "is", "=", ":"
... (an answer must hold a digit to count as found). `grade_answer` is the PRM800K grader: equal
after the MATH normalisation (`math.strip_string`), or after a sympy-oriented one (units, `$`, `%`,
"million" and `\\text{}` handled; LaTeX turned into sympy syntax), or, element by element for
tuples and intervals, with a sympy-simplified difference of 0. Unreduced fractions must match
exactly, and an integer answer must be an integer. `math_equal` is the looser second try of
`compute_score`: numbers equal within 1e-4 (also as percentages), then a numeric sympy comparison.

`compute_score(model_output, ground_truth)` returns verl's triple `(correct, well_formatted,
extracted)`; `default_compute_score` reports its first item as 1.0/0.0.

Departures from verl (`verl.utils.reward_score.prime_math`): LaTeX is converted by a small
translator of our own instead of pylatexenc, and there is no latex2sympy fallback; nothing is
passed to Python's `eval` (sympy parses only expressions of at most two unknown letters, and with
a 10 s alarm where the scorer runs on the main thread); matrices and `Point(...)` answers are
compared as strings only.
"""

from __future__ import annotations

import contextlib
import math
import re
import signal
import threading
from typing import Any, Iterator

from core_v1.reward.scorers.registry import register_scorer
from core_v1.reward.scorers.math import braced_group_end, strip_string

NUMINA_SOURCES = (
    "numina_aops_forum",
    "numina_synthetic_math",
    "numina_amc_aime",
    "numina_synthetic_amc",
    "numina_cn_k12",
    "numina_olympiads",
)
SYMPY_SECONDS = 10

# --- finding the answer --------------------------------------------------------------------------

_CUT_BEFORE = ("answer:", "answer is", "answers are")  # the answer follows these
_CUT_AFTER = ("is answer", "is the answer", "are answers", "are the answers")  # ... or precedes these
_LAST_LEAD_INS = ("be ", "is ", "are ", "=", ": ", "get ", "be\n", "is\n", "are\n", ":\n", "get\n")


def boxed_content(text: str) -> str | None:
    """The stripped content of the last `\\boxed{}` or `\\fbox{}`; None without one."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    opening = text.find("{", start) if start >= 0 else -1
    end = braced_group_end(text, opening) if opening >= 0 else None
    return None if end is None else text[opening + 1 : end].strip()


def match_answer(response: str) -> tuple[bool, str]:
    """(was an answer found?, the answer text) for a free-form response."""
    found = False
    for marker in _CUT_BEFORE:
        at = response.lower().rfind(marker)
        if at != -1:
            found, response = True, response[at + len(marker) :].strip()
    for marker in _CUT_AFTER:
        at = response.lower().rfind(marker)
        if at != -1:
            found, response = True, response[:at].strip()
    boxed = boxed_content(response)
    if boxed:
        found, response = True, boxed
    if ". " in response:  # a sentence after the answer
        response = response[: response.rfind(". ")].strip()
    for lead_in in _LAST_LEAD_INS:
        at = response.lower().rfind(lead_in)
        if at != -1:
            found, response = True, response[at + len(lead_in) :].strip()
    return found and any(char.isdigit() for char in response), response


# --- the PRM800K grader ----------------------------------------------------------------------------

_UNITS = (
    "degree",
    "cm",
    "centimeter",
    "meter",
    "mile",
    "second",
    "minute",
    "hour",
    "day",
    "week",
    "month",
    "year",
    "foot",
    "feet",
    "inch",
    "yard",
    "liter",
)
_UNIT = re.compile("(" + "|".join(_UNITS) + r")(es)?(s)? *(\^[0-9]+)?")
_SCALES = (("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12"))
_TEXT_ONLY = re.compile(r"^\\text\{(?P<text>.+?)\}$")
_THOUSANDS_COMMA = re.compile(r"(\d),(\d\d\d)($|\D)")
_BRACKETS = "()[]"


def mathd_normalize(answer: str | None) -> str | None:
    """The MATH normalisation, after unwrapping an answer that is one `\\text{...}`."""
    if answer is None:
        return None
    answer = answer.strip()
    wrapped = _TEXT_ONLY.search(answer)
    return strip_string(wrapped.group("text").strip() if wrapped else answer)


def _strip_thousands_commas(expr: str) -> str:
    """`1,000,000` -> `1000000`, leaving tuple commas (`1,2`) alone."""
    while True:
        stripped = _THOUSANDS_COMMA.sub(r"\1\2\3", expr)
        if stripped == expr:
            return expr
        expr = stripped


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _str_is_int(text: str) -> bool:
    value = _as_float(_strip_thousands_commas(text))
    return value is not None and math.isfinite(value) and abs(value - round(value)) <= 1e-7


def _is_frac(text: str) -> bool:
    return re.search(r"^-?[0-9]+.?/0*[1-9][0-9]*.?$", text) is not None


def normalize(expr: str | None) -> str | None:
    """The sympy-oriented normalisation of PRM800K's grader."""
    if expr is None:
        return None
    wrapped = _TEXT_ONLY.search(expr)
    if wrapped:
        expr = wrapped.group("text")
    for old, new in (("\\%", "%"), ("\\$", "$"), ("$", ""), ("%", ""), (" or ", " , "), (" and ", " , "), *_SCALES):
        expr = expr.replace(old, new)
    expr = re.sub(r"\^ *\\circ", "", _UNIT.sub("", expr))
    if expr.startswith("{") and expr.endswith("}"):
        expr = expr[1:-1]
    expr = re.sub(r",\\! *", "", expr)
    value = _as_float(expr)
    if value is not None and _str_is_int(expr):
        expr = str(int(round(value)))
    if "\\" in expr:
        expr = latex_to_sympy(expr)
    expr = re.sub(r"- *", "-", expr)
    expr = re.sub(r"([0-9]) +([0-9])", r"\1+\2", expr)  # a mixed number: `7 3/4` is 7+3/4
    expr = expr.lower()
    if _str_is_int(expr):
        expr = str(int(float(_strip_thousands_commas(expr))))
    return expr


def split_tuple(expr: str) -> list[str]:
    """The elements of a tuple or interval `(a, b)` / `[a, b)`; a lone answer is one element."""
    expr = _strip_thousands_commas(expr)
    if not expr:
        return []
    if (
        len(expr) > 2
        and expr[0] in _BRACKETS
        and expr[-1] in _BRACKETS
        and not any(char in expr[1:-1] for char in _BRACKETS)
    ):
        return [element.strip() for element in expr[1:-1].split(",")]
    return [expr]


def grade_answer(given_answer: str | None, ground_truth: str) -> bool:
    """Is `given_answer` the ground truth, by the PRM800K grader's rules?"""
    if given_answer is None:
        return False
    if mathd_normalize(ground_truth) == mathd_normalize(given_answer):
        return True
    truth, given = normalize(ground_truth), normalize(given_answer)
    if truth == given:
        return True
    if not given:
        return False
    truth_parts, given_parts = split_tuple(truth), split_tuple(given)
    if len(truth_parts) != len(given_parts):
        return False
    if len(truth_parts) > 1 and (truth[0], truth[-1]) != (given[0], given[-1]):  # ( vs [: open or closed
        return False
    return all(_parts_equal(t, g) for t, g in zip(truth_parts, given_parts))


def _parts_equal(truth: str, given: str) -> bool:
    if _is_frac(truth) and _is_frac(given):
        return truth == given  # an unreduced fraction is not the reduced one
    if _str_is_int(truth) != _str_is_int(given):
        return False  # an integer answer needs an integer
    return equal_under_sympy(truth, given)


# --- sympy -----------------------------------------------------------------------------------------

_RISKY_POWERS = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))


def may_parse(expr: str) -> bool:
    """Only small expressions reach sympy: at most two unknown letters and no towering powers.

    sympy's parser evaluates its input, and simplifying a huge power can run for minutes.
    """
    letters = {char for char in expr.replace("sqrt", "").replace("frac", "") if char.isalpha()}
    if len(letters) > 2 or "^{" in expr or "^(" in expr or "_" in expr:
        return False
    return not any(pattern.search(expr) for pattern in _RISKY_POWERS)


@contextlib.contextmanager
def _time_limit(seconds: int) -> Iterator[None]:
    """Raise TimeoutError after `seconds` on the main thread; elsewhere (no signals) run unlimited."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"sympy took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _sympy(expr: str) -> Any:
    from sympy.parsing import sympy_parser  # sympy loads in a second: only when an answer needs it

    transformations = sympy_parser.standard_transformations + (sympy_parser.implicit_multiplication_application,)
    return sympy_parser.parse_expr(expr.replace("^", "**"), transformations=transformations)


def equal_under_sympy(truth: str, given: str) -> bool:
    """Does sympy simplify `(truth) - (given)` to 0?"""
    difference = f"({truth})-({given})"
    if not may_parse(difference):
        return False
    import sympy

    try:
        with _time_limit(SYMPY_SECONDS):
            return sympy.simplify(_sympy(difference)) == 0
    except Exception:  # unparsable, or timed out: not shown equal
        return False


def _close_under_sympy(truth: str, given: str, tolerance: float) -> bool:
    if not (may_parse(truth) and may_parse(given)):
        return False
    import sympy

    try:
        with _time_limit(SYMPY_SECONDS):
            a, b = _sympy(truth), _sympy(given)
            return sympy.simplify(a - b) == 0 or math.isclose(float(sympy.N(a)), float(sympy.N(b)), rel_tol=tolerance)
    except Exception:
        return False


_LATEX_SYMBOLS = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\div", "/"),
    ("\\pi", "pi"),
    ("\\infty", "oo"),
    ("\\cup", "U"),
    ("\\,", ""),
    ("\\!", ""),
    ("\\ ", ""),
)


def latex_to_sympy(expr: str) -> str:
    """Turn the LaTeX of a short answer into sympy syntax: `\\frac{a}{b}` -> `a/b`, `\\sqrt{x}` -> `sqrt(x)`."""
    for old, new in (("\\tfrac", "\\frac"), ("\\dfrac", "\\frac"), *_LATEX_SYMBOLS):
        expr = expr.replace(old, new)
    expr = re.sub(r"\\(?:text|mathrm|mbox)\{([^{}]*)\}", r"\1", expr)
    while True:
        converted = _innermost(expr)
        if converted == expr:
            break
        expr = converted
    return expr.replace("{", "(").replace("}", ")").replace("\\", "").strip()


_FRAC = re.compile(r"\\frac\{([^{}]*)\}\{([^{}]*)\}")
_SQRT = re.compile(r"\\sqrt\{([^{}]*)\}")
_SQRT_SHORT = re.compile(r"\\sqrt([0-9a-zA-Z])")


def _innermost(expr: str) -> str:
    """One pass of rewriting the fractions and roots whose arguments hold no braces."""

    def group(text: str) -> str:
        return text if re.fullmatch(r"[0-9a-zA-Z.]+", text) else f"({text})"

    expr = _FRAC.sub(lambda m: f" {group(m.group(1))}/{group(m.group(2))}", expr)  # the space: `3\frac12` is 3+1/2
    expr = _SQRT.sub(lambda m: f"sqrt({m.group(1)})", expr)
    return _SQRT_SHORT.sub(r"sqrt(\1)", expr)


# --- the looser second try ------------------------------------------------------------------------


def _number(text: str) -> float | None:
    return _as_float(text.replace("{,}", "").replace(",", ""))


def _plain(answer: str, pi: float) -> str:
    """Drop a leading `$`, a trailing `%`, a base subscript (`101_2`), and write `\\pi` as a number."""
    if re.match(r"\$\d+(\.\d+)?", answer):
        return answer[1:]
    if re.match(r"^\d+(\.\d+)?(\\)?%$", answer):
        return answer.replace("\\%", "").replace("%", "")
    if "_" in answer and _as_float(answer.split("_")[0]) is not None:
        return str(int(float(answer.split("_")[0])))
    if "\\pi" in answer:
        with_pi = re.sub(r"(?<=[0-9])\\pi", f"*{pi}", answer).replace("\\pi", f"1*{pi}")
        value = _sympy_number(latex_to_sympy(with_pi))
        return answer if value is None else repr(value)
    return answer


def _sympy_number(expr: str) -> float | None:
    if not may_parse(expr):
        return None
    try:
        with _time_limit(SYMPY_SECONDS):
            return float(_sympy(expr))
    except Exception:
        return None


def math_equal(
    prediction: str, reference: str, include_percentage: bool = True, tolerance: float = 1e-4, pi: float = math.pi
) -> bool:
    """Equal as text, as numbers (within `tolerance`; also x100 and /100), element by element, or by sympy."""
    prediction, reference = _plain(str(prediction), pi)[:1000].strip(), _plain(str(reference), pi).strip()
    if prediction.lower() == reference.lower() or prediction.replace(" ", "") == reference.replace(" ", ""):
        return True
    predicted, expected = _number(prediction), _number(reference)
    if predicted is not None and expected is not None:
        candidates = (expected / 100, expected, expected * 100) if include_percentage else (expected,)
        return any(math.isclose(candidate, predicted, rel_tol=tolerance) for candidate in candidates)
    if not prediction:
        return False
    if _same_without_grouping(prediction, reference):
        return True
    if (
        prediction[0] in "(["
        and prediction[-1] in ")]"
        and (prediction[0], prediction[-1]) == (reference[:1], reference[-1:])
        and _elementwise(prediction[1:-1], reference[1:-1], include_percentage, tolerance)
    ):
        return True
    if "," in prediction and "," in reference:
        return _elementwise(prediction, reference, include_percentage, tolerance)
    return _close_under_sympy(latex_to_sympy(reference), latex_to_sympy(prediction), tolerance)


def _same_without_grouping(prediction: str, reference: str) -> bool:
    """Equal once braces and parentheses go (and the outer brackets, unless they differ in kind)."""
    outer = (prediction[:1], prediction[-1:])
    if (outer == ("[", "]") and not reference.startswith("(")) or (
        outer == ("(", ")") and not reference.startswith("[")
    ):
        prediction, reference = prediction.strip("[]()"), reference.strip("[]()")
    return re.sub(r"[{}()]", "", prediction) == re.sub(r"[{}()]", "", reference)


def _elementwise(prediction: str, reference: str, include_percentage: bool, tolerance: float) -> bool:
    predicted, expected = prediction.split(","), reference.split(",")
    return len(predicted) == len(expected) and all(
        math_equal(p.strip(), e.strip(), include_percentage, tolerance) for p, e in zip(predicted, expected)
    )


@register_scorer(*NUMINA_SOURCES)
def compute_score(model_output: str, ground_truth: str, **_: Any) -> tuple[bool, bool, str]:
    """(correct, well formatted: a "Step 2:" and a box, the answer read) for one response."""
    model_output, ground_truth = str(model_output), str(ground_truth)
    _found, answer = match_answer(model_output)
    well_formatted = "Step 2:" in model_output and "\\box" in model_output
    if grade_answer(answer, ground_truth):
        return True, True, answer
    if "\\pi" in answer or "\\pi" in ground_truth:  # 3.14 is accepted for pi
        correct = any(math_equal(answer, ground_truth, pi=pi) for pi in (math.pi, 3.14))
    else:
        correct = math_equal(answer, ground_truth)
    return correct, well_formatted, answer
