"""Typed records of tool use, in OpenAI's function-calling shapes (the names verl's tools use).

A tool describes itself with an `OpenAIFunctionToolSchema` (what the chat template shows the
model), receives its arguments as a dict, and answers with a `ToolResponse`. The schema models
keep unknown JSON-schema keywords (`items`, `default`, `minimum`, ...) instead of dropping them,
so a schema read from YAML reaches the chat template whole.
"""

from __future__ import annotations

import json
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class OpenAIFunctionPropertySchema(BaseModel):
    """One argument of a function: its JSON type, a description, optionally the allowed values."""

    model_config = ConfigDict(extra="allow")

    type: str
    description: Optional[str] = None
    enum: Optional[list[str]] = None


class OpenAIFunctionParametersSchema(BaseModel):
    """All arguments of a function (`type` is "object" for every OpenAI function)."""

    model_config = ConfigDict(extra="allow")

    type: str = "object"
    properties: dict[str, OpenAIFunctionPropertySchema] = Field(default_factory=dict)
    required: list[str] = Field(default_factory=list)


class OpenAIFunctionSchema(BaseModel):
    """The function a tool exposes: the name the model calls it by, and what it does."""

    name: str
    description: str = ""
    parameters: OpenAIFunctionParametersSchema = Field(default_factory=OpenAIFunctionParametersSchema)
    strict: bool = False


class OpenAIFunctionToolSchema(BaseModel):
    """A tool as OpenAI's `tools=[...]` list and Hugging Face chat templates expect it."""

    type: str = "function"
    function: OpenAIFunctionSchema


class OpenAIFunctionParsedSchema(BaseModel):
    """A call as the model wrote it: `arguments` is the raw JSON text."""

    name: str
    arguments: str


class OpenAIFunctionCallSchema(BaseModel):
    """A call with its arguments decoded to a dict."""

    name: str
    arguments: dict[str, Any]

    @staticmethod
    def from_openai_function_parsed_schema(
        parsed_schema: OpenAIFunctionParsedSchema,
    ) -> tuple["OpenAIFunctionCallSchema", bool]:
        """Decode the arguments; returns the call and whether decoding failed (then `arguments` is {})."""
        try:
            arguments = json.loads(parsed_schema.arguments)
        except json.JSONDecodeError:
            arguments = None
        failed = not isinstance(arguments, dict)
        return OpenAIFunctionCallSchema(name=parsed_schema.name, arguments={} if failed else arguments), failed


class OpenAIFunctionToolCall(BaseModel):
    """One concrete invocation, with the id OpenAI-style APIs give it."""

    id: str
    type: Literal["function"] = "function"
    function: OpenAIFunctionCallSchema


class ToolResponse(BaseModel):
    """What a tool tells the model. `text` is shown as the tool message; `image` (one image or a
    list: PIL images, paths, or `{"bytes"|"path": ...}` dicts) is shown in the same message, before
    the text, when the policy is a vision-language model. `video` is verl's field; the built-in loop
    answers it, or an image for a text model, with an error message."""

    text: Optional[str] = None
    image: Optional[Any] = None
    video: Optional[Any] = None
