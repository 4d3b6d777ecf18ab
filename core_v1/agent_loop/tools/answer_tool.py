"""`AnswerTool`: the base of tools the model calls with its answer to be told its score.

Per trajectory: `create` keeps the row's ground truth (a `ground_truth` argument, or
`tools_kwargs.<tool>.create_kwargs.ground_truth`); each call scores the submitted answer with the
subclass's `score`, answers with the answer and its score, and gives a step reward of -0.05 when
the score did not improve on the previous call (so that resubmitting the same answer costs
something); `calc_reward` is the last call's score (0.0 before any call or without a ground truth).
verl's answer-checking tools (gsm8k, geo3k) behave this way.
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

NO_IMPROVEMENT_PENALTY = -0.05


class AnswerTool(BaseTool):
    """Scores a submitted answer against the trajectory's ground truth; subclasses define `score`."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self._trajectories: dict[str, dict[str, Any]] = {}

    def score(self, answer: str, ground_truth: str) -> float:
        """The score of a submitted (non-empty) answer."""
        raise NotImplementedError

    async def create(self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None, **kwargs: Any) -> str:
        instance_id = await super().create(instance_id)
        if ground_truth is None:
            ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._trajectories[instance_id] = {"ground_truth": ground_truth, "response": "", "reward": 0.0}
        return instance_id

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
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
        return self.score(state["response"], str(state["ground_truth"]))

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._trajectories.pop(instance_id, None)
