"""The Search-R1 exact-match scorer, and the Math-Verify scorer (its package is optional for users; the
`math` extra and `dev` install it, and these tests run it)."""

from __future__ import annotations

import importlib
import io
import sys

import pytest

from core_v1.reward.scorers import default_compute_score, scorer_for
from core_v1.reward.scorers import search_r1_like_qa_em as qa

TRUTH = {"target": ["Barack Obama", "Obama"]}


@pytest.mark.parametrize(
    "raw, normal",
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple, a pear ", "apple pear"),
        ("Theory", "theory"),
    ],
)
def test_normalize_answer(raw, normal):
    assert qa.normalize_answer(raw) == normal


@pytest.mark.parametrize(
    "response, score",
    [
        ("<think>...</think><answer>obama.</answer>", 1.0),
        ("<answer>Paris</answer> no, <answer>The Barack Obama</answer>", 1.0),  # the last answer, articles dropped
        ("<answer>President Barack Obama</answer>", 0.0),  # not exact
        ("Obama", 0),  # no tags, no answer
        ("<answer>x</answer>" * 11 + "<answer>Obama</answer>", 0.25),  # tag spam: a quarter
    ],
)
def test_exact_match_score(response, score):
    assert qa.compute_score(response, TRUTH) == score


def test_format_score_and_substring_match():
    assert qa.compute_score("<answer>Bush</answer>", TRUTH, format_score=0.1) == 0.1
    assert qa.compute_score_subem("<answer>President Barack Obama</answer>", TRUTH) == 1.0
    assert qa.compute_score_subem("<answer>Bush</answer>", {"target": "Obama"}) == 0.0
    assert qa.em_check("obama", "Obama") == 1 and qa.subem_check("it was obama", ["bush", "obama"]) == 1
    assert qa.extract_solution("<answer>\n  Rome \n</answer>") == "Rome"
    assert qa.count_answer_tags("<answer>a</answer><answer>") == (2, 1)


@pytest.mark.parametrize("source", qa.SEARCH_R1_SOURCES)
def test_search_r1_sources_dispatch_here(source):
    assert scorer_for(source) is qa.compute_score
    assert default_compute_score(source, "<answer>Obama</answer>", TRUTH) == 1.0


def test_math_verify_without_its_package_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # as if it were not installed
    for name in [m for m in sys.modules if m.startswith("math_verify.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.delitem(sys.modules, "core_v1.reward.scorers.math_verify", raising=False)
    with pytest.raises(
        ModuleNotFoundError, match=r'needs the math-verify package.*pip install "rlbridge\[math\]"'
    ) as info:
        importlib.import_module("core_v1.reward.scorers.math_verify")
    assert info.value.name == "math_verify"


# The real package (pyproject's `math` extra, and `dev`): these fail, not skip, where it is missing.
@pytest.mark.parametrize(
    "response, truth, score",
    [
        (r"so \boxed{2/4}", r"\frac{1}{2}", 1.0),  # equal values, different strings
        ("The answer is 4", "3", 0.0),
        (r"Hence $x = \sqrt{8}$, i.e. \boxed{2\sqrt{2}}", r"2\sqrt{2}", 1.0),
        (r"\boxed{0.5}", r"\frac{1}{2}", 1.0),
        (r"\boxed{\{1, 2\}}", r"\{2, 1\}", 1.0),  # sets compare as sets
        (r"\boxed{x^2 + 2x + 1}", r"(x+1)^2", 1.0),  # symbolic equivalence
        (r"\boxed{", "3", 0.0),  # nothing parseable earns nothing, without raising
    ],
)
def test_math_verify_scores_with_the_real_package(response, truth, score):
    assert importlib.import_module("math_verify")  # installed, not mocked
    from core_v1.reward.scorers.math_verify import compute_score

    assert compute_score(response, truth) == score


def test_a_verl_reward_file_using_math_verify_scores_after_migrating(tmp_path):
    from codemods.migrate import main as migrate
    from core_v1.utils.loading import load_object

    path = tmp_path / "reward.py"
    path.write_text(
        "from verl.utils.reward_score import math_verify\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return math_verify.compute_score(solution_str, ground_truth)\n"
    )
    migrate([str(path)], out=io.StringIO(), err=io.StringIO())
    compute_score = load_object(f"{path}:compute_score", key="reward.custom_reward_function")
    assert compute_score("math", r"\boxed{6/4}", r"\frac{3}{2}") == 1.0
    assert compute_score("math", r"\boxed{7/4}", r"\frac{3}{2}") == 0.0
