"""The V0 trainer runs V1's agent loops: a `tool_agent` run trains, tool tokens out of the loss; a
loop that raises fails its sample, not the step; a loop's own score and metrics are used as on V1.

The tiny model cannot write a hermes tool call, so the runs name a tool-call format (in
agent_loop_plugins.py) that reads every model turn as a call to rlbridge's `Gsm8kTool` (from a tool
YAML, as verl's multi-turn examples configure it): every session that has budget left after its
first turn gets a tool round, and the loop, the tool and the rollout are the real ones.
(V0/V1 parity of these runs: test_agent_loop_parity.py.)
"""

from __future__ import annotations

import uuid

import pytest

from core_v1.agent_loop import AgentLoopBase, AgentLoopOutput, register
from core_v1.trainer.replay_buffer import AllSamplesFailedError
from core_v1.utils.registry import UnknownNameError
from legacy_v0.main_ppo import Role, TaskRunner, run_ppo
from legacy_v0.workers import ActorRolloutRefWorker, MultiOutputSessionError
from tests.legacy_v0.conftest import tool_agent_overrides


@register("two_outputs_for_v0_test")
class TwoOutputs(AgentLoopBase):
    """A multi-output loop: the same generation twice."""

    async def run(self, sampling_params, **kwargs):
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        output = await self.server_manager.generate(
            request_id=uuid.uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params
        )
        one = AgentLoopOutput(
            prompt_ids=prompt_ids, response_ids=list(output.token_ids), response_mask=[1] * len(output.token_ids)
        )
        return [one, one]


@register("always_fails_for_v0_test")
class AlwaysFails(AgentLoopBase):
    async def run(self, sampling_params, **kwargs):
        raise ConnectionError(f"no environment for session {kwargs['session_id']}")


class RecordingWorker(ActorRolloutRefWorker):
    batches: list = []  # what generate_sequences returned
    trained: list = []  # what update_actor trained on

    def generate_sequences(self, prompts):
        output = super().generate_sequences(prompts)
        RecordingWorker.batches.append(output)
        return output

    def update_actor(self, data):
        RecordingWorker.trained.append(data)
        return super().update_actor(data)


class RecordingRunner(TaskRunner):
    def add_actor_rollout_worker(self, config):
        self.role_worker_mapping[Role.ActorRollout] = RecordingWorker
        return RecordingWorker


@pytest.mark.slow
def test_a_tool_agent_run_trains_on_v0_with_tool_tokens_masked(small_config, tmp_path):
    config = small_config(2, *tool_agent_overrides(tmp_path), out=tmp_path / "run")
    RecordingWorker.batches = []
    history = run_ppo(config, RecordingRunner)
    assert len(history) == 2 and all(m["actor/pg_loss"] == m["actor/pg_loss"] for m in history)  # not NaN
    [first, *_] = RecordingWorker.batches
    turns = list(first.non_tensor_batch["num_turns"])
    tool_rows = [row for row, n in enumerate(turns) if n > 2]
    assert tool_rows and set(turns) <= {2, 4}  # one tool round: user, model, tool, model
    batch = first.batch
    for row in range(len(first)):
        valid = batch["attention_mask"][row, -batch["responses"].shape[1] :].bool()
        mask = batch["response_mask"][row][valid]
        if row in tool_rows:  # the tool's tokens are in the response, masked out of the loss, log-prob 0
            assert 0 < int(mask.sum()) < len(mask)
            assert (batch["rollout_log_probs"][row][valid][mask == 0] == 0).all()
            assert (batch["rollout_log_probs"][row][valid][mask == 1] != 0).any()
        else:
            assert bool(mask.all())


