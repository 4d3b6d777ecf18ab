"""Agent-loop plug-ins for the V0 agent-loop tests, in a file so that V1's agent-loop workers load
them too (`trainer.v1.plugins=[<this file>]`) and a V0 run and a V1 run use the same ones.

- `every_turn_submits_for_v0_test`: a tool-call format that reads every model turn as a call to
  `calc_gsm8k_reward(answer=7)` (the tiny model cannot write a hermes tool call), so every session
  with budget left after its first turn gets a tool round through the real loop and tool.
- `flaky_self_scoring_for_v0_test`: `tool_agent`, except that session 0 of every group raises once
  its conversation is over (a loop that fails some samples) and odd sessions score themselves
  (`reward_score`, as a loop that rewards its own trajectory does); it adds a metric of its own.
"""

from __future__ import annotations

import json

from core_v1.agent_loop import register
from core_v1.agent_loop.tool_agent import ToolAgentLoop
from core_v1.agent_loop.tool_parser import FunctionCall, ToolParser


@ToolParser.register("every_turn_submits_for_v0_test")
class EveryTurnSubmits(ToolParser):
    """Each model turn is one call `calc_gsm8k_reward(answer=7)`."""

    async def extract_tool_calls(self, responses_ids):
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        return text, [FunctionCall(name="calc_gsm8k_reward", arguments=json.dumps({"answer": "7"}))]


class SessionZeroFailed(RuntimeError):
    """What the flaky loop raises for session 0."""


@register("flaky_self_scoring_for_v0_test")
class FlakySelfScoring(ToolAgentLoop):
    async def run(self, sampling_params, **kwargs):
        output = await super().run(sampling_params, **kwargs)
        session = int(kwargs["session_id"])
        if session == 0:
            raise SessionZeroFailed("session 0 fails after its conversation")
        if session % 2 == 1:  # a self-score the dense reward never gives: the trace of who scored
            output.reward_score = 10.0 + len(output.response_ids) / 100
        output.metrics["response_tokens"] = float(len(output.response_ids))
        return output
