"""`CalculatorTool`: arithmetic for the model, and the reference tool of the `tool_agent` loop.

The expression is parsed with `ast` and only numbers, parentheses and `+ - * / // % **` are
evaluated: no names, calls or attributes, so nothing but arithmetic can run. Exponents and
results are bounded, so `9**9**9` is refused instead of stalling the worker.
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 64
MAX_MAGNITUDE = 1e30

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalculatorError(ValueError):
    """The expression is not plain arithmetic, or its value is out of bounds."""


def evaluate_arithmetic(expression: str) -> int | float:
    """The value of an arithmetic expression such as `2*(3+4) - 1/4`; raises `CalculatorError`
    (or `ZeroDivisionError`) with a message meant for the model."""
    if not isinstance(expression, str) or not expression.strip():
        raise CalculatorError("expression must be a non-empty string such as '2*(3+4)'")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise CalculatorError(f"expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise CalculatorError(f"cannot parse {expression!r} as arithmetic") from None
    return _evaluate(tree.body)


def _evaluate(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return _bounded(node.value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise CalculatorError(f"exponent {right} is larger than {MAX_EXPONENT}")
        return _bounded(_BINARY[type(node.op)](left, right))
    raise CalculatorError(f"only numbers, parentheses and + - * / // % ** are allowed, not {ast.unparse(node)!r}")


def _bounded(value: int | float | complex) -> int | float:
    if isinstance(value, complex) or (isinstance(value, float) and not math.isfinite(value)):
        raise CalculatorError("the result is not a finite real number")
    if abs(value) > MAX_MAGNITUDE:
        raise CalculatorError(f"the result is larger than {MAX_MAGNITUDE:g}")
    return value


def format_number(value: int | float) -> str:
    """Integers (and integral floats) without a decimal point; other floats to 10 significant digits."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return str(value) if isinstance(value, int) else f"{value:.10g}"


class CalculatorTool(BaseTool):
    """`calculator(expression)`: evaluates arithmetic and answers with the number.

    It also shows the whole tool lifecycle: `create(create_kwargs={"ground_truth": ...})` (from a
    row's `tools_kwargs`) remembers the expected value, `execute` records each result, and
    `calc_reward` is 1.0 when some result equalled the ground truth (the model computed the right
    thing), else 0.0; `release` forgets the trajectory.
    """

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self._instances: dict[str, dict[str, Any]] = {}

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "Evaluate an arithmetic expression with + - * / // % ** and parentheses.",
                    "parameters": {
                        "type": "object",
                        "properties": {"expression": {"type": "string", "description": "for example 2*(3+4)"}},
                        "required": ["expression"],
                    },
                },
            }
        )

    async def create(self, instance_id: Optional[str] = None, **kwargs: Any) -> str:
        instance_id = await super().create(instance_id)
        ground_truth = (kwargs.get("create_kwargs") or {}).get("ground_truth")
        self._instances[instance_id] = {"ground_truth": _canonical(ground_truth), "results": []}
        return instance_id

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        if "expression" not in parameters:
            raise CalculatorError("missing argument 'expression'")
        result = format_number(evaluate_arithmetic(parameters["expression"]))
        if instance_id in self._instances:
            self._instances[instance_id]["results"].append(result)
        return ToolResponse(text=result), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        state = self._instances.get(instance_id)
        if state is None or state["ground_truth"] is None:
            return 0.0
        return float(state["ground_truth"] in state["results"])

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.pop(instance_id, None)


def _canonical(value: Any) -> Optional[str]:
    """A ground truth as `format_number` would print it ("14.0" -> "14"); None stays None."""
    if value is None:
        return None
    for parse in (int, float):  # int first: a float would round a large integer
        try:
            return format_number(parse(value))
        except (TypeError, ValueError):
            continue
    return str(value)
