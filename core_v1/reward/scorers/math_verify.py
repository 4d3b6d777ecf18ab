"""Math answers checked by Hugging Face's Math-Verify (symbolic equivalence, not string equality).

The ground truth is read as LaTeX inside `\\boxed{}`; the response's answer is read as a plain
expression or as LaTeX, and Math-Verify decides whether they are equal (so `2/4` is `\\frac{1}{2}`).
`compute_score(model_output, ground_truth, timeout_score=0)` returns 1.0 or 0.0; a check that
times out scores `timeout_score`, one that fails otherwise scores 0.0. The signature is verl's
(`verl.utils.reward_score.math_verify`); as in verl no data_source is sent here by default: name
it in a custom reward function.

It needs the `math-verify` package, which rlbridge's `math` extra installs (`pip install
"rlbridge[math]"`, or `pip install "math-verify[antlr4_9_3]"`: that extra keeps the antlr4 runtime
that hydra-core pins). Without it, importing this module raises ModuleNotFoundError naming the
package.
"""

from __future__ import annotations

from typing import Any

try:
    from math_verify.errors import TimeoutException
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
except ImportError as error:
    raise ModuleNotFoundError(
        "core_v1.reward.scorers.math_verify needs the math-verify package, which is not installed here: "
        'pip install "rlbridge[math]" (or "math-verify[antlr4_9_3]")',
        name="math_verify",
    ) from error


def compute_score(model_output: str, ground_truth: str, timeout_score: float = 0, **_: Any) -> float:
    """1.0 when Math-Verify finds the response's answer equal to `ground_truth`, else 0.0."""
    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    try:
        score, _extracted = verify([f"\\boxed{{{ground_truth}}}"], [model_output])
    except TimeoutException:
        return float(timeout_score)
    except Exception:  # Math-Verify raises on answers it cannot parse: they earn nothing
        return 0.0
    return float(score)
