"""`Geo3kTool`: the model submits its answer to a Geometry3K problem and is told its score.

verl's multi-turn Geometry3K example names `verl.tools.geo3k_tool.Geo3kTool`; this is the same
tool for the `tool_agent` loop (tool name `calc_geo3k_reward`, one `answer` argument, the same
rewards), so that example's tool config works once `class_name` names this class (the rename
table and `python -m codemods.migrate` write it). Per trajectory: `create` keeps the row's ground
truth (`tools_kwargs.calc_geo3k_reward.create_kwargs.ground_truth`); each call grades the
submitted answer as a whole (not a `\\boxed{}` inside it, and without the scorer's format credit:
`geo3k.compute_score(answer, truth, use_boxed=False, format_score=0.0)`, as verl calls it), answers
with the graded answer and its score, and gives a step reward of -0.05 when the score did not
improve on the previous call; `calc_reward` is the last call's score (0.0 before any call, or
without a ground truth).
"""

from __future__ import annotations

from core_v1.agent_loop.tools.answer_tool import NO_IMPROVEMENT_PENALTY, AnswerTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema
from core_v1.reward.scorers.geo3k import compute_score

__all__ = ["NO_IMPROVEMENT_PENALTY", "Geo3kTool"]


class Geo3kTool(AnswerTool):
    """Grades a submitted Geometry3K answer against the trajectory's ground truth."""

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "calc_geo3k_reward",
                    "description": "Submit the answer to the geometry problem and get its score (1.0 right, 0.0 wrong)",
                    "parameters": {
                        "type": "object",
                        "required": ["answer"],
                        "properties": {
                            "answer": {"type": "string", "description": "The answer alone (e.g. 12 or 3\\sqrt{2})"}
                        },
                    },
                },
            }
        )

    def score(self, answer: str, ground_truth: str) -> float:
        return compute_score(answer, ground_truth, use_boxed=False, format_score=0.0)
