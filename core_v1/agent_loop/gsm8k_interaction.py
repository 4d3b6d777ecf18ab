"""`Gsm8kInteraction`: a user who checks the model's GSM8K answer and asks again until it is right.

verl's multi-turn GSM8K examples name `verl.interactions.gsm8k_interaction.Gsm8kInteraction`;
this keeps its behaviour for the `tool_agent` loop: the row's `interaction_kwargs` carry
`ground_truth`; after each model turn the last assistant message is scored strictly (the answer
must follow `#### `); a right answer ends the conversation with score 1, a wrong one asks the
model to think again (score 0) and the conversation goes on, up to the loop's turn limits.
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.agent_loop.interaction import BaseInteraction
from core_v1.reward.scorers.gsm8k import compute_score

RIGHT = "Your answer is correct."
WRONG = "Your answer is not correct. Check your reasoning and answer again, ending with '#### <number>'."


class Gsm8kInteraction(BaseInteraction):
    """Scores each model turn against the row's ground truth; stops at the first right answer."""

    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self._ground_truth: dict[str, Optional[str]] = {}

    async def start_interaction(
        self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None, **kwargs: Any
    ) -> str:
        instance_id = await super().start_interaction(instance_id)
        self._ground_truth[instance_id] = ground_truth
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        answer = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "assistant"), "")
        ground_truth = self._ground_truth.get(instance_id)
        score = 0.0 if ground_truth is None else compute_score(answer, str(ground_truth), method="strict")
        right = score == 1.0
        return right, RIGHT if right else WRONG, score, {}

    async def finalize_interaction(self, instance_id: Optional[str] = None, **kwargs: Any) -> None:
        self._ground_truth.pop(instance_id, None)
