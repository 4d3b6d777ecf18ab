"""`tool_agent`: multi-turn generation in which the model calls tools by writing them in its text.

One trajectory is a loop:

    generate -> parse tool calls (multi_turn.format) -> run them (ToolSession: limits, errors
    answered as messages) -> append the tool messages -> generate again

until a turn has no tool call, `multi_turn.max_assistant_turns` generations or
`multi_turn.max_user_turns` tool and user rounds are reached, a request is aborted, or the response
budget (`rollout.response_length` tokens, model and tool tokens together) is spent. With an
interaction (`multi_turn.interaction_config_path`, see `interaction.py`), a turn without a tool
call is answered by the interaction's user message instead, until it ends the conversation. Tools come
from `multi_turn.tool_config_path` (verl's YAML format) and, once the config carries it,
`multi_turn.function_tool_path`; they are loaded once per process and shared by its trajectories.

Token bookkeeping. The response is the model's tokens exactly as sampled (mask 1, with their
log-probs) interleaved with tool-message tokens (mask 0, log-prob 0.0). The tool-message tokens
are what the tokenizer's chat template adds for them: the conversation is encoded without and
with the new `{"role": "tool"}` messages (the latter with the generation prompt for the next
assistant turn) and the suffix is taken, as verl does; a template that rewrites earlier turns
when a message is appended is refused with an error. Unlike verl, the template's text after the
model's end-of-turn token (ChatML's newline) is put back, so prompt + response decodes to exactly
the chat template's rendering of the conversation. A tool round whose tokens would leave no
room for another model token ends the trajectory without being appended (it could not be answered).
Every turn uses one request id, so a session's turns stay on one replica (warm prefix).

Per trajectory: `metrics` count calls, errors, timeouts, skipped calls, seconds and tool
rewards, and interaction turns and scores, and sum the numbers each tool's `execute` returned
(`{tool name}/{metric}`, e.g. `search/api_errors`); `extra_fields` keep `turn_scores` (each call's
step reward and each interaction turn's score, in turn order), `tool_rewards` (each tool's final
`calc_reward`) and `stop_reason`.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Optional
from uuid import uuid4

from core_v1.agent_loop.base import AgentLoopBase, AgentLoopOutput, encode_chat, register
from core_v1.agent_loop.interaction import (
    configured_interactions,
    finalize,
    maybe_await,
    pick_interaction,
    row_interaction_kwargs,
)
from core_v1.agent_loop.tool_parser import ToolParser
from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.function_tool import FunctionTool, load_function_tools_from_path
from core_v1.agent_loop.tools.sandbox import SandboxLimits, check_function, sandbox_for
from core_v1.agent_loop.tools.session import ToolCallResult, ToolLimits, ToolSession
from core_v1.agent_loop.tools.tool_registry import check_unique_names, initialize_tools_from_config, row_kwargs
from core_v1.agent_loop.vision import expand_image_placeholders, image_inputs, image_token_counts, vision_chat_ids
from core_v1.utils.vision import concat_inputs

_LENGTH_KEYS = ("max_tokens", "max_new_tokens", "response_length")


class ChatTemplateError(ValueError):
    """The tokenizer's chat template cannot be extended turn by turn; the message says why."""


