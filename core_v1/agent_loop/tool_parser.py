"""Tool-call parsers: find the tool calls in a model's generated tokens.

`actor_rollout_ref.rollout.multi_turn.format` names the parser. Built in: `hermes`, the format of
Qwen2.5/Qwen3 and Hermes models:

    <tool_call>{"name": "calculator", "arguments": {"expression": "2*(3+4)"}}</tool_call>

Add a format with a subclass and one decorator (`@ToolParser.register("my_format")`, verl's
spelling). A call that is present but cannot be read (bad JSON, no name) is returned with an
`error`, so the loop can tell the model what went wrong instead of silently ignoring it.
"""

from __future__ import annotations

import abc
import json
import re
from typing import Any, Optional

from pydantic import BaseModel

from core_v1.utils.registry import Registry


class FunctionCall(BaseModel):
    """One tool call as the model wrote it."""

    name: str
    """The function the model called ("" when the call could not be parsed)."""
    arguments: str
    """The arguments as JSON text (models do not always write valid JSON; the loop checks)."""
    error: Optional[str] = None
    """Why the call could not be parsed; None for a readable call."""


class ToolParser(abc.ABC):
    """Turns generated token ids into (text without the calls, calls)."""

    def __init__(self, tokenizer: Any):
        self.tokenizer = tokenizer

    @abc.abstractmethod
    async def extract_tool_calls(self, responses_ids: list[int]) -> tuple[str, list[FunctionCall]]:
        """The response's text with the tool-call markup removed, and the calls in order."""

    @classmethod
    def register(cls, name: str):
        """Class decorator: make a parser selectable as `multi_turn.format=<name>`."""
        return TOOL_PARSERS.register(name)

    @classmethod
    def get_tool_parser(cls, name: str, tokenizer: Any) -> "ToolParser":
        return TOOL_PARSERS.get(name)(tokenizer)


TOOL_PARSERS: Registry[type[ToolParser]] = Registry(
    "tool-call format", base=ToolParser, config_key="actor_rollout_ref.rollout.multi_turn.format"
)


@ToolParser.register("hermes")
class HermesToolParser(ToolParser):
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, any number per response. An
    opening tag without its closing tag (generation cut off) is not a call."""

    START, END = "<tool_call>", "</tool_call>"
    _CALL = re.compile(re.escape(START) + r"(.*?)" + re.escape(END), re.DOTALL)

    async def extract_tool_calls(self, responses_ids: list[int]) -> tuple[str, list[FunctionCall]]:
        text = self.tokenizer.decode(list(responses_ids), skip_special_tokens=False)
        if self.START not in text or self.END not in text:
            return text, []
        calls = [parse_json_call(body) for body in self._CALL.findall(text)]
        return self._CALL.sub("", text), calls


def parse_json_call(body: str) -> FunctionCall:
    """A `{"name": ..., "arguments": ...}` object (arguments as an object or as JSON text)."""
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as error:
        return FunctionCall(name="", arguments="{}", error=f"the tool call is not valid JSON ({error.msg})")
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str) or not payload["name"]:
        return FunctionCall(
            name="", arguments="{}", error='a tool call must be a JSON object {"name": ..., "arguments": {...}}'
        )
    arguments = payload.get("arguments", {})
    text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return FunctionCall(name=payload["name"], arguments=text)
