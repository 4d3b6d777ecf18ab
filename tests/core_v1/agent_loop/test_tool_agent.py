"""`tool_agent` driven by a scripted LLM client: masks, log-probs, turn limits, the response
budget, tool limits (truncation, timeouts, parallel calls), errors as messages, and the worker path.

The client is a deterministic stand-in for the rollout replicas (the loop's logic is what is under
test): turn k of a session answers with the k-th scripted text, encoded by the real tiny tokenizer
plus the end-of-turn token, cut at `max_tokens` exactly as an engine would.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import time
from pathlib import Path
from uuid import uuid4

import pytest

from core_v1.agent_loop import AGENT_LOOPS
from core_v1.agent_loop.base import encode_chat
from core_v1.agent_loop.manager import sampling_params_for
from core_v1.agent_loop.tool_agent import ChatTemplateError, ToolAgentLoop, turn_end_glue, turn_sampling_params
from core_v1.agent_loop.tool_parser import FunctionCall, ToolParser
from core_v1.agent_loop.tools import BaseTool, CalculatorTool, ToolConfigError, ToolResponse
from core_v1.agent_loop.tools.function_tool import FunctionTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema
from core_v1.agent_loop.tools.session import TRUNCATION_MARK
from core_v1.agent_loop.worker import AgentLoopWorker
from core_v1.config import load_config
from core_v1.transfer_store import TransferStore
from examples.tiny_model import make_tokenizer
from examples.tool_agent.prepare import TOOL_WORDS
from tests.core_v1.agent_loop.scripted_llm import ScriptedLLM

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tool_agent"
PROMPT = [{"role": "user", "content": "2*(3+4)="}]


def tool_call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


CALC = tool_call("calculator", expression="2*(3+4)")


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer(TOOL_WORDS)


@functools.lru_cache(maxsize=None)
def config_with(*overrides: str):
    return load_config(
        ["data.max_response_length=256", "data.max_prompt_length=64", *overrides], config_name="quickstart"
    )


def make_loop(tokenizer, script, *overrides, tools=None, stop_reason="stop"):
    client = ScriptedLLM(tokenizer, script, stop_reason)
    loop = ToolAgentLoop(
        config_with(*overrides), client, tokenizer, tools=[CalculatorTool()] if tools is None else tools
    )
    return loop, client


def run(loop, logprobs=True, **row):
    params = {"temperature": 1.0, "max_tokens": loop.response_length, "logprobs": logprobs}
    return asyncio.run(loop.run(params, raw_prompt=PROMPT, **row))


def split_by_mask(output) -> list[tuple[int, list[int]]]:
    """The response as runs of equal mask: [(mask, token ids), ...]."""
    runs: list[tuple[int, list[int]]] = []
    for token, mask in zip(output.response_ids, output.response_mask):
        if runs and runs[-1][0] == mask:
            runs[-1][1].append(token)
        else:
            runs.append((mask, [token]))
    return runs


def observations(tokenizer, output) -> list[str]:
    return [tokenizer.decode(ids) for mask, ids in split_by_mask(output) if mask == 0]


class Slow(BaseTool):
    def __init__(self, seconds: float, timeout_s: float):
        super().__init__({"timeout_s": timeout_s}, {"type": "function", "function": {"name": "slow"}})
        self.seconds = seconds

    async def execute(self, instance_id, parameters, **kwargs):
        await asyncio.sleep(self.seconds)
        return "done", 0.0, {}


class Text(BaseTool):
    """Answers with `text`, tracking how many executions overlap."""

    def __init__(self, name: str, text: str = "", fail: bool = False):
        super().__init__(None, {"type": "function", "function": {"name": name}})
        self.text, self.fail, self.running, self.peak = text, fail, 0, 0

    async def execute(self, instance_id, parameters, **kwargs):
        self.running += 1
        self.peak = max(self.peak, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        if self.fail:
            raise RuntimeError("backend down")
        return ToolResponse(text=self.text or parameters.get("text", "")), 1.0, {}


def test_tool_agent_is_registered():
    assert AGENT_LOOPS.get("tool_agent") is ToolAgentLoop


def test_one_tool_round_tokens_masks_logprobs_and_turns(tokenizer):
    loop, client = make_loop(tokenizer, [CALC, "14"])
    output = run(loop)

    assert output.prompt_ids == encode_chat(tokenizer, PROMPT)
    (m1, call_ids), (m2, tool_ids), (m3, answer_ids) = split_by_mask(output)
    assert (m1, m2, m3) == (1, 0, 1)
    assert call_ids == client.tokens(CALC) and answer_ids == client.tokens("14")
    # The whole sequence is the chat template's rendering of the conversation (up to the final EOS).
    conversation = [
        *PROMPT,
        {"role": "assistant", "content": CALC},
        {"role": "tool", "content": "14"},
        {"role": "assistant", "content": "14"},
    ]
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert tokenizer.decode(output.prompt_ids + output.response_ids) == rendered.removesuffix("\n")
    assert tokenizer.decode(tool_ids) == "\n<|im_start|>tool\n14<|im_end|>\n<|im_start|>assistant\n"
    expected_logprobs = (
        [-0.01 * (i + 1) for i in range(len(call_ids))]
        + [0.0] * len(tool_ids)
        + [-0.01 * (i + 1) for i in range(len(answer_ids))]
    )
    assert output.response_logprobs == pytest.approx(expected_logprobs)
    assert output.num_turns == 4  # user, assistant, tool, assistant
    assert output.extra_fields["stop_reason"] == "no_tool_call"
    assert output.metrics["num_tool_calls"] == 1 and output.metrics["tool_errors"] == 0

    (first_id, first_prompt, first_params), (second_id, second_prompt, second_params) = client.requests
    assert first_id == second_id  # one request id per session: the same replica every turn
    assert second_prompt == output.prompt_ids + call_ids + tool_ids
    assert (first_params.max_tokens, second_params.max_tokens) == (256, 256 - len(call_ids) - len(tool_ids))


def test_no_tool_call_is_a_single_turn(tokenizer):
    loop, client = make_loop(tokenizer, ["14"])
    output = run(loop)
    assert output.response_mask == [1] * len(client.tokens("14")) and output.num_turns == 2
    assert output.extra_fields == {"turn_scores": [], "tool_rewards": {}, "stop_reason": "no_tool_call"}


def test_max_assistant_turns_ends_the_conversation(tokenizer):
    loop, client = make_loop(tokenizer, [CALC] * 5, "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2")
    output = run(loop)
    assert len(client.requests) == 2 and output.num_turns == 4
    assert output.extra_fields["stop_reason"] == "max_assistant_turns"
    assert [mask for mask, _ in split_by_mask(output)] == [1, 0, 1]


def test_max_user_turns_ends_the_conversation(tokenizer):
    loop, client = make_loop(tokenizer, [CALC] * 5, "actor_rollout_ref.rollout.multi_turn.max_user_turns=1")
    output = run(loop)
    assert len(client.requests) == 2 and output.metrics["tool_turns"] == 1
    assert output.extra_fields["stop_reason"] == "max_user_turns"


def test_a_tool_round_that_would_exhaust_the_budget_is_not_appended(tokenizer):
    call_length = len(ScriptedLLM(tokenizer, []).tokens(CALC))
    loop, client = make_loop(tokenizer, [CALC, "14"], f"data.max_response_length={call_length + 5}")
    output = run(loop)
    assert output.response_mask == [1] * call_length  # the tool ran, but its answer had no room to be answered
    assert output.extra_fields["stop_reason"] == "response_length" and output.metrics["num_tool_calls"] == 1


def test_a_model_turn_is_cut_at_the_remaining_budget(tokenizer):
    loop, client = make_loop(tokenizer, ["1" * 40], "data.max_response_length=10")
    output = run(loop)
    assert len(output.response_ids) == 10 and client.requests[0][2].max_tokens == 10
    assert output.extra_fields["stop_reason"] == "response_length"


def test_long_tool_responses_are_truncated(tokenizer):
    loop, _ = make_loop(
        tokenizer,
        [tool_call("echo"), "ok"],
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=8",
        "actor_rollout_ref.rollout.multi_turn.tool_response_truncate_side=left",
        tools=[Text("echo", text="0123456789" * 5)],
    )
    [observation] = observations(tokenizer, run(loop))
    assert "tool\n01234567" + TRUNCATION_MARK + "<|im_end|>" in observation


def test_a_slow_tool_times_out_and_the_model_is_told(tokenizer):
    loop, _ = make_loop(tokenizer, [tool_call("slow"), "ok"], tools=[Slow(seconds=30, timeout_s=0.1)])
    started = time.perf_counter()
    output = run(loop)
    assert time.perf_counter() - started < 5
    assert "Error: tool 'slow' did not answer within 0.1 s." in observations(tokenizer, output)[0]
    assert output.metrics["tool_timeouts"] == 1 and output.extra_fields["stop_reason"] == "no_tool_call"


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_parallel_calls_are_limited_and_the_extra_call_is_answered(tokenizer):
    echo = Text("echo")
    calls = "".join(tool_call("echo", text=f"r{i}") for i in range(3))
    loop, _ = make_loop(
        tokenizer,
        [calls, "ok"],
        "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=2",
        "data.max_response_length=1024",
        tools=[echo],
    )
    output = run(loop)
    [observation] = observations(tokenizer, output)
    assert observation.count("<|im_start|>tool\n") == 3  # one tool message per call, in call order
    assert observation.index("r0") < observation.index("r1") < observation.index("not run; at most 2")
    assert echo.peak == 2
    assert output.metrics["tool_skipped"] == 1 and output.extra_fields["turn_scores"] == [1.0, 1.0, 0.0]


def test_tool_errors_become_messages_and_the_conversation_goes_on(tokenizer):
    calls = tool_call("broken") + tool_call("nope") + "<tool_call>{not json}</tool_call>"
    loop, client = make_loop(
        tokenizer,
        [calls, "sorry"],
        "actor_rollout_ref.rollout.multi_turn.max_parallel_calls=3",
        "data.max_response_length=1024",
        tools=[Text("broken", fail=True)],
    )
    output = run(loop)
    [observation] = observations(tokenizer, output)
    assert "Error: tool 'broken' failed: backend down" in observation
    assert "Error: unknown tool 'nope'. Available tools: broken." in observation
    assert "Error: the tool call is not valid JSON" in observation
    assert output.metrics["tool_errors"] == 3 and len(client.requests) == 2


@ToolParser.register("call_lines_for_test")
class CallLines(ToolParser):
    """A second format: one `CALL <name> <json arguments>` per line."""

    async def extract_tool_calls(self, responses_ids):
        text = self.tokenizer.decode(responses_ids, skip_special_tokens=True)
        calls = [line.split(" ", 2) for line in text.splitlines() if line.startswith("CALL ")]
        return text, [FunctionCall(name=name, arguments=arguments) for _, name, arguments in calls]


def test_a_registered_parser_format_is_used(tokenizer):
    loop, _ = make_loop(
        tokenizer,
        ['CALL calculator {"expression": "6*7"}', "42"],
        "actor_rollout_ref.rollout.multi_turn.format=call_lines_for_test",
    )
    output = run(loop)
    assert "tool\n42<|im_end|>" in observations(tokenizer, output)[0]


def test_without_logprobs_the_output_has_none(tokenizer):
    loop, _ = make_loop(tokenizer, [CALC, "14"])
    assert run(loop, logprobs=False).response_logprobs is None


def test_an_aborted_turn_ends_the_session_without_running_tools(tokenizer):
    loop, client = make_loop(tokenizer, [CALC, "14"], stop_reason="aborted")
    output = run(loop)
    assert output.extra_fields["stop_reason"] == "aborted" and output.metrics["num_tool_calls"] == 0
    assert len(client.requests) == 1


def test_configured_tools_and_tools_kwargs_give_the_tool_reward(tokenizer):
    tool_config = f"actor_rollout_ref.rollout.multi_turn.tool_config_path={EXAMPLE / 'tool_config.yaml'}"
    loop = ToolAgentLoop(config_with(tool_config), ScriptedLLM(tokenizer, [CALC, "14"]), tokenizer)
    assert list(loop.tools) == ["calculator"] and loop.tool_schemas[0]["function"]["name"] == "calculator"
    kwargs = {"calculator": {"create_kwargs": {"ground_truth": "14"}}}
    output = run(loop, extra_info={"tools_kwargs": kwargs})  # verl puts tools_kwargs in extra_info
    assert output.extra_fields["tool_rewards"] == {"calculator": 1.0} and output.metrics["tool_final_reward"] == 1.0


def test_a_missing_tool_config_is_a_clear_error(tokenizer, tmp_path):
    with pytest.raises(ToolConfigError, match="does not exist"):
        ToolAgentLoop(
            config_with(f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tmp_path / 'x.yaml'}"),
            ScriptedLLM(tokenizer, []),
            tokenizer,
        )


def test_a_function_tool_the_sandbox_cannot_receive_stops_the_loop_at_start_up(tokenizer):
    lock = threading.Lock()
    schema = {"type": "function", "function": {"name": "locked", "description": "test", "parameters": {}}}
    tool = FunctionTool("locked", lambda: lock.locked(), OpenAIFunctionToolSchema.model_validate(schema))
    with pytest.raises(ToolConfigError, match="function tool 'locked' cannot be sent to a sandbox worker"):
        make_loop(tokenizer, [], tools=[tool])


def test_a_chat_template_that_rewrites_history_is_refused(tokenizer):
    rewriting = make_tokenizer(TOOL_WORDS)
    rewriting.chat_template = (
        "{{ messages|length }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    loop, _ = make_loop(rewriting, [CALC, "14"])
    with pytest.raises(ChatTemplateError, match="renders earlier turns differently"):
        run(loop)


def test_turn_sampling_params_cap_every_length_alias():
    assert turn_sampling_params({"max_new_tokens": 50, "temperature": 0.5}, 30) == {
        "temperature": 0.5,
        "max_tokens": 30,
    }
    assert turn_sampling_params({"max_tokens": 20, "response_length": None}, 30) == {"max_tokens": 20}
    assert turn_sampling_params({}, 7) == {"max_tokens": 7}


@pytest.mark.parametrize(
    "model_ids, glue",
    [
        ([7, 3], [10]),  # ended with the end-of-turn token: the template's newline after it is restored
        ([7, 8], []),  # cut off mid-turn: nothing to restore
        ([7, 2], []),  # a special token the rendered history does not end a turn with
        ([], []),
    ],
)
def test_turn_end_glue(model_ids, glue):
    rendered_history = [2, 5, 3, 10, 2, 6, 7, 3, 10]  # ... <end>=3 "\n"=10
    assert turn_end_glue(rendered_history, model_ids, special_ids=[2, 3]) == glue


def test_worker_stores_the_tool_trajectory_with_its_mask_and_reward(tokenizer):
    config = config_with(
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={EXAMPLE / 'tool_config.yaml'}",
        f"reward.custom_reward_function.path={EXAMPLE / 'reward.py'}",
    )
    store = TransferStore()
    worker = AgentLoopWorker(config, ScriptedLLM(tokenizer, [CALC, "14"]), store, tokenizer)
    session = {
        "uid": uuid4().hex,
        "session_id": 0,
        "seed": 1,
        "global_steps": 0,
        "raw_prompt": PROMPT,
        "sampling_params": sampling_params_for(config, validate=False),
        "agent_name": "tool_agent",
        "data_source": "calculator",
        "reward_model": {"ground_truth": "14"},
        "extra_info": {},
        "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": "14"}}},
    }

    async def run_session():
        worker.submit("train", [session])
        await worker.drain()

    asyncio.run(run_session())
    [(key, tags)] = store.list("train").items()
    assert tags["status"] == "finished", tags
    row = store.get("train", [key])
    mask = row["response_mask"][0].tolist()
    assert 0 in mask and mask[0] == 1 and mask[-1] == 1
    assert row["num_turns"].tolist() == [4]
    assert row["reward_score"].tolist() == [1.0]  # the final answer after the tool round is right
