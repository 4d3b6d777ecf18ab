"""Plain Python functions as tools: `@function_tool` (verl's `verl.tools.utils.function_tool`).

    from core_v1.agent_loop.tools.function_tool import function_tool

    @function_tool("get_weather")
    def get_weather(city: str) -> dict:
        '''Get the current weather for a city.

        Args:
            city: the city to look up.
        '''
        return {"temperature_c": 17.3}

The schema the model sees is inferred from the type hints and the Google-style docstring
(`transformers.utils.get_json_schema`), or given with `schema=`. The decorator returns the
function unchanged and records a `FunctionTool` in `FUNCTION_TOOL_REGISTRY`; the `tool_agent`
loop finds it through a tool config entry (`class_name: my_tools.get_weather`) or a file loaded
with `load_function_tools_from_path`. The tool loop runs it in the tool sandbox
(`tools/sandbox.py`); its worker sees only the environment variables named in `env=[...]`
besides `PATH`, `LANG`, `HOME` and `TMPDIR`; so does `FunctionTool.execute` called by any other loop. Called through
`FunctionTool.call`, a sync function runs in a worker thread so it cannot stall the event loop; an
async one is awaited.

A function may return a `ToolResponse`, a string, a dict or list (sent as JSON), any other value
(sent as `str(value)`), or a tuple `(response, reward)` / `(response, reward, metrics)`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from pathlib import Path
from typing import Any, Callable, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.sandbox import FALLBACK_CALL_TIMEOUT_S, active_sandbox, pass_environment
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

FUNCTION_TOOL_REGISTRY: dict[str, "FunctionTool"] = {}
"""Every `@function_tool` of this process, by tool name."""

_LOADED_FUNCTION_TOOL_PATHS: dict[str, list["FunctionTool"]] = {}


class FunctionTool(BaseTool):
    """A `BaseTool` that calls one function with the model's arguments as keywords. Stateless:
    `create`/`release` keep nothing, so one object serves every trajectory."""

    def __init__(self, name: str, fn: Callable[..., Any], tool_schema: OpenAIFunctionToolSchema):
        super().__init__(config={}, tool_schema=tool_schema)
        self.name = name
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn)

    async def call(self, parameters: dict[str, Any]) -> Any:
        """The function's raw return value for these arguments."""
        if self.is_async:
            return await self.fn(**parameters)
        return await asyncio.to_thread(self.fn, **parameters)

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        """The call in the run's sandbox (the tool loop's `ToolSession` sends it there itself; this
        keeps a custom loop that calls `execute` from running the function unsandboxed)."""
        box = active_sandbox()
        if box is not None:
            timeout_s = float(self.config.get("timeout_s") or FALLBACK_CALL_TIMEOUT_S)
            return normalize_function_tool_return(await box.call(self.fn, parameters, timeout_s))
        return normalize_function_tool_return(await self.call(parameters))

    def __repr__(self) -> str:
        return f"FunctionTool({self.name!r}, {self.fn.__module__}.{self.fn.__qualname__})"


def function_tool(
    name: str | Callable[..., Any] | None = None,
    *,
    schema: OpenAIFunctionToolSchema | dict | None = None,
    env: tuple | list = (),
):
    """Register a function as a tool: `@function_tool`, `@function_tool("name")` or
    `@function_tool("name", schema={...}, env=["API_KEY"])` (`env`: the driver's environment
    variables its sandbox worker may see). Returns the function itself, still directly callable."""

    def register(fn: Callable[..., Any], tool_name: Optional[str]) -> Callable[..., Any]:
        tool_name = tool_name or fn.__name__
        if isinstance(schema, dict):
            built = OpenAIFunctionToolSchema.model_validate(schema)
        else:
            built = schema or schema_from_function(fn, tool_name)
        existing = FUNCTION_TOOL_REGISTRY.get(tool_name)
        if existing is not None and not _same_function(existing.fn, fn):
            raise ToolConfigError(
                f"function tool {tool_name!r} is already registered to "
                f"{existing.fn.__module__}.{existing.fn.__qualname__}; give "
                f"{fn.__module__}.{fn.__qualname__} another name: @function_tool('other_name')"
            )
        FUNCTION_TOOL_REGISTRY[tool_name] = FunctionTool(tool_name, fn, built)
        pass_environment(fn, tuple(env))
        return fn

    if callable(name):  # bare @function_tool
        return register(name, None)
    return lambda fn: register(fn, name)


