"""Running one trajectory's tool calls with limits; every failure becomes a message to the model.

A `ToolSession` is the tools as one trajectory sees them. The first call of a tool creates its
instance (`create(create_kwargs=...)` from the row's `tools_kwargs`); `close()` asks each created
instance for its final reward and releases it. Limits (`ToolLimits`):

- at most `max_parallel_calls` calls of one turn run, concurrently; each further call of that
  turn is answered with an error message instead of being silently dropped;
- every `create` / `execute` / `calc_reward` / `release` is bounded by `timeout_s` (a tool's
  `config["timeout_s"]` overrides it). Function tools run in the sandbox's worker processes
  (`tools/sandbox.py`: CPU, memory and network limits), which are killed on timeout; with the
  sandbox off, a sync function tool runs in a thread, which cannot be killed: the model is
  answered at once and the thread runs on. BaseTool methods run on the event loop (one that
  blocks without awaiting stalls it and cannot be timed out: use `asyncio.to_thread`);
- a response longer than `max_response_length` *characters* (characters, as verl counts them,
  so the limit means the same for every tokenizer) is cut: `truncate_side="left"` keeps the
  first characters, `"right"` the last, `"middle"` both ends (verl's meanings).

An unknown tool, arguments that are not a JSON object, an exception, a timeout: each is answered
with an `Error: ...` tool message and counted in the metrics; nothing here raises to the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Iterable, Mapping, Optional, TypeVar

from core_v1.agent_loop.media import load_image
from core_v1.agent_loop.tool_parser import FunctionCall
from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.function_tool import FunctionTool, normalize_function_tool_return
from core_v1.agent_loop.tools.sandbox import SandboxFailure, ToolSandbox
from core_v1.agent_loop.tools.schemas import ToolResponse

logger = logging.getLogger(__name__)

TRUNCATE_SIDES = ("left", "right", "middle")
TRUNCATION_MARK = "...(truncated)..."
T = TypeVar("T")


@dataclass(frozen=True)
class ToolLimits:
    max_parallel_calls: int = 1
    """Calls of one turn that run (concurrently); the rest are answered with an error."""
    max_response_length: int = 256
    """Longest tool response shown to the model, in characters."""
    truncate_side: str = "middle"
    """Which part of a long response is kept: "left" (the start), "right" (the end), "middle" (both ends)."""
    timeout_s: float = 30.0
    """Seconds one tool method may take before the model is told it timed out."""

    def __post_init__(self) -> None:
        key = "actor_rollout_ref.rollout.multi_turn"
        if not (isinstance(self.max_parallel_calls, int) and self.max_parallel_calls >= 1):
            raise ToolConfigError(f"{key}.max_parallel_calls must be an int >= 1, got {self.max_parallel_calls!r}")
        if not (isinstance(self.max_response_length, int) and self.max_response_length >= 1):
            raise ToolConfigError(
                f"{key}.max_tool_response_length must be an int >= 1, got {self.max_response_length!r}"
            )
        if self.truncate_side not in TRUNCATE_SIDES:
            raise ToolConfigError(
                f"{key}.tool_response_truncate_side must be one of {TRUNCATE_SIDES}, got {self.truncate_side!r}"
            )
        if not self.timeout_s > 0:
            raise ToolConfigError(f"the tool timeout must be > 0 seconds, got {self.timeout_s!r}")

    @classmethod
    def from_config(cls, multi_turn: Any) -> "ToolLimits":
        """From `actor_rollout_ref.rollout.multi_turn`. `tool_timeout_s` is read when the config
        has it (the schema does not carry it yet), else the default here applies."""
        return cls(
            max_parallel_calls=multi_turn.max_parallel_calls,
            max_response_length=multi_turn.max_tool_response_length,
            truncate_side=multi_turn.tool_response_truncate_side,
            timeout_s=getattr(multi_turn, "tool_timeout_s", None) or cls.timeout_s,
        )


@dataclass
class ToolCallResult:
    """The answer to one call, as the model will read it."""

    name: str
    text: str
    status: str = "ok"
    """"ok", "error" (parse error, unknown tool, bad arguments, exception), "timeout" or "skipped"."""
    reward: float = 0.0
    metrics: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    images: list = field(default_factory=list)
    """PIL images the tool returned (`ToolResponse.image`), shown before `text` when the policy takes images."""


class ToolSession:
    """The tools of one trajectory. `tools_kwargs` is the row's column: per tool name, optional
    `create_kwargs`, `execute_kwargs`, `calc_reward_kwargs`, `release_kwargs` (verl's layout)."""

    def __init__(
        self,
        tools: Mapping[str, BaseTool],
        limits: ToolLimits,
        tools_kwargs: Optional[Mapping[str, Any]] = None,
        sandbox: Optional[ToolSandbox] = None,
        takes_images: bool = False,
    ):
        self.tools = dict(tools)
        self.limits = limits
        self.sandbox = sandbox
        self.takes_images = takes_images  # the policy is a vision-language model: a tool may answer with images
        self.tools_kwargs = clean_tools_kwargs(tools_kwargs)
        self._instances: dict[str, str] = {}

    async def run_calls(self, calls: list[FunctionCall]) -> list[ToolCallResult]:
        """One result per call, in order (runnable calls concurrently)."""
        runnable, skipped = calls[: self.limits.max_parallel_calls], calls[self.limits.max_parallel_calls :]
        # Create each tool's instance once, before the calls race to it.
        names = {c.name for c in runnable if c.error is None and c.name in self.tools and c.name not in self._instances}
        creation_failures = dict(zip(names, await asyncio.gather(*(self._create(n) for n in names))))
        results = list(await asyncio.gather(*(self._run_one(c, creation_failures.get(c.name)) for c in runnable)))
        note = f"Error: not run; at most {self.limits.max_parallel_calls} tool call(s) are run per turn."
        return results + [ToolCallResult(name=c.name, text=note, status="skipped") for c in skipped]

    async def close(self) -> dict[str, float]:
        """Final reward of every tool this trajectory created (calc_reward), then release them."""
        rewards: dict[str, float] = {}
        for name, instance_id in self._instances.items():
            tool, kwargs = self.tools[name], self.tools_kwargs.get(name, {})
            try:
                rewards[name] = float(
                    await self._bounded(tool, tool.calc_reward(instance_id, **kwargs.get("calc_reward_kwargs", {})))
                )
            except Exception as error:  # the conversation is over: log it, the reward stays unset
                logger.warning("tool %r: calc_reward failed: %s", name, _describe(error))
            try:
                await self._bounded(tool, tool.release(instance_id, **kwargs.get("release_kwargs", {})))
            except Exception as error:
                logger.warning("tool %r: release failed: %s", name, _describe(error))
        self._instances.clear()
        return rewards

    async def _create(self, name: str) -> Optional[ToolCallResult]:
        """Create the instance; returns the failure to answer this tool's calls with, or None."""
        tool = self.tools[name]
        try:
            created = await self._bounded(
                tool, tool.create(create_kwargs=self.tools_kwargs.get(name, {}).get("create_kwargs", {}))
            )
        except Exception as error:
            return self._failure(name, error, tool)
        # verl's tools return the id, or (id, ToolResponse) in its newer versions.
        self._instances[name] = created[0] if isinstance(created, tuple) else created
        return None

    async def _run_one(self, call: FunctionCall, creation_failure: Optional[ToolCallResult]) -> ToolCallResult:
        started = time.perf_counter()
        result = await self._execute(call, creation_failure)
        result.seconds = time.perf_counter() - started
        return result

    async def _execute(self, call: FunctionCall, creation_failure: Optional[ToolCallResult]) -> ToolCallResult:
        if call.error is not None:
            return ToolCallResult(name=call.name, text=f"Error: {call.error}.", status="error")
        tool = self.tools.get(call.name)
        if tool is None:
            known = ", ".join(sorted(self.tools)) or "(none)"
            return ToolCallResult(
                name=call.name, text=f"Error: unknown tool {call.name!r}. Available tools: {known}.", status="error"
            )
        if creation_failure is not None:
            return dataclasses.replace(creation_failure)
        arguments = _decode_arguments(call.arguments)
        if arguments is None:
            return ToolCallResult(
                name=call.name, text=f"Error: the arguments of {call.name!r} must be a JSON object.", status="error"
            )
        try:
            response, reward, metrics = await self._run_execute(call.name, tool, arguments)
        except SandboxFailure as failure:
            return ToolCallResult(
                name=call.name,
                status=failure.status,
                text=truncate(
                    f"Error: tool {call.name!r} {failure}.", self.limits.max_response_length, self.limits.truncate_side
                ),
            )
        except Exception as error:
            return self._failure(call.name, error, tool)
        text, images = self._answer(call.name, response)
        return ToolCallResult(
            name=call.name, text=text, reward=float(reward or 0.0), metrics=_numeric(metrics), images=images
        )

    async def _run_execute(self, name: str, tool: BaseTool, arguments: dict) -> tuple[Any, float, dict]:
        if self.sandbox is not None and isinstance(tool, FunctionTool):
            value = await self.sandbox.call(tool.fn, arguments, self._timeout_of(tool))
            return normalize_function_tool_return(value)
        execute_kwargs = self.tools_kwargs.get(name, {}).get("execute_kwargs", {})
        return await self._bounded(tool, tool.execute(self._instances[name], arguments, **execute_kwargs))

    def _answer(self, name: str, response: ToolResponse | str | Any) -> tuple[str, list]:
        """The text the model reads and the images shown with it."""
        images: list = []
        if isinstance(response, ToolResponse):
            refusal = self._media_refusal(name, response)
            if refusal:
                return refusal, []
            try:
                images = [load_image(image) for image in _as_list(response.image)]
            except Exception as error:  # an unreadable image is the tool's mistake: the model is told
                return f"Error: tool {name!r} returned an image that cannot be read ({_describe(error)}).", []
            response = response.text or ""
        return truncate(str(response), self.limits.max_response_length, self.limits.truncate_side), images

    def _media_refusal(self, name: str, response: ToolResponse) -> Optional[str]:
        """The error the model reads instead of media this loop cannot show, or None."""
        if response.video is not None:
            what = "video content, which the tool_agent loop does not show (images only)"
        elif response.image is not None and not self.takes_images:
            what = "an image, but the policy is a text model (no vision tower)"
        else:
            return None
        logger.warning("tool %r returned %s", name, what)
        return f"Error: tool {name!r} returned {what}."

    async def _bounded(self, tool: BaseTool, work: Awaitable[T]) -> T:
        return await asyncio.wait_for(work, timeout=self._timeout_of(tool))

    def _timeout_of(self, tool: BaseTool) -> float:
        return float(tool.config.get("timeout_s") or self.limits.timeout_s)

    def _failure(self, name: str, error: BaseException, tool: BaseTool) -> ToolCallResult:
        if isinstance(error, asyncio.TimeoutError):
            return ToolCallResult(
                name=name,
                status="timeout",
                text=f"Error: tool {name!r} did not answer within {self._timeout_of(tool):g} s.",
            )
        logger.info("tool %r failed: %s", name, _describe(error))
        text = truncate(
            f"Error: tool {name!r} failed: {error or type(error).__name__}",
            self.limits.max_response_length,
            self.limits.truncate_side,
        )
        return ToolCallResult(name=name, text=text, status="error")


def truncate(text: str, limit: int, side: str) -> str:
    """`text` cut to `limit` characters plus a visible mark (see `ToolLimits.truncate_side`)."""
    if len(text) <= limit:
        return text
    if side == "left":
        return text[:limit] + TRUNCATION_MARK
    if side == "right":
        return TRUNCATION_MARK + text[-limit:]
    head = (limit + 1) // 2
    return text[:head] + TRUNCATION_MARK + text[len(text) - (limit - head) :]


def clean_tools_kwargs(tools_kwargs: Optional[Mapping[str, Any]]) -> dict[str, dict[str, dict]]:
    """The row's `tools_kwargs` as plain dicts. Parquet stores them as structs, which fill a key
    one row lacks with None; those Nones mean "nothing given"."""
    cleaned: dict[str, dict[str, dict]] = {}
    for name, per_tool in dict(tools_kwargs or {}).items():
        if per_tool is None:
            continue
        cleaned[name] = {stage: _without_nones(value) for stage, value in dict(per_tool).items() if value is not None}
    return cleaned


def _without_nones(value: Any) -> dict:
    return {k: v for k, v in dict(value).items() if v is not None}


def _decode_arguments(arguments: str) -> Optional[dict]:
    try:
        decoded = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return None
    return decoded if isinstance(decoded, dict) else None


def _as_list(value: Any) -> list:
    """verl's `ToolResponse.image` is one image or a list of them."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _numeric(metrics: Any) -> dict[str, float]:
    items: Iterable = dict(metrics or {}).items()
    return {str(k): float(v) for k, v in items if isinstance(v, (int, float))}


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
