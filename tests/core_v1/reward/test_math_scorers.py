"""The MATH and DAPO scorers against hand-checked answers, and their data_source dispatch."""

from __future__ import annotations

import pytest

from core_v1.reward.scorers import default_compute_score, math as hendrycks, math_dapo, scorer_for

# --- math: the last \boxed{}, string normalisation -----------------------------------------------


@pytest.mark.parametrize(
    "text, boxed",
    [
        (r"so \boxed{\frac{1}{\sqrt{2}}} is it", r"\boxed{\frac{1}{\sqrt{2}}}"),  # nested braces kept whole
        (r"first \boxed{1}, then \boxed{2}.", r"\boxed{2}"),  # the last one
        (r"$\boxed 7$ done", r"\boxed 7"),  # the space form runs to the dollar
        (r"\boxed 5$ but later \boxed{6}", r"\boxed{6}"),  # the later box, whatever its form
        (r"\fbox{3}", r"\fbox{3}"),
        (r"\boxed{unclosed", None),
        ("no box at all", None),
    ],
)
def test_math_last_boxed_only_string(text, boxed):
    assert hendrycks.last_boxed_only_string(text) == boxed


@pytest.mark.parametrize(
    "boxed, inner",
    [
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed 7", "7"),
        (r"\fbox{x+1}", "x+1"),
    ],
)
def test_math_remove_boxed(boxed, inner):
    assert hendrycks.remove_boxed(boxed) == inner


@pytest.mark.parametrize("text", [None, "7", r"\boxed{7"])
def test_math_remove_boxed_refuses_text_that_is_not_boxed(text):
    with pytest.raises(ValueError, match="not a boxed answer"):
        hendrycks.remove_boxed(text)


@pytest.mark.parametrize(
    "raw, normal",
    [
        (r"\dfrac{3}{4}", r"\frac{3}{4}"),
        (r"\tfrac12", r"\frac{1}{2}"),
        (r"\frac1{72}", r"\frac{1}{72}"),
        ("3/4", r"\frac{3}{4}"),
        ("0.5", r"\frac{1}{2}"),
        (".5", r"\frac{1}{2}"),
        (r"10\text{ inches}", "10"),
        (r"50\%", "50"),
        (r"45^\circ", "45"),
        (r"\$3", "3"),
        (r"\left( 1, 2 \right)", "(1,2)"),
        ("k = 7", "7"),
        (r"\sqrt3", r"\sqrt{3}"),
        ("x+y=3", "x+y=3"),
    ],
)
def test_math_strip_string(raw, normal):
    assert hendrycks.strip_string(raw) == normal


def test_math_is_equiv():
    assert hendrycks.is_equiv(r"\dfrac{1}{2}", "1/2")
    assert hendrycks.is_equiv(None, None) and not hendrycks.is_equiv("1", None)
    assert not hendrycks.is_equiv("2/4", "1/2")  # strings, not algebra


@pytest.mark.parametrize(
    "response, truth, score",
    [
        (r"Adding, we get $\boxed{\dfrac{3}{4}}$.", r"\frac34", 1.0),
        (r"The length is \boxed{12\text{ cm}}.", "12", 1.0),
        (r"\boxed{0.5}", "1/2", 1.0),
        (r"\boxed{13}", "12", 0.0),
        ("The answer is 12.", "12", 0.0),  # no box, no credit
        ("\\boxed\n{12}", "12", 0.0),  # a box command without its braces
    ],
)
def test_math_compute_score(response, truth, score):
    assert hendrycks.compute_score(response, truth) == score


# --- math_dapo: `Answer:` lines (Minerva), or a strict box ---------------------------------------


@pytest.mark.parametrize(
    "raw, normal",
    [
        (r"x = \frac12", r"\frac{1}{2}"),
        ("1,000 dollars", "1000"),
        (r"\text{5 inches}", "5"),
        (r"$\sqrt2$", r"\sqrt{2}"),
        (r"\boxed{42}", "42"),
        (r"90^\circ", "90"),
        ("an apple", "apple"),
    ],
)
def test_dapo_normalize_final_answer(raw, normal):
    assert math_dapo.normalize_final_answer(raw) == normal