def schema_from_function(fn: Callable[..., Any], tool_name: str) -> OpenAIFunctionToolSchema:
    """The OpenAI schema of `fn`, from its type hints and Google-style docstring."""
    from transformers.utils import get_json_schema

    where = f"@function_tool {tool_name!r} ({fn.__module__}.{fn.__qualname__})"
    variadic = [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if variadic:
        raise ToolConfigError(
            f"{where} takes *{variadic[0]}-style arguments, which a tool schema cannot "
            "describe; list the arguments explicitly"
        )
    try:
        raw = get_json_schema(fn)
    except Exception as error:  # transformers raises its own parsing exception types
        raise ToolConfigError(
            f"{where}: cannot infer its schema ({error}); add type hints and an 'Args:' "
            "docstring section, or pass schema={...}"
        ) from None
    raw["function"]["name"] = tool_name
    return OpenAIFunctionToolSchema.model_validate(raw)


def get_function_tool(name: str) -> FunctionTool:
    try:
        return FUNCTION_TOOL_REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(FUNCTION_TOOL_REGISTRY)) or "(none)"
        raise ToolConfigError(
            f"no function tool named {name!r} (known: {known}); import the file that "
            "defines it, or load it with load_function_tools_from_path"
        ) from None


def function_tool_for(obj: Any) -> Optional[FunctionTool]:
    """The registered `FunctionTool` wrapping function `obj`, if any."""
    return next((tool for tool in FUNCTION_TOOL_REGISTRY.values() if tool.fn is obj), None)


def load_function_tools_from_path(path: str | Path) -> list[FunctionTool]:
    """Run a Python file once per process and return the `@function_tool`s it registered."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise ToolConfigError(f"function tool file {str(path)!r} does not exist")
    if str(file) in _LOADED_FUNCTION_TOOL_PATHS:
        return _LOADED_FUNCTION_TOOL_PATHS[str(file)]
    before = dict(FUNCTION_TOOL_REGISTRY)
    from core_v1.utils.loading import load_file

    load_file(file, error=ToolConfigError)  # the one loader: a stable module name in every process
    tools = [tool for name, tool in FUNCTION_TOOL_REGISTRY.items() if before.get(name) is not tool]
    if not tools:
        raise ToolConfigError(f"{file} registers no tools; decorate its functions with @function_tool")
    _LOADED_FUNCTION_TOOL_PATHS[str(file)] = tools
    return tools


def normalize_function_tool_return(ret: Any) -> tuple[ToolResponse, float, dict]:
    """A function's return value as `(ToolResponse, reward, metrics)` (see the module docstring)."""
    if isinstance(ret, tuple):
        if not 1 <= len(ret) <= 3:
            raise TypeError(
                f"a function tool may return (response,), (response, reward) or "
                f"(response, reward, metrics), got a tuple of {len(ret)}"
            )
        reward = float(ret[1]) if len(ret) > 1 and ret[1] is not None else 0.0
        metrics = dict(ret[2]) if len(ret) > 2 and ret[2] is not None else {}
        return _as_response(ret[0]), reward, metrics
    return _as_response(ret), 0.0, {}


def _as_response(value: Any) -> ToolResponse:
    if isinstance(value, ToolResponse):
        return value
    if isinstance(value, str):
        return ToolResponse(text=value)
    if isinstance(value, (dict, list)):
        return ToolResponse(text=json.dumps(value, ensure_ascii=False))
    return ToolResponse(text=str(value))


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # The same file run twice (imported by name, then loaded by path) defines an equal function anew.
    return a is b or _definition_site(a) == _definition_site(b)


def _definition_site(fn: Callable[..., Any]) -> tuple:
    code = getattr(fn, "__code__", None)
    return getattr(fn, "__qualname__", None), getattr(code, "co_filename", None), getattr(code, "co_firstlineno", None)
