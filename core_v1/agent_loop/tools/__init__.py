"""Tools for the `tool_agent` loop (verl's `verl.tools` surface under our package names).

- `BaseTool` (base_tool.py): the create / execute / calc_reward / release contract;
- `schemas`: OpenAI function-calling records and `ToolResponse`;
- `tool_registry.initialize_tools_from_config`: tools from verl's tool YAML format;
- `function_tool.function_tool`: a plain (sync or async) function as a tool (import the decorator
  from `core_v1.agent_loop.tools.function_tool`: the package keeps that name for the module, as verl does);
- `CalculatorTool` (calculator.py): safe arithmetic, the reference tool;
- `Gsm8kTool` (gsm8k.py): scores a submitted GSM8K answer (verl's `verl.tools.gsm8k_tool.Gsm8kTool`);
- `Geo3kTool` (geo3k.py): grades a submitted Geometry3K answer (verl's `verl.tools.geo3k_tool.Geo3kTool`);
- `ImageZoomInTool` (image_zoom.py): shows the model a region of the row's image (verl's
  `verl.tools.image_zoom_in_tool.ImageZoomInTool`; a vision-language policy);
- `SearchTool` (search.py): queries a retrieval HTTP service (verl's `verl.tools.search_tool.SearchTool`);
- `SandboxFusionTool` (sandbox_fusion.py): runs code in a Sandbox Fusion service (verl's
  `verl.tools.sandbox_fusion_tools.SandboxFusionTool`, which ReTool subclasses);
- `service.CallPool` / `post_json`: the thread pool, rate limit and HTTP POST those two share;
- `ToolSession` / `ToolLimits` (session.py): one trajectory's calls, run with limits.
"""

from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.calculator import CalculatorError, CalculatorTool, evaluate_arithmetic
from core_v1.agent_loop.tools.function_tool import (
    FUNCTION_TOOL_REGISTRY,
    FunctionTool,
    load_function_tools_from_path,
    normalize_function_tool_return,
)
from core_v1.agent_loop.tools.schemas import (
    OpenAIFunctionCallSchema,
    OpenAIFunctionParametersSchema,
    OpenAIFunctionParsedSchema,
    OpenAIFunctionPropertySchema,
    OpenAIFunctionSchema,
    OpenAIFunctionToolCall,
    OpenAIFunctionToolSchema,
    ToolResponse,
)
from core_v1.agent_loop.tools.session import ToolCallResult, ToolLimits, ToolSession
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config

__all__ = [
    "BaseTool",
    "CalculatorError",
    "CalculatorTool",
    "FUNCTION_TOOL_REGISTRY",
    "FunctionTool",
    "OpenAIFunctionCallSchema",
    "OpenAIFunctionParametersSchema",
    "OpenAIFunctionParsedSchema",
    "OpenAIFunctionPropertySchema",
    "OpenAIFunctionSchema",
    "OpenAIFunctionToolCall",
    "OpenAIFunctionToolSchema",
    "ToolCallResult",
    "ToolConfigError",
    "ToolLimits",
    "ToolResponse",
    "ToolSession",
    "evaluate_arithmetic",
    "initialize_tools_from_config",
    "load_function_tools_from_path",
    "normalize_function_tool_return",
]
