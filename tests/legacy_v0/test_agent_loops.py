"""The V0 trainer runs V1's agent loops: a `tool_agent` run trains, tool tokens out of the loss.

The tiny model cannot write a hermes tool call, so the run names a tool-call format registered
here that reads every model turn as a call to rlbridge's `Gsm8kTool` (from a tool YAML, as verl's
multi-turn examples configure it): every session that has budget left after its first turn gets a
tool round, and the loop, the tool and the rollout are the real ones.
"""

from __future__ import annotations

import json
import uuid

import pytest

from core_v1.agent_loop import AgentLoopBase, AgentLoopOutput, register
from core_v1.agent_loop.tool_parser import FunctionCall, ToolParser
from core_v1.utils.registry import UnknownNameError
from legacy_v0.main_ppo import Role, TaskRunner, run_ppo
from legacy_v0.workers import ActorRolloutRefWorker, MultiOutputSessionError

TOOL_YAML = "tools:\n  - class_name: core_v1.agent_loop.tools.gsm8k.Gsm8kTool\n    config: {type: native}\n"


@ToolParser.register("every_turn_submits_for_v0_test")
class EveryTurnSubmits(ToolParser):
    """Each model turn is one call `calc_gsm8k_reward(answer=7)`."""

    async def extract_tool_calls(self, responses_ids):
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        return text, [FunctionCall(name="calc_gsm8k_reward", arguments=json.dumps({"answer": "7"}))]


@register("two_outputs_for_v0_test")
class TwoOutputs(AgentLoopBase):
    """A multi-output loop: the same generation twice."""

    async def run(self, sampling_params, **kwargs):
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        output = await self.server_manager.generate(request_id=uuid.uuid4().hex, prompt_ids=prompt_ids,
                                                    sampling_params=sampling_params)
        one = AgentLoopOutput(prompt_ids=prompt_ids, response_ids=list(output.token_ids),
                              response_mask=[1] * len(output.token_ids))
        return [one, one]


class RecordingWorker(ActorRolloutRefWorker):
    batches: list = []

    def generate_sequences(self, prompts):
        output = super().generate_sequences(prompts)
        RecordingWorker.batches.append(output)
        return output


class RecordingRunner(TaskRunner):
    def add_actor_rollout_worker(self, config):
        self.role_worker_mapping[Role.ActorRollout] = RecordingWorker
        return RecordingWorker


@pytest.mark.slow
def test_a_tool_agent_run_trains_on_v0_with_tool_tokens_masked(small_config, tmp_path):
    tools = tmp_path / "tools.yaml"
    tools.write_text(TOOL_YAML)
    config = small_config(2, "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
                          f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
                          "actor_rollout_ref.rollout.multi_turn.format=every_turn_submits_for_v0_test",
                          "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2", "data.max_response_length=48",
                          out=tmp_path / "run")
    RecordingWorker.batches = []
    history = run_ppo(config, RecordingRunner)
    assert len(history) == 2 and all(m["actor/pg_loss"] == m["actor/pg_loss"] for m in history)  # not NaN
    [first, *_] = RecordingWorker.batches
    turns = list(first.non_tensor_batch["num_turns"])
    tool_rows = [row for row, n in enumerate(turns) if n > 2]
    assert tool_rows and set(turns) <= {2, 4}  # one tool round: user, model, tool, model
    batch = first.batch
    for row in range(len(first)):
        valid = batch["attention_mask"][row, -batch["responses"].shape[1]:].bool()
        mask = batch["response_mask"][row][valid]
        if row in tool_rows:  # the tool's tokens are in the response, masked out of the loss, log-prob 0
            assert 0 < int(mask.sum()) < len(mask)
            assert (batch["rollout_log_probs"][row][valid][mask == 0] == 0).all()
            assert (batch["rollout_log_probs"][row][valid][mask == 1] != 0).any()
        else:
            assert bool(mask.all())


@pytest.mark.slow
def test_a_multi_output_agent_loop_is_refused_by_the_v0_rollout(small_config, tmp_path):
    config = small_config(1, "actor_rollout_ref.rollout.agent.default_agent_loop=two_outputs_for_v0_test",
                          out=tmp_path)
    with pytest.raises(MultiOutputSessionError, match="returned 2 outputs for one sample.*run on V1 only"):
        run_ppo(config)


def test_an_agent_loop_nobody_registered_is_refused_at_start_up(small_config, tmp_path):
    config = small_config(1, "actor_rollout_ref.rollout.agent.default_agent_loop=no_such_agent", out=tmp_path)
    with pytest.raises(UnknownNameError, match="unknown agent loop 'no_such_agent'"):
        run_ppo(config)
