"""Rule-based scorers, one small module per task, registered by `data_source`.

Each scorer is `compute_score(solution_str, ground_truth, **kwargs) -> float | dict` (a dict
carries `score` plus extra per-sample metrics). `default_compute_score` dispatches on a row's
`data_source`, the way verl's `default_compute_score` does, to the same scorers for the same
sources; a scorer module keeps the name and the public functions of verl's
`verl.utils.reward_score.<module>`, so the migration tool rewrites a reward file's imports of them:

| module | data_source values |
| --- | --- |
| `gsm8k` | openai/gsm8k, gsm8k |
| `math` (verl 0.6+: `math_reward`) | lighteval/MATH, DigitalLearningGmbH/MATH-lighteval, HuggingFaceH4/MATH-500 |
| `math_dapo` | math_dapo, math, math_dapo_reasoning, and every source starting with `aime` |
| `prime_math` | numina_aops_forum, numina_synthetic_math, numina_amc_aime, numina_synthetic_amc, numina_cn_k12, numina_olympiads |
| `geo3k` | hiyouga/geometry3k |
| `search_r1_like_qa_em` | searchR1_nq, _triviaqa, _popqa, _hotpotqa, _2wikimultihopqa, _musique, _bamboogle |
| `math_verify` | none (verl sends none either); needs the optional `math-verify` package |
| `arithmetic` | arithmetic, rlbridge/arithmetic (rlbridge's quickstart task) |
| `code` (verl: inline) | codecontests, apps, codeforces, taco: `sandbox_fusion` with `reward.sandbox_fusion.url`, else `prime_code` |

`sandbox_fusion` runs the model's program in a Sandbox Fusion service, `prime_code` in a local
child process without network and with memory and time limits; see each module.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from core_v1.reward.scorers.registry import SCORERS, register_scorer  # noqa: F401  (register_scorer: for plug-ins)


def default_compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: Any = None,
    sandbox_fusion_url: Optional[str] = None,
    concurrent_semaphore: Any = None,
    memory_limit_mb: Optional[int] = None,
    **kwargs: Any,
) -> float | dict:
    """Score one response with the scorer registered for its `data_source`.

    The Sandbox Fusion settings (verl's parameters; the reward loop passes
    `reward.sandbox_fusion.*` here, `core_v1.reward.reward_model.rule_function_for`) reach only
    the code sources' scorer. A dict result is returned as it is; a number, a bool or a tuple
    (whose first item is the verdict, as `prime_math` and the code scorers return) becomes a float,
    as verl's dispatcher returns them.
    """
    scorer = scorer_for(data_source)
    if scorer is code.compute_score:
        kwargs.update(
            sandbox_fusion_url=sandbox_fusion_url,
            concurrent_semaphore=concurrent_semaphore,
            memory_limit_mb=memory_limit_mb,
        )
    result = scorer(solution_str, ground_truth, **kwargs)
    if isinstance(result, dict):
        return result
    return float(result[0] if isinstance(result, (tuple, list)) else result)


def scorer_for(data_source: str) -> Callable[..., Any]:
    """The scorer registered for `data_source`; an unregistered `aime*` source (aime24, aime_2025)
    gets the one registered for `aime`, as verl sends every such source to math_dapo."""
    if data_source not in SCORERS and isinstance(data_source, str) and data_source.startswith("aime"):
        return SCORERS.get("aime")
    return SCORERS.get(data_source)


# Built-in scorers register themselves on import.
from core_v1.reward.scorers import (  # noqa: E402,F401
    arithmetic,
    code,
    geo3k,
    gsm8k,
    math,
    math_dapo,
    prime_math,
    search_r1_like_qa_em,
)