@pytest.mark.slow
def test_a_loop_that_raises_fails_its_sample_and_a_loop_score_stands(small_config, tmp_path):
    # flaky_self_scoring_for_v0_test: session 0 of each of the 4 groups raises, odd sessions score themselves.
    config = small_config(2, *tool_agent_overrides(tmp_path, "flaky_self_scoring_for_v0_test"), out=tmp_path / "run")
    RecordingWorker.batches, RecordingWorker.trained = [], []
    history = run_ppo(config, RecordingRunner)
    assert len(history) == 2
    for metrics in history:  # V1's counts and metrics: the failed samples, the loop's own metrics
        assert metrics["rollout/failed_samples"] == 4
        assert metrics["rollout/agent_loop/flaky_self_scoring_for_v0_test/share"] == 1.0
        assert metrics["agent/response_tokens/mean"] > 0 and metrics["agent/num_tool_calls/mean"] > 0
        assert metrics["actor/pg_loss"] == metrics["actor/pg_loss"]  # not NaN
    generated = RecordingWorker.batches[0]
    errors = list(generated.non_tensor_batch["rollout_error"])
    assert [error is not None for error in errors] == [row % 4 == 0 for row in range(16)]  # sessions 0..3 a group
    assert "SessionZeroFailed: session 0 fails after its conversation" in errors[0]
    trained = RecordingWorker.trained[0]
    assert len(trained) == 12 and 0 not in set(trained.non_tensor_batch["session_id"])  # the failed rows left
    response_width = trained.batch["responses"].shape[1]
    lengths = trained.batch["attention_mask"][:, -response_width:].sum(-1).tolist()
    scores = trained.batch["token_level_scores"].sum(-1).tolist()
    for session, length, score in zip(trained.non_tensor_batch["session_id"], lengths, scores):
        if session % 2 == 1:  # the loop's score, not the reward function's (at most 1)
            assert score == pytest.approx(10.0 + length / 100)
        else:
            assert 0 <= score <= 1


@pytest.mark.slow
def test_a_step_whose_every_session_failed_stops_the_v0_run_with_the_first_error(small_config, tmp_path):
    config = small_config(
        1, "actor_rollout_ref.rollout.agent.default_agent_loop=always_fails_for_v0_test", out=tmp_path
    )
    first_error = r"ConnectionError: no environment for session 0 \(.*test_agent_loops"
    with pytest.raises(AllSamplesFailedError, match=r"all 16 samples of step 1 failed .*" + first_error):
        run_ppo(config)


@pytest.mark.slow
def test_a_multi_output_agent_loop_is_refused_by_the_v0_rollout(small_config, tmp_path):
    config = small_config(1, "actor_rollout_ref.rollout.agent.default_agent_loop=two_outputs_for_v0_test", out=tmp_path)
    with pytest.raises(MultiOutputSessionError, match="returned 2 outputs for one sample.*run on V1 only"):
        run_ppo(config)


def test_the_v0_reward_stage_scores_only_the_rows_no_loop_scored_or_failed():
    import torch

    from legacy_v0.protocol import DataProto, object_column
    from legacy_v0.reward import score_generated

    seen = []

    def reward_fn(data, return_dict=False):  # scores 1.0 on the first token; its second row raises
        seen.append(list(data.non_tensor_batch["row"]))
        rewards = torch.zeros(data.batch["responses"].shape)
        rewards[:, 0] = 1.0
        return {
            "reward_tensor": rewards,
            "reward_extra_info": {"digits": [2.0] * len(data)},
            "failed_rows": {1: "ValueError: bad"},
        }

    # rows: 0 scored by the function, 1 its loop raised, 2 its loop scored itself, 3 the function raised
    response_attention = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 1, 1], [1, 0, 0]])
    data = DataProto.from_dict(
        tensors={
            "prompts": torch.ones(4, 2, dtype=torch.long),
            "responses": torch.ones(4, 3, dtype=torch.long),
            "attention_mask": torch.cat([torch.ones(4, 2, dtype=torch.long), response_attention], dim=1),
        },
        non_tensors={
            "row": object_column([0, 1, 2, 3]),
            "rollout_error": object_column([None, "RuntimeError: boom (loop.py:3)", None, None]),
            "loop_score": object_column([None, None, (5.0, {"own": 1.0}), None]),
        },
    )
    rewards, extras, failed = score_generated(data, reward_fn)
    assert seen == [[0, 3]]  # neither the failed row nor the self-scored one reaches the function
    assert failed == {1: "RuntimeError: boom (loop.py:3)", 3: "ValueError: bad"}
    assert rewards.tolist() == [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 5.0], [1.0, 0.0, 0.0]]
    assert extras == {"digits": [2.0, None, None, 2.0], "own": [None, None, 1.0, None]}


def test_an_agent_loop_nobody_registered_is_refused_at_start_up(small_config, tmp_path):
    config = small_config(1, "actor_rollout_ref.rollout.agent.default_agent_loop=no_such_agent", out=tmp_path)
    with pytest.raises(UnknownNameError, match="unknown agent loop 'no_such_agent'"):
        run_ppo(config)
