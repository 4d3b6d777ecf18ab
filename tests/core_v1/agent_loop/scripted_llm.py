"""A deterministic stand-in for the rollout replicas, for tests of agent-loop logic: turn k of any
session answers with the k-th scripted text, encoded by the real tokenizer plus the end-of-turn
token, cut at `max_tokens` exactly as an engine would."""

from __future__ import annotations

from core_v1.rollout.types import SamplingParams, TokenOutput


class ScriptedLLM:
    """A rollout client that answers turn k of any session with `script[k]`."""

    def __init__(self, tokenizer, script: list[str], stop_reason: str = "stop"):
        self.tokenizer, self.script, self.stop_reason = tokenizer, script, stop_reason
        self.requests: list[tuple[str, list[int], SamplingParams]] = []

    def tokens(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]

    async def generate(self, request_id, prompt_ids, sampling_params):
        params = SamplingParams.from_dict(sampling_params)  # the same key checks as the real client
        self.requests.append((request_id, list(prompt_ids), params))
        token_ids = self.tokens(self.script[len(self.requests) - 1])
        stop_reason = self.stop_reason
        if params.max_tokens is not None and len(token_ids) > params.max_tokens:
            token_ids, stop_reason = token_ids[: params.max_tokens], "length"
        log_probs = [-0.01 * (i + 1) for i in range(len(token_ids))] if params.logprobs else []
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason=stop_reason)


def converse_with_tool(tool, call_text: str, question: str):
    """One real `tool_agent` session with `tool`: the model sends `call_text` (one tool call), reads the
    answer and says "done". Returns the tool's tokens as the model read them (decoded) and the loop's
    output."""
    import asyncio

    from core_v1.agent_loop.tool_agent import ToolAgentLoop
    from core_v1.config import load_config
    from examples.tiny_model import make_tokenizer
    from examples.tool_agent.prepare import TOOL_WORDS

    tokenizer = make_tokenizer(TOOL_WORDS)
    config = load_config(
        [
            "data.max_response_length=1024",
            "data.max_prompt_length=64",
            "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=1000",
        ],
        config_name="quickstart",
    )
    client = ScriptedLLM(tokenizer, [call_text, "done"])
    loop = ToolAgentLoop(config, client, tokenizer, tools=[tool])
    output = asyncio.run(
        loop.run({"temperature": 1.0, "max_tokens": 1024}, raw_prompt=[{"role": "user", "content": question}])
    )
    assert len(client.requests) == 2 and output.response_mask.count(0) > 0
    tool_tokens = [t for t, m in zip(output.response_ids, output.response_mask) if m == 0]
    return tokenizer.decode(tool_tokens), output