@pytest.mark.parametrize(
    "response, truth, expected",
    [
        ("Thinking...\nAnswer: $\\frac{1}{2}$", r"\frac12", {"score": 1.0, "acc": True, "pred": r"\frac{1}{2}"}),
        ("answer : 1,000 dollars", "1000", {"score": 1.0, "acc": True, "pred": "1000"}),
        ("Answer: 3\nwait, no.\nAnswer: 4", "4", {"score": 1.0, "acc": True, "pred": "4"}),  # the last line
        ("Answer: 7", "8", {"score": -1.0, "acc": False, "pred": "7"}),
        (r"so \boxed{8}", "8", {"score": -1.0, "acc": False, "pred": "[INVALID]"}),  # no Answer: line
    ],
)
def test_dapo_compute_score_reads_the_last_answer_line(response, truth, expected):
    assert math_dapo.compute_score(response, truth) == expected


def test_dapo_reads_only_the_last_300_characters():
    assert math_dapo.compute_score("Answer: 5\n" + "x" * 300, "5")["pred"] == "[INVALID]"


def test_dapo_strict_box_mode_compares_the_last_box_exactly():
    assert math_dapo.compute_score(r"so \boxed{42}", "42", strict_box_verify=True) == {
        "score": 1.0,
        "acc": True,
        "pred": "42",
    }
    assert math_dapo.compute_score(r"so \boxed{42.0}", "42", strict_box_verify=True)["acc"] is False
    assert math_dapo.compute_score(r"\boxed{42}" + " " * 120, "42", strict_box_verify=True)["pred"] is None
    tail = r"pause \boxed{9} end"
    assert math_dapo.compute_score(tail, "9", strict_box_verify=True, pause_tokens_index=[0, 1, 2, 10])["acc"]
    with pytest.raises(ValueError, match="4 positions"):
        math_dapo.compute_score(tail, "9", strict_box_verify=True, pause_tokens_index=[10])


def test_dapo_helpers_people_import():
    assert math_dapo.last_boxed_only_string(r"\boxed{a} \boxed{\frac{b}{c}}") == r"\boxed{\frac{b}{c}}"
    assert math_dapo.last_boxed_only_string(r"\boxed 5") is None  # only the braced form
    assert math_dapo.remove_boxed(r"\boxed{\frac{b}{c}}") == r"\frac{b}{c}"
    with pytest.raises(ValueError, match="box error"):
        math_dapo.remove_boxed(r"\fbox{1}")
    assert math_dapo.is_correct_minerva("Answer: 6", r"so \boxed{6}", gt_need_extract=True) == (True, "6")


# --- dispatch by data_source ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, scorer",
    [
        ("lighteval/MATH", hendrycks.compute_score),
        ("DigitalLearningGmbH/MATH-lighteval", hendrycks.compute_score),
        ("HuggingFaceH4/MATH-500", hendrycks.compute_score),
        ("math_dapo", math_dapo.compute_score),
        ("math", math_dapo.compute_score),
        ("math_dapo_reasoning", math_dapo.compute_score),
        ("aime24", math_dapo.compute_score),
        ("aime_2025", math_dapo.compute_score),
    ],
)
def test_verl_data_sources_reach_the_same_scorer(source, scorer):
    assert scorer_for(source) is scorer


def test_default_compute_score_returns_floats_and_dicts_as_verl_does():
    assert default_compute_score("lighteval/MATH", r"\boxed{2}", "2") == 1.0
    assert default_compute_score("aime2024", "Answer: 17", "17") == {"score": 1.0, "acc": True, "pred": "17"}
    with pytest.raises(KeyError, match="'no_such_source' .*Known: .*math_dapo"):
        default_compute_score("no_such_source", "", "")
