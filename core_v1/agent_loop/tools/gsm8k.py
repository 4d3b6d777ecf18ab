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

from typing import Any, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from core_v1.reward.scorers.gsm8k import compute_score

NO_IMPROVEMENT_PENALTY = -0.05


class Gsm8kTool(BaseTool):
    """Scores a submitted GSM8K answer against the trajectory's ground truth."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self._trajectories: dict[str, dict[str, Any]] = {}

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
            "name": "calc_gsm8k_reward",
            "description": "Submit the final answer to the question and get its score",
            "parameters": {"type": "object", "required": ["answer"], "properties": {
                "answer": {"type": "string", "description": "The final answer (a number)"}}}}})

    async def create(self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None,
                     **kwargs: Any) -> str:
        instance_id = await super().create(instance_id)
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._trajectories[instance_id] = {"ground_truth": ground_truth, "response": "", "reward": 0.0}
        return instance_id

    async def execute(self, instance_id: str, parameters: dict[str, Any],
                      **kwargs: Any) -> tuple[ToolResponse, float, dict]:
        state = self._trajectories[instance_id]
        answer = str(parameters.get("answer", ""))
        state["response"] = answer if answer.startswith("#### ") else f"#### {answer}"
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NO_IMPROVEMENT_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"parsed answer={answer!r} score={reward}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._trajectories[instance_id]
        if state["ground_truth"] is None:
            return 0.0
        return compute_score(state["response"], str(state["ground_truth"]), method="flexible")

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._trajectories.pop(instance_id, None)