@dataclass
class _Trajectory:
    """The growing response of one session and its counters."""

    prompt_ids: list[int]
    multi_modal_inputs: Optional[dict[str, Any]] = None  # the prompt's images, then those tools showed; sent every turn
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] = field(default_factory=list)
    logprobs_complete: bool = True
    assistant_turns: int = 0
    tool_turns: int = 0
    interaction_turns: int = 0
    calls: list[ToolCallResult] = field(default_factory=list)
    turn_scores: list[float] = field(default_factory=list)  # tool step rewards and interaction scores, in order
    generate_seconds: float = 0.0

    def add_model_tokens(self, token_ids: list[int], log_probs: Optional[list[float]]) -> None:
        self.assistant_turns += 1
        self.response_ids += token_ids
        self.response_mask += [1] * len(token_ids)
        if log_probs is None or len(log_probs) != len(token_ids):
            self.logprobs_complete = False  # one turn without log-probs: the trainer recomputes them all
        else:
            self.response_logprobs += [float(p) for p in log_probs]

    def add_observation(self, token_ids: list[int], from_interaction: bool = False) -> None:
        """Tokens the model did not write: a tool round's messages, or an interaction's user turn."""
        if from_interaction:
            self.interaction_turns += 1
        else:
            self.tool_turns += 1
        self.response_ids += token_ids
        self.response_mask += [0] * len(token_ids)
        self.response_logprobs += [0.0] * len(token_ids)

    def metrics(self, final_rewards: dict[str, float]) -> dict[str, float]:
        statuses = [c.status for c in self.calls]
        return {
            **self.tool_metrics(),
            "assistant_turns": float(self.assistant_turns),
            "tool_turns": float(self.tool_turns),
            "num_tool_calls": float(len(self.calls)),
            "tool_errors": float(statuses.count("error")),
            "tool_timeouts": float(statuses.count("timeout")),
            "tool_skipped": float(statuses.count("skipped")),
            "tool_seconds": sum(c.seconds for c in self.calls),
            "generate_seconds": self.generate_seconds,
            "tool_step_reward": sum(c.reward for c in self.calls),
            "tool_final_reward": sum(final_rewards.values()),
            "interaction_turns": float(self.interaction_turns),
        }

    def tool_metrics(self) -> dict[str, float]:
        """The numbers tools return from `execute`, summed over this trajectory's calls as `{tool}/{name}`."""
        sums: dict[str, float] = {}
        for call in self.calls:
            for name, value in call.metrics.items():
                key = f"{call.name}/{name}"
                sums[key] = sums.get(key, 0.0) + value
        return sums


