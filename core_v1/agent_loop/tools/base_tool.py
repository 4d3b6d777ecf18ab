"""`BaseTool`: the contract every tool of the `tool_agent` loop keeps (verl's, unchanged).

Lifecycle, per trajectory: the loop calls `create(create_kwargs=...)` the first time the model
calls the tool, `execute(instance_id, arguments)` for every call, and at the end
`calc_reward(instance_id)` then `release(instance_id)`. One tool object serves every trajectory
of a worker process at once, so per-trajectory state belongs in a dict keyed by `instance_id`.

`execute` returns `(response, step_reward, metrics)`: the response is a `ToolResponse` or a plain
string; the loop sums step rewards and `calc_reward` results into the trajectory's extra fields.
An exception raised by any method becomes an error message to the model, never a crash.

A subclass whose `execute` runs code we did not write (the model's, a user's) sets
`runs_code = True`: each `execute` then runs in the tool sandbox (`tools/sandbox.py`), in a worker
process on a copy of the tool built there from its `config` and `tool_schema`. State that
`execute` changes stays in that copy; keep per-trajectory state in `create` / `calc_reward` /
`release`, which run here. `config["sandbox_env"]` lists environment variables it may see.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Optional
from uuid import uuid4

from core_v1.agent_loop.tools import sandbox
from core_v1.agent_loop.tools.errors import ToolConfigError
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

__all__ = ["BaseTool", "ToolConfigError"]


class BaseTool:
    """Base class of tools. Subclasses override `execute` (and the other hooks when they keep state).

    `config` is the tool's `config:` mapping from the tool YAML; `config["timeout_s"]`, when set,
    overrides the loop's per-call timeout for this tool. `tool_schema` may be omitted by a
    subclass that defines `default_tool_schema()`.
    """

    runs_code: ClassVar[bool] = False
    """Whether `execute` runs code we did not write, so that it must run in the sandbox."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.runs_code and not getattr(cls.execute, "runs_in_sandbox", False):  # its own or an inherited one
            cls.execute = _in_sandbox(cls.execute)

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        self.config = dict(config or {})
        if isinstance(tool_schema, dict):
            tool_schema = OpenAIFunctionToolSchema.model_validate(tool_schema)
        schema = tool_schema or self.default_tool_schema()
        if schema is None:
            raise ToolConfigError(
                f"{type(self).__name__} has no tool schema: give one under 'tool_schema:' in "
                "the tool config YAML, or define default_tool_schema() on the class"
            )
        self.tool_schema: OpenAIFunctionToolSchema = schema
        self.name: str = schema.function.name

    def default_tool_schema(self) -> Optional[OpenAIFunctionToolSchema]:
        """The schema used when the config gives none; None means a schema is required."""
        return None

    def get_openai_tool_schema(self) -> OpenAIFunctionToolSchema:
        return self.tool_schema

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> str:
        """Start this tool's state for one trajectory; returns the instance id to pass back.
        `kwargs["create_kwargs"]` holds the row's `tools_kwargs[<tool name>]["create_kwargs"]`."""
        return instance_id if instance_id is not None else uuid4().hex

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse | str, float, dict]:
        """Run one call with the model's decoded arguments; returns (response, step reward, metrics)."""
        return ToolResponse(text="Updated the tool state."), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        """The reward this trajectory earned from the tool, asked once at the end."""
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        """Free whatever `create` set up for this trajectory."""


def _in_sandbox(execute: Any) -> Any:
    """`execute` sent to the sandbox's worker, unless the run disabled the sandbox or this process
    is that worker already."""

    @functools.wraps(execute)
    async def sandboxed(self: BaseTool, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> Any:
        box = sandbox.active_sandbox()
        if box is None:
            return await execute(self, instance_id, parameters, **kwargs)
        return await box.execute_tool(self, instance_id, parameters, kwargs)

    sandboxed.runs_in_sandbox = True
    return sandboxed
