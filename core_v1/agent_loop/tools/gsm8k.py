"""`Gsm8kTool`: the model submits its final answer to a GSM8K question and is told its score.

verl's multi-turn GSM8K examples name `verl.tools.gsm8k_tool.Gsm8kTool`; this is the same tool
for the `tool_agent` loop (same tool name, argument and rewards), so their tool config YAMLs work
once `class_name` names this class. Per trajectory: `create` keeps the row's ground truth
(`tools_kwargs.calc_gsm8k_reward.create_kwargs.ground_truth`); each call scores the submitted
answer with the GSM8K scorer (last number, `flexible`), answers with the parsed answer and its
score, and gives a step reward of -0.05 when the score did not improve on the previous call (so
that resubmitting the same answer costs something); `calc_reward` is the last score.
"""

from __future__ import annotations

from core_v1.agent_loop.tools.answer_tool import NO_IMPROVEMENT_PENALTY, AnswerTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema
from core_v1.reward.scorers.gsm8k import compute_score

__all__ = ["NO_IMPROVEMENT_PENALTY", "Gsm8kTool"]


class Gsm8kTool(AnswerTool):
    """Scores a submitted GSM8K answer against the trajectory's ground truth."""

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "calc_gsm8k_reward",
                    "description": "Submit the final answer to the question and get its score",
                    "parameters": {
                        "type": "object",
                        "required": ["answer"],
                        "properties": {"answer": {"type": "string", "description": "The final answer (a number)"}},
                    },
                },
            }
        )

    def score(self, answer: str, ground_truth: str) -> float:
        response = answer if answer.startswith("#### ") else f"#### {answer}"
        return compute_score(response, ground_truth, method="flexible")