@register("tool_agent")
class ToolAgentLoop(AgentLoopBase):
    """Multi-turn tool use (see the module docstring). `tools`, when given, replaces the configured
    tools (a program that builds its tools in code passes them here)."""

    def __init__(
        self, config: Any, server_manager: Any, tokenizer: Any, tools: Optional[list[BaseTool]] = None, **kwargs: Any
    ):
        super().__init__(config, server_manager, tokenizer, **kwargs)
        rollout = config.actor_rollout_ref.rollout
        multi_turn = rollout.multi_turn
        self.response_length: int = rollout.response_length
        self.max_assistant_turns: Optional[int] = multi_turn.max_assistant_turns or None
        self.max_user_turns: Optional[int] = multi_turn.max_user_turns or None
        self.limits = ToolLimits.from_config(multi_turn)
        self.sandbox = sandbox_for(SandboxLimits.from_config(multi_turn.tool_sandbox))
        if tools is None:
            tools = list(configured_tools(multi_turn.tool_config_path, multi_turn.function_tool_path))
        else:
            check_unique_names(tools, "ToolAgentLoop(tools=...)")
        if self.sandbox is not None:  # a function that cannot reach a worker stops the run here, not mid-rollout
            for tool in tools:
                if isinstance(tool, FunctionTool):
                    check_function(tool.name, tool.fn)
        self.tools: dict[str, BaseTool] = {tool.name: tool for tool in tools}
        self.tool_schemas = [tool.get_openai_tool_schema().model_dump(exclude_none=True) for tool in tools]
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.format, tokenizer)
        self.interactions = configured_interactions(multi_turn.interaction_config_path)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = [dict(m) for m in kwargs["raw_prompt"]]
        trajectory = _Trajectory(*await self.encode_prompt(kwargs, tools=self.tool_schemas or None))
        session = ToolSession(
            self.tools,
            self.limits,
            row_tools_kwargs(kwargs),
            sandbox=self.sandbox,
            takes_images=self.processor is not None,
        )
        request_id = uuid4().hex  # one id for every turn: the session sticks to one replica
        user = await self._start_user(request_id, kwargs)
        try:
            stop_reason = await self._converse(request_id, messages, trajectory, session, sampling_params, user)
        finally:
            final_rewards = await session.close()
            if user is not None:
                await finalize(user[0], request_id, **user[1])
        return AgentLoopOutput(
            prompt_ids=trajectory.prompt_ids,
            response_ids=trajectory.response_ids,
            response_mask=trajectory.response_mask,
            response_logprobs=trajectory.response_logprobs if trajectory.logprobs_complete else None,
            num_turns=1 + trajectory.assistant_turns + trajectory.tool_turns + trajectory.interaction_turns,
            metrics=trajectory.metrics(final_rewards),
            extra_fields={
                "turn_scores": trajectory.turn_scores,
                "tool_rewards": final_rewards,
                "stop_reason": stop_reason,
            },
            multi_modal_inputs=trajectory.multi_modal_inputs,
        )

    async def _start_user(self, request_id: str, row: dict[str, Any]) -> Optional[tuple[Any, dict[str, Any]]]:
        """The row's interaction and its kwargs, started for this trajectory (None without interactions)."""
        if not self.interactions:
            return None
        interaction_kwargs = row_interaction_kwargs(row)
        interaction = pick_interaction(self.interactions, interaction_kwargs)
        await maybe_await(interaction.start_interaction(request_id, **interaction_kwargs))
        return interaction, interaction_kwargs

    async def _converse(
        self,
        request_id: str,
        messages: list[dict],
        trajectory: _Trajectory,
        session: ToolSession,
        sampling_params: dict[str, Any],
        user: Optional[tuple[Any, dict[str, Any]]],
    ) -> str:
        """Alternate generations with tool rounds or user turns; returns why the conversation stopped."""
        while True:
            output = await self._generate(request_id, trajectory, sampling_params)
            stop_reason = self._stop_reason(trajectory, output.stop_reason)
            if stop_reason:
                return stop_reason
            _, calls = await self.tool_parser.extract_tool_calls(list(output.token_ids))
            if not calls and user is None:
                return "no_tool_call"
            messages.append(
                {
                    "role": "assistant",
                    "content": self.tokenizer.decode(list(output.token_ids), skip_special_tokens=True),
                }
            )
            ended, images = False, []
            if calls:
                results = self._images_shown_or_refused(trajectory, await session.run_calls(calls))
                trajectory.calls += results
                trajectory.turn_scores += [r.reward for r in results]
                new_messages = [tool_message(r) for r in results]
                images = [image for r in results for image in r.images]
            else:
                ended, text, score, _ = await maybe_await(user[0].generate_response(request_id, messages, **user[1]))
                if score is not None:
                    trajectory.turn_scores.append(float(score))
                new_messages = [{"role": "user", "content": str(text)}]
            observation = self._appended_ids(messages, new_messages, list(output.token_ids))
            new_inputs = None
            if images:
                observation, new_inputs = self._with_images(observation, images)
            messages += new_messages
            if len(trajectory.response_ids) + len(observation) >= self.response_length:
                return "response_length"
            trajectory.add_observation(observation, from_interaction=not calls)
            if new_inputs:
                trajectory.multi_modal_inputs = concat_inputs([trajectory.multi_modal_inputs, new_inputs])
            if ended:
                return "interaction_ended"

    async def _generate(self, request_id: str, trajectory: _Trajectory, sampling_params: dict[str, Any]) -> Any:
        started = time.perf_counter()
        with_images = {"multi_modal_inputs": trajectory.multi_modal_inputs} if trajectory.multi_modal_inputs else {}
        output = await self.server_manager.generate(
            request_id=request_id,
            prompt_ids=trajectory.prompt_ids + trajectory.response_ids,
            sampling_params=turn_sampling_params(sampling_params, self.response_length - len(trajectory.response_ids)),
            **with_images,
        )
        trajectory.generate_seconds += time.perf_counter() - started
        log_probs = list(output.log_probs) if output.log_probs is not None else None
        trajectory.add_model_tokens(list(output.token_ids), log_probs)
        return output

    def _stop_reason(self, trajectory: _Trajectory, generation_stop: str) -> Optional[str]:
        """Why the conversation cannot go on after this generation, or None."""
        if generation_stop == "aborted":
            return "aborted"
        if len(trajectory.response_ids) >= self.response_length:
            return "response_length"
        if self.max_assistant_turns and trajectory.assistant_turns >= self.max_assistant_turns:
            return "max_assistant_turns"
        if self.max_user_turns and trajectory.tool_turns + trajectory.interaction_turns >= self.max_user_turns:
            return "max_user_turns"
        return None

    def _images_shown_or_refused(self, trajectory: _Trajectory, results: list[ToolCallResult]) -> list[ToolCallResult]:
        """`results`, with tool images refused (an error text instead) when the sequence so far holds
        an image placeholder id the model sampled: the engine and the training forwards fill the
        first placeholders in order, so an image after a sampled one would land in the wrong slots."""
        if not any(r.images for r in results) or self._placeholders_are_images(trajectory):
            return results
        return [
            dataclasses.replace(
                r,
                images=[],
                text=f"Error: tool {r.name!r} returned an image, which cannot be shown after an image "
                "placeholder token the model wrote itself.",
                status="error",
            )
            if r.images
            else r
            for r in results
        ]

    def _placeholders_are_images(self, trajectory: _Trajectory) -> bool:
        inputs = trajectory.multi_modal_inputs or {}
        expected = (
            sum(image_token_counts(self.processor, inputs["image_grid_thw"])) if "image_grid_thw" in inputs else 0
        )
        sequence = trajectory.prompt_ids + trajectory.response_ids
        return sequence.count(self.processor.image_token_id) == expected

    def _with_images(self, observation: list[int], images: list) -> tuple[list[int], dict[str, Any]]:
        """The tool tokens with each image's placeholder expanded to its patches, and the images' inputs."""
        inputs = image_inputs(self.processor, images)
        counts = image_token_counts(self.processor, inputs["image_grid_thw"])
        return expand_image_placeholders(observation, self.processor.image_token_id, counts), inputs

    def _render(self, messages: list[dict], add_generation_prompt: bool) -> list[int]:
        """Token ids of the conversation under the chat template (a vision-language model's
        processor's, images as one placeholder each)."""
        tools, template = self.tool_schemas or None, self.chat_template_kwargs
        if self.processor is not None:
            return vision_chat_ids(self.processor, messages, tools, add_generation_prompt, template)
        return encode_chat(
            self.tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt, **template
        )

    def _appended_ids(self, history: list[dict], new_messages: list[dict], model_ids: list[int]) -> list[int]:
        """The tokens the chat template adds for `new_messages` after `history` (whose last message
        is the model's turn `model_ids`), up to and including the next turn's generation prompt."""
        before = self._render(history, add_generation_prompt=False)
        after = self._render(history + new_messages, add_generation_prompt=True)
        if after[: len(before)] != before:
            raise ChatTemplateError(
                "the tokenizer's chat template renders earlier turns differently once a tool "
                "message is appended, so tool tokens cannot be added turn by turn; use a chat "
                "template that only appends (as Qwen's and ChatML templates do)"
            )
        return turn_end_glue(before, model_ids, self.tokenizer.all_special_ids) + after[len(before) :]


