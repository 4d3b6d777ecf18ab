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

from typing import Any, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from core_v1.reward.scorers.geo3k import compute_score

NO_IMPROVEMENT_PENALTY = -0.05


class Geo3kTool(BaseTool):
    """Grades a submitted Geometry3K answer against the trajectory's ground truth."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self._trajectories: dict[str, dict[str, Any]] = {}

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate({"type": "function", "function": {
            "name": "calc_geo3k_reward",
            "description": "Submit the answer to the geometry problem and get its score (1.0 right, 0.0 wrong)",
            "parameters": {"type": "object", "required": ["answer"], "properties": {
                "answer": {"type": "string", "description": "The answer alone (e.g. 12 or 3\\sqrt{2})"}}}}})

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
        state["response"] = str(parameters.get("answer", ""))
        reward = await self.calc_reward(instance_id)
        step_reward = 0.0 if reward > state["reward"] else NO_IMPROVEMENT_PENALTY
        state["reward"] = reward
        return ToolResponse(text=f"parsed answer={state['response']!r} score={reward}"), step_reward, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._trajectories[instance_id]
        if state["ground_truth"] is None or not state["response"]:
            return 0.0
        return compute_score(state["response"], str(state["ground_truth"]), use_boxed=False, format_score=0.0)

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._trajectories.pop(instance_id, None)
