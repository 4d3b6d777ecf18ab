"""The injected faults of benchmarks/soak.py that live inside the run: a plug-in
(`trainer.v1.plugins`, imported in the driver and in every agent-loop worker) and the run's
reward function (`reward.custom_reward_function.path`).

- `compute_score`: the quickstart's arithmetic score, except that it raises on REWARD_RAISE of the
  samples and sleeps REWARD_HANG_S (past the soak's `reward.timeout_s`) on REWARD_HANG of them.
- agent loop `soak_tool_agent` with format `soak_check_every_answer`: the tiny model cannot write
  tool-call markup, nor does an untrained one end its turns, so each model turn is capped at
  TURN_TOKENS tokens and read as one call of the sandboxed `check_answer` tool
  (benchmarks/soak_tools.py) with the turn's text; one call in TOOL_HANG asks the tool to hang past
  its timeout. Everything else is the built-in `tool_agent`.
"""

from __future__ import annotations

import json
import random
import time

from core_v1.agent_loop import register
from core_v1.agent_loop.tool_agent import ToolAgentLoop
from core_v1.agent_loop.tool_parser import FunctionCall, ToolParser
from core_v1.reward.scorers.arithmetic import compute_score as arithmetic_score

REWARD_RAISE = 0.05
REWARD_HANG = 0.05
REWARD_HANG_S = 1.0
TOOL_HANG = 0.03
TURN_TOKENS = 3

_draws = random.Random()  # faults are random on purpose: the soak is not a reproducibility test


class InjectedRewardFailure(RuntimeError):
    """The soak's reward function failing on purpose."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    draw = _draws.random()
    if draw < REWARD_RAISE:
        raise InjectedRewardFailure("soak: injected reward failure")
    if draw < REWARD_RAISE + REWARD_HANG:
        time.sleep(REWARD_HANG_S)  # the reward loop gives up at reward.timeout_s; the thread ends here
    return arithmetic_score(solution_str, ground_truth)


@ToolParser.register("soak_check_every_answer")
class CheckEveryAnswer(ToolParser):
    """Every model turn is a call of `check_answer` with its text (see the module docstring)."""

    async def extract_tool_calls(self, responses_ids: list[int]) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(list(responses_ids), skip_special_tokens=True)
        arguments = {"answer": text, "hang": _draws.random() < TOOL_HANG}
        return text, [FunctionCall(name="check_answer", arguments=json.dumps(arguments))]


@register("soak_tool_agent")
class ShortTurnToolAgent(ToolAgentLoop):
    """`tool_agent` whose model turns are at most TURN_TOKENS tokens long (see the module docstring)."""

    async def run(self, sampling_params: dict, **kwargs):
        return await super().run({**sampling_params, "max_tokens": TURN_TOKENS}, **kwargs)