def tool_message(result: ToolCallResult) -> dict[str, Any]:
    """The tool's answer as a chat message: its text, or its images then its text as content parts."""
    if not result.images:
        return {"role": "tool", "content": result.text}
    parts: list[dict[str, Any]] = [{"type": "image"} for _ in result.images]
    return {"role": "tool", "content": [*parts, {"type": "text", "text": result.text}]}


def turn_end_glue(rendered_history: list[int], model_ids: list[int], special_ids: list[int]) -> list[int]:
    """What the template writes after the assistant's end-of-turn token (ChatML: a newline). The
    model stopped *at* that token, so these tokens are not in the stream yet; without them the
    trained sequence would differ from the chat template's rendering of the same conversation."""
    special = set(special_ids)
    last_special = next((i for i in range(len(rendered_history) - 1, -1, -1) if rendered_history[i] in special), None)
    # The model's turn (decoded without special tokens) is the last message, so the last special
    # token of the rendering is the template's end of that turn; it must be where the model stopped.
    if not model_ids or last_special is None or rendered_history[last_special] != model_ids[-1]:
        return []
    return rendered_history[last_special + 1 :]


def turn_sampling_params(sampling_params: dict[str, Any], remaining: int) -> dict[str, Any]:
    """The session's sampling params for one turn: at most `remaining` new tokens (or fewer, if the
    params ask for fewer per turn)."""
    params = dict(sampling_params)
    asked = [params.pop(key) for key in _LENGTH_KEYS if key in params]
    params["max_tokens"] = min([remaining, *(int(n) for n in asked if n is not None)])
    return params


def row_tools_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    """A row's `tools_kwargs`: the column, or (where verl's data puts it) `extra_info["tools_kwargs"]`."""
    return row_kwargs(row, "tools_kwargs")


@functools.lru_cache(maxsize=8)
def configured_tools(tool_config_path: Optional[str], function_tool_path: Optional[str]) -> tuple[BaseTool, ...]:
    """The tools a config names, built once per process (tools keep per-trajectory state by
    instance id, so one object serves every trajectory)."""
    tools: list[BaseTool] = initialize_tools_from_config(tool_config_path) if tool_config_path else []
    if function_tool_path:
        tools += load_function_tools_from_path(function_tool_path)
    check_unique_names(tools, "multi_turn.tool_config_path + multi_turn.function_tool_path")
    return tuple(tools)


__all__ = [
    "ChatTemplateError",
    "ToolAgentLoop",
    "ToolConfigError",
    "configured_tools",
    "row_tools_kwargs",
    "turn_sampling_params",
]
