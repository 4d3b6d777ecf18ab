"""PRIME's math grader (sympy-backed) and Geometry3K's boxed-answer score, on hand-checked cases."""

from __future__ import annotations

import pytest

from core_v1.reward.scorers import default_compute_score, geo3k, prime_math, scorer_for


@pytest.mark.parametrize(
    "response, found, answer",
    [
        (r"Step 2: so the result is $\boxed{\frac{1}{2}}$.", True, r"\frac{1}{2}"),
        ("The final answer is 42. I hope it is correct", True, "42"),  # the sentence after the answer goes
        ("42 is the answer.", True, "42"),
        ("Answer: x = 7", True, "7"),
        ("I could not solve it", False, "I could not solve it"),
        ("The answer is blue", False, "blue"),  # found, but an answer needs a digit
    ],
)
def test_match_answer(response, found, answer):
    assert prime_math.match_answer(response) == (found, answer)


@pytest.mark.parametrize(
    "given, truth",
    [
        (r"\dfrac{1}{2}", "1/2"),
        ("0.5", r"\frac{1}{2}"),
        ("1,000", "1000"),
        ("6.0", "6"),
        (r"\text{5 cm}", "5"),
        ("50%", "50"),
        (r"2\sqrt{3}", r"\sqrt{12}"),
        ("(x+1)^2", "x^2+2x+1"),
        ("(1, 2)", "(1,2)"),
        ("[0, 3)", r"[0,3)"),
        ("7 3/4", r"\frac{31}{4}"),
        ("2.5", "5/2"),
        ("2 million", r"2\cdot 10^6"),
    ],
)
def test_grade_answer_accepts_the_same_value_written_otherwise(given, truth):
    assert prime_math.grade_answer(given, truth)


@pytest.mark.parametrize(
    "given, truth",
    [
        ("2/4", "1/2"),  # unreduced fractions must match as written
        ("3 million", "3000000"),  # an integer ground truth wants an integer as written
        ("6.5", "6"),  # an integer answer needs an integer
        ("(0, 3)", "[0, 3)"),  # open vs closed interval
        ("(1, 2, 3)", "(1, 2)"),
        ("7", "8"),
        (None, "8"),
    ],
)
def test_grade_answer_refuses(given, truth):
    assert not prime_math.grade_answer(given, truth)


def test_compute_score_returns_verls_triple_and_tries_math_equal_second():
    assert prime_math.compute_score(r"Step 1: ... Step 2: \boxed{12}", "12") == (True, True, "12")
    assert prime_math.compute_score("the answer is 13", "12") == (False, False, "13")
    assert prime_math.compute_score("The answer is 2/4", r"\frac{1}{2}")[0]  # not graded equal, but math_equal
    assert prime_math.compute_score("Answer: 3.1416", r"\pi")[0]  # pi as a number
    assert prime_math.compute_score("Answer: 3.14", r"\pi")[0]  # 3.14 is accepted for pi
    assert prime_math.compute_score(r"Answer: 50\%", "0.5")[0]  # percentages
    assert not prime_math.compute_score("Answer: 3.2", r"\pi")[0]


def test_math_equal_rules():
    assert prime_math.math_equal("1.00001", "1")  # within 1e-4
    assert prime_math.math_equal("5%", "0.05")  # a percentage
    assert prime_math.math_equal("[1, 2]", "[1,2.00001]")  # element by element
    assert prime_math.math_equal("1, 2", "1,2.00001")
    assert not prime_math.math_equal("", "1")


@pytest.mark.parametrize("expr", ["__import__('os').system('true')", "2^10000", "x^{2}", "abc+1"])
def test_sympy_never_sees_unsafe_or_explosive_input(expr):
    assert not prime_math.may_parse(expr)
    assert not prime_math.equal_under_sympy(expr, "1")


@pytest.mark.parametrize(
    "latex, sympy_text",
    [
        (r"\frac{1}{2}", "1/2"),
        (r"\dfrac{\sqrt{3}+1}{2}", "(sqrt(3)+1)/2"),
        (r"3\frac{1}{2}", "3 1/2"),
        (r"2\sqrt3", "2sqrt(3)"),
        (r"\left(1, \infty\right)", "(1, oo)"),
        (r"2 \cdot \pi", "2 * pi"),
    ],
)
def test_latex_to_sympy(latex, sympy_text):
    assert prime_math.latex_to_sympy(latex) == sympy_text


@pytest.mark.parametrize("source", prime_math.NUMINA_SOURCES)
def test_numina_sources_dispatch_to_prime_math_and_get_a_float(source):
    assert scorer_for(source) is prime_math.compute_score
    assert default_compute_score(source, "the answer is 5", "5") == 1.0
    assert default_compute_score(source, "the answer is 6", "5") == 0.0


@pytest.mark.parametrize(
    "response, score",
    [
        (r"<think>angles sum</think> So $\boxed{30}$.", 1.0),  # right and well formed
        (r"So $\boxed{30}$.", 0.9),  # right, no thinking
        (r"<think>hmm</think> \boxed{31}", 0.1),  # wrong, well formed
        ("30", 0.0),  # no box
    ],
)
def test_geo3k_compute_score(response, score):
    assert geo3k.compute_score(response, "30") == pytest.approx(score)
    assert default_compute_score("hiyouga/geometry3k", response, "30") == pytest.approx(score)


def test_geo3k_parts():
    assert geo3k.extract_boxed_content(r"\boxed{2\sqrt{3}}") == r"2\sqrt{3}"
    assert geo3k.extract_boxed_content("none here") == "None"
    assert geo3k.acc_reward(r"2\sqrt{3}", r"\sqrt{12}", use_boxed=False) == 1.0
    assert geo3k.compute_score(r"\boxed{30}", "30", format_score=0.0) == 1.0


# Scores verl's geo3k scorer (mathruler 0.1.0's extract_boxed_content and grade_answer) gives these.
@pytest.mark.parametrize(
    "response, truth, score",
    [
        (r"<think>a</think>\boxed{\frac{1}{2}}", "0.5", 1.0),
        (r"\boxed{2 \sqrt 3}", r"2\sqrt{3}", 0.9),
        (r"\boxed{7} and \boxed{8}", "8", 0.9),  # the last box
        (r"\boxed{7} and \boxed{8}", "7", 0.0),
        (r"<think>r</think> \boxed{45^\circ}", "45", 1.0),
        (r"\boxed{5.33}", r"\frac{16}{3}", 0.0),
        (r"\boxed{\dfrac{3}{4}}", r"\frac{3}{4}", 0.9),
        (r"\boxed{10\text{ cm}}", "10", 0.9),
        (r"\boxed{1,000}", "1000", 0.9),
        (r"<think>" "\n" r"</think>" "\n" r"\boxed{{7}}", "7", 1.0),
        (r"\fbox{3}", "3", 0.0),  # only \boxed{} counts, unlike the math scorers
        (r"\boxed 3", "3", 0.0),
    ],
)
def test_geo3k_scores_as_verls_mathruler_grader(response, truth, score):
    assert geo3k.compute_score(response, truth) == pytest.approx(score)
