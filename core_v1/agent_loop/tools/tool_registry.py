"""Tools from a YAML file in verl's format (`actor_rollout_ref.rollout.multi_turn.tool_config_path`):

    tools:
      - class_name: core_v1.agent_loop.tools.CalculatorTool    # a BaseTool subclass ...
        config:
          type: native          # the only type here ("mcp" tools are not built in)
          timeout_s: 5          # optional: this tool's per-call timeout
        tool_schema:            # optional when the class defines default_tool_schema()
          type: function
          function: {name: calculator, description: ..., parameters: {...}}
      - class_name: my_tools.get_weather    # ... or a function decorated with @function_tool

`class_name` is imported as `module.attribute`; the YAML file's own folder is searched first, so
a module saved next to the YAML is found without installing it. Tool names must be unique.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import OmegaConf
from pydantic import ValidationError

from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.function_tool import FunctionTool, function_tool_for
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema

SUPPORTED_TOOL_TYPES = ("native",)


def initialize_tools_from_config(tools_config_file: str | Path) -> list[BaseTool]:
    """New tool objects for every entry of the file, in order."""
    path = Path(tools_config_file).expanduser()
    entries = read_class_list(
        path, "tools", "tool config", "actor_rollout_ref.rollout.multi_turn.tool_config_path", ToolConfigError
    )
    folder = path.resolve().parent
    tools = [_build_tool(entry, f"{path}: tools[{i}]", folder) for i, entry in enumerate(entries)]
    check_unique_names(tools, str(path))
    return tools


def read_class_list(path: Path, top_key: str, what: str, config_key: str, error: type[Exception]) -> list:
    """The `top_key:` list of `- class_name: ...` entries of a YAML file in verl's format (tools,
    interactions); a missing file, bad YAML or another shape raises `error` with one line."""
    if not path.is_file():
        raise error(f"{what} {str(path)!r} does not exist ({config_key})")
    try:
        document = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as cause:  # YAML syntax and interpolation errors come in several types
        raise error(f"{path}: cannot read as YAML ({cause})") from None
    entries = document.get(top_key) if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise error(f"{path}: expected a top-level '{top_key}:' list of '- class_name: module.Class' entries")
    return entries


def row_kwargs(row: dict[str, Any], column: str) -> dict[str, Any]:
    """A row's `column` dict (`tools_kwargs`, `interaction_kwargs`): the column itself, or
    `extra_info[column]`, where verl's data puts it."""
    value = row.get(column)
    if value is None:
        value = (row.get("extra_info") or {}).get(column)
    return dict(value or {})


def check_unique_names(tools: list[BaseTool], where: str) -> None:
    names = [tool.name for tool in tools]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ToolConfigError(
            f"{where}: tool name(s) {repeated} are defined more than once; each tool needs its own name"
        )


def _build_tool(entry: Any, where: str, folder: Path) -> BaseTool:
    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        raise ToolConfigError(f"{where} needs 'class_name: module.Class', got {entry!r}")
    config = dict(entry.get("config") or {})
    tool_type = config.get("type", "native")
    if tool_type not in SUPPORTED_TOOL_TYPES:
        raise ToolConfigError(
            f"{where}: tool type {tool_type!r} is not supported (only 'native'); "
            "wrap the service in a BaseTool subclass"
        )
    target = get_tool_class(entry["class_name"], where, relative_to=folder)
    schema = _parse_schema(entry.get("tool_schema"), where)
    if isinstance(target, type) and issubclass(target, BaseTool):
        try:
            return target(config=config, tool_schema=schema)
        except ToolConfigError as error:
            raise ToolConfigError(f"{where}: {error}") from None
    function = target if isinstance(target, FunctionTool) else function_tool_for(target)
    if function is not None:
        return function
    raise ToolConfigError(
        f"{where}: {entry['class_name']!r} is neither a BaseTool subclass nor a function decorated with @function_tool"
    )


def _parse_schema(schema: Any, where: str) -> OpenAIFunctionToolSchema | None:
    if schema is None:
        return None
    try:
        return OpenAIFunctionToolSchema.model_validate(schema)
    except ValidationError as error:
        first = error.errors()[0]
        location = ".".join(str(part) for part in first["loc"])
        raise ToolConfigError(f"{where}: tool_schema.{location}: {first['msg']}") from None


def get_tool_class(class_name: str, where: str = "tool config", relative_to: Path | None = None) -> Any:
    """Import `module.attribute` through the one loader; a module beside the tool config
    (`relative_to`) is loaded from that file."""
    from core_v1.utils.loading import PluginError, load_target

    module_name, _, attribute = class_name.rpartition(".")
    if not module_name and ":" not in class_name:
        raise ToolConfigError(f"{where}: class_name {class_name!r} must be 'module.Class'")
    try:
        return load_target(class_name, relative_to=relative_to or Path.cwd())
    except PluginError as error:
        raise ToolConfigError(f"{where}: {error}") from None
