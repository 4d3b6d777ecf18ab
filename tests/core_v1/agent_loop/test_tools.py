"""The tools package: the calculator, verl's tool YAML, @function_tool, and ToolSession's limits."""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time

import pytest
from PIL import Image

from core_v1.agent_loop.tool_parser import FunctionCall, HermesToolParser, ToolParser
from core_v1.agent_loop.tools import (
    FUNCTION_TOOL_REGISTRY,
    BaseTool,
    CalculatorError,
    CalculatorTool,
    FunctionTool,
    OpenAIFunctionToolSchema,
    ToolConfigError,
    ToolLimits,
    ToolResponse,
    ToolSession,
    evaluate_arithmetic,
    initialize_tools_from_config,
    load_function_tools_from_path,
    normalize_function_tool_return,
)
from core_v1.agent_loop.tools import function_tool as function_tool_module
from core_v1.agent_loop.tools.function_tool import function_tool
from core_v1.agent_loop.tools.calculator import format_number
from core_v1.agent_loop.tools.sandbox import SandboxLimits, sandbox_for
from core_v1.agent_loop.tools.session import TRUNCATION_MARK, clean_tools_kwargs, truncate
from core_v1.utils.registry import UnknownNameError


def run(coro):
    return asyncio.run(coro)


def schema(name: str, **properties: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t} for k, t in properties.items()},
                "required": list(properties),
            },
        },
    }


@pytest.fixture(autouse=True)
def clean_function_tools():
    """@function_tool registers process-wide; each test starts from the registry it found."""
    saved, loaded = dict(FUNCTION_TOOL_REGISTRY), dict(function_tool_module._LOADED_FUNCTION_TOOL_PATHS)
    yield
    FUNCTION_TOOL_REGISTRY.clear()
    FUNCTION_TOOL_REGISTRY.update(saved)
    function_tool_module._LOADED_FUNCTION_TOOL_PATHS.clear()
    function_tool_module._LOADED_FUNCTION_TOOL_PATHS.update(loaded)


# ------------------------------------------------------------------------------------ calculator


@pytest.mark.parametrize(
    "expression, value",
    [
        ("2*(3+4)", 14),
        ("7/2", 3.5),
        ("7//2", 3),
        ("-3**2", -9),
        ("2**-1", 0.5),
        ("10 % 4", 2),
        (" 1.5+1.5 ", 3.0),
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate_arithmetic(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('true')", "only numbers"),
        ("x+1", "only numbers"),
        ("(1).real", "only numbers"),
        ("9**9**9", "exponent"),
        ("10.0**40", "larger than"),
        ("1+", "cannot parse"),
        ("", "non-empty"),
        ("1+" * 150 + "1", "longer than"),
        ("True+1", "only numbers"),
        ("(-8)**0.5", "finite real"),
    ],
)
def test_calculator_refuses_anything_but_bounded_arithmetic(expression, message):
    with pytest.raises(CalculatorError, match=message):
        evaluate_arithmetic(expression)


def test_calculator_number_format():
    assert [format_number(v) for v in (14, 14.0, 3.5, 1 / 3)] == ["14", "14", "3.5", "0.3333333333"]


def test_calculator_tool_lifecycle_and_reward():
    tool = CalculatorTool()
    assert tool.name == "calculator" and tool.tool_schema.function.parameters.required == ["expression"]

    async def trajectory(ground_truth, expression):
        instance = await tool.create(create_kwargs={"ground_truth": ground_truth})
        response, step_reward, _ = await tool.execute(instance, {"expression": expression})
        reward = await tool.calc_reward(instance)
        await tool.release(instance)
        return response.text, step_reward, reward

    assert run(trajectory("14.0", "2*(3+4)")) == ("14", 0.0, 1.0)
    assert run(trajectory("15", "2*(3+4)")) == ("14", 0.0, 0.0)
    assert tool._instances == {}  # released
    with pytest.raises(ZeroDivisionError):
        run(tool.execute("any", {"expression": "1/0"}))
    with pytest.raises(CalculatorError, match="missing argument"):
        run(tool.execute("any", {"expr": "1"}))


# ------------------------------------------------------------------------------------ schemas, YAML


def test_schema_keeps_json_schema_keywords_it_does_not_model():
    raw = schema("search", query_list="array")
    raw["function"]["parameters"]["properties"]["query_list"]["items"] = {"type": "string"}
    dumped = OpenAIFunctionToolSchema.model_validate(raw).model_dump(exclude_none=True)
    assert dumped["function"]["parameters"]["properties"]["query_list"]["items"] == {"type": "string"}


TOOLS_MODULE = '''
from core_v1.agent_loop.tools import BaseTool, ToolResponse
from core_v1.agent_loop.tools.function_tool import function_tool

class Echo(BaseTool):
    async def execute(self, instance_id, parameters, **kwargs):
        return ToolResponse(text=self.config["prefix"] + parameters["text"]), 0.5, {"chars": len(parameters["text"])}

@function_tool("shout")
def shout(text: str) -> str:
    """Upper-case the text.

    Args:
        text: what to shout.
    """
    return text.upper()
'''


def write_yaml(folder, body: str):
    path = folder / "tools.yaml"
    path.write_text(textwrap.dedent(body))
    return path


def test_tool_config_yaml_builds_classes_and_function_tools(tmp_path):
    (tmp_path / "my_yaml_tools.py").write_text(TOOLS_MODULE)  # found next to the YAML
    path = write_yaml(
        tmp_path,
        f"""
        tools:
          - class_name: core_v1.agent_loop.tools.CalculatorTool
            config: {{type: native, timeout_s: 3}}
          - class_name: my_yaml_tools.Echo
            config: {{type: native, prefix: ">"}}
            tool_schema: {schema("echo", text="string")}
          - class_name: my_yaml_tools.shout
        """,
    )
    calculator, echo, shout = initialize_tools_from_config(path)
    assert isinstance(calculator, CalculatorTool) and calculator.config == {"type": "native", "timeout_s": 3}
    assert echo.name == "echo" and run(echo.execute("i", {"text": "hi"}))[0].text == ">hi"
    assert isinstance(shout, FunctionTool) and shout.name == "shout"
    properties = shout.tool_schema.function.parameters.properties
    assert properties["text"].type == "string" and properties["text"].description == "what to shout."


@pytest.mark.parametrize(
    "body, message",
    [
        ("tools: {}", "top-level 'tools:' list"),
        ("tools: [{config: {}}]", "needs 'class_name"),
        ("tools: [{class_name: NoDots}]", "must be 'module.Class'"),
        ("tools: [{class_name: no_such_module_xyz.Tool}]", "cannot import module 'no_such_module_xyz'"),
        ("tools: [{class_name: core_v1.agent_loop.tools.NoSuchTool}]", "has no 'NoSuchTool'"),
        ("tools: [{class_name: json.dumps}]", "neither a BaseTool subclass nor a function decorated"),
        (
            "tools: [{class_name: core_v1.agent_loop.tools.CalculatorTool, config: {type: mcp}}]",
            "'mcp' is not supported",
        ),
        ("tools: [{class_name: core_v1.agent_loop.tools.BaseTool}]", "has no tool schema"),
        (
            "tools: [{class_name: core_v1.agent_loop.tools.BaseTool, tool_schema: {function: {description: x}}}]",
            r"tool_schema.function.name: Field required",
        ),
        (
            "tools: [{class_name: core_v1.agent_loop.tools.CalculatorTool}, "
            "{class_name: core_v1.agent_loop.tools.CalculatorTool}]",
            r"\['calculator'\] are defined more than once",
        ),
        ("tools: [", "cannot read as YAML"),
    ],
)
def test_tool_config_errors_name_the_problem(tmp_path, body, message):
    with pytest.raises(ToolConfigError, match=message):
        initialize_tools_from_config(write_yaml(tmp_path, body))


def test_missing_tool_config_names_the_key(tmp_path):
    with pytest.raises(ToolConfigError, match="multi_turn.tool_config_path"):
        initialize_tools_from_config(tmp_path / "absent.yaml")


# ------------------------------------------------------------------------------------ function tools


def test_function_tool_decorator_infers_schema_and_keeps_the_function():
    @function_tool
    def lookup(city: str, days: int = 1) -> dict:
        """Weather for a city.

        Args:
            city: the city.
            days: how many days ahead.
        """
        return {"city": city, "days": days}

    assert lookup("Paris") == {"city": "Paris", "days": 1}  # still a plain function
    tool = FUNCTION_TOOL_REGISTRY["lookup"]
    dumped = tool.tool_schema.model_dump(exclude_none=True)["function"]
    assert dumped["description"] == "Weather for a city."
    assert dumped["parameters"]["required"] == ["city"]
    assert dumped["parameters"]["properties"]["days"] == {"type": "integer", "description": "how many days ahead."}
    response, reward, metrics = run(tool.execute("i", {"city": "Oslo", "days": 2}))
    assert response.text == '{"city": "Oslo", "days": 2}' and reward == 0.0 and metrics == {}


def test_with_the_sandbox_off_sync_function_tools_run_off_the_event_loop_and_async_ones_on_it():
    threads = {}  # filled in this process: with the sandbox on, these nested functions run in a worker

    @function_tool("where_sync", schema=schema("where_sync"))
    def where_sync():
        threads["sync"] = threading.get_ident()
        return "s"

    @function_tool("where_async", schema=schema("where_async"))
    async def where_async():
        threads["async"] = threading.get_ident()
        return "a", 1.0, {"n": 2}

    async def call_both():
        threads["loop"] = threading.get_ident()
        return (
            await FUNCTION_TOOL_REGISTRY["where_sync"].execute("i", {}),
            await FUNCTION_TOOL_REGISTRY["where_async"].execute("i", {}),
        )

    sandbox_for(SandboxLimits(enable=False))
    try:
        (sync_response, _, _), (async_response, reward, metrics) = run(call_both())
    finally:
        sandbox_for(SandboxLimits())
    assert (sync_response.text, async_response.text, reward, metrics) == ("s", "a", 1.0, {"n": 2})
    assert threads["sync"] != threads["loop"] == threads["async"]


@pytest.mark.parametrize(
    "value, expected",
    [
        ("text", ("text", 0.0, {})),
        ({"a": 1}, ('{"a": 1}', 0.0, {})),
        ([1, 2], ("[1, 2]", 0.0, {})),
        (7, ("7", 0.0, {})),
        (ToolResponse(text="t"), ("t", 0.0, {})),
        (("t", 2), ("t", 2.0, {})),
        (("t", None, {"k": 1}), ("t", 0.0, {"k": 1})),
    ],
)
def test_normalize_function_tool_return(value, expected):
    response, reward, metrics = normalize_function_tool_return(value)
    assert (response.text, reward, metrics) == expected


def test_normalize_refuses_long_tuples():
    with pytest.raises(TypeError, match="tuple of 4"):
        normalize_function_tool_return(("a", 1, {}, "extra"))


def test_function_tool_errors():
    def undocumented(x: str):
        """No Args section."""

    with pytest.raises(ToolConfigError, match="cannot infer its schema"):
        function_tool(undocumented)

    def variadic(*values: int):
        """Sum.

        Args:
            values: numbers.
        """

    with pytest.raises(ToolConfigError, match=r"\*values-style arguments"):
        function_tool(variadic)

    function_tool("taken", schema=schema("taken"))(lambda: "first")
    with pytest.raises(ToolConfigError, match="'taken' is already registered"):
        function_tool("taken", schema=schema("taken"))(lambda: "second")


def test_load_function_tools_from_path_once_per_file(tmp_path):
    path = tmp_path / "fn_tools.py"
    path.write_text(TOOLS_MODULE)
    first = load_function_tools_from_path(path)
    assert [t.name for t in first] == ["shout"]
    assert load_function_tools_from_path(str(path)) is first  # cached: the file runs once
    assert run(first[0].execute("i", {"text": "hey"}))[0].text == "HEY"
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ToolConfigError, match="registers no tools"):
        load_function_tools_from_path(empty)
    with pytest.raises(ToolConfigError, match="does not exist"):
        load_function_tools_from_path(tmp_path / "absent.py")


# ------------------------------------------------------------------------------------ parser


class _CharTokenizer:
    """Token id = character code: decoding is exact, so parser tests need no vocabulary."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def test_hermes_parser_reads_calls_and_reports_unreadable_ones():
    parser = ToolParser.get_tool_parser("hermes", _CharTokenizer())
    assert isinstance(parser, HermesToolParser)
    text = (
        'Let me compute. <tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>'
        '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call><tool_call>{oops}</tool_call>'
        '<tool_call>["no name"]</tool_call>'
    )
    content, calls = run(parser.extract_tool_calls(ids(text)))
    assert content == "Let me compute. "
    assert calls[0] == FunctionCall(name="calculator", arguments='{"expression": "1+1"}')
    assert calls[1] == FunctionCall(name="f", arguments='{"x": 1}')
    assert calls[2].error.startswith("the tool call is not valid JSON")
    assert "must be a JSON object" in calls[3].error


def test_hermes_parser_ignores_an_unclosed_call_and_plain_text():
    parser = HermesToolParser(_CharTokenizer())
    assert run(parser.extract_tool_calls(ids('<tool_call>{"name": "f"'))) == ('<tool_call>{"name": "f"', [])
    assert run(parser.extract_tool_calls(ids("42"))) == ("42", [])


def test_unknown_parser_format_names_the_key():
    with pytest.raises(UnknownNameError, match="multi_turn.format"):
        ToolParser.get_tool_parser("no_such_format", _CharTokenizer())


# ------------------------------------------------------------------------------------ ToolSession


class _Probe(BaseTool):
    """Records its lifecycle and how many executions overlap; `sleep` / `fail` arguments steer it."""

    def __init__(self, name="probe", config=None):
        super().__init__(config, schema(name))
        self.events, self.running, self.peak = [], 0, 0

    async def create(self, instance_id=None, **kwargs):
        self.events.append(("create", kwargs))
        return f"{self.name}-instance", ToolResponse(text="created")  # verl's newer (id, response) shape

    async def execute(self, instance_id, parameters, **kwargs):
        self.events.append(("execute", instance_id, parameters, kwargs))
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            await asyncio.sleep(parameters.get("sleep", 0.01))
            if parameters.get("fail"):
                raise RuntimeError(parameters["fail"])
            return parameters.get("text", "ok"), parameters.get("reward", 0.0), {"calls": 1, "label": "x"}
        finally:
            self.running -= 1

    async def calc_reward(self, instance_id, **kwargs):
        self.events.append(("calc_reward", instance_id, kwargs))
        return 0.25

    async def release(self, instance_id, **kwargs):
        self.events.append(("release", instance_id, kwargs))


def call(name="probe", **arguments) -> FunctionCall:
    import json

    return FunctionCall(name=name, arguments=json.dumps(arguments))


def test_session_lifecycle_kwargs_and_rewards():
    probe = _Probe()
    kwargs = {
        "probe": {
            "create_kwargs": {"ground_truth": "3"},
            "execute_kwargs": {"mode": "fast"},
            "calc_reward_kwargs": {"strict": True},
            "release_kwargs": None,
        },
        "other": None,
    }
    session = ToolSession({"probe": probe}, ToolLimits(max_parallel_calls=4), kwargs)

    async def trajectory():
        first = await session.run_calls([call(text="a", reward=1.0), call(text="b", reward=0.5)])
        second = await session.run_calls([call(text="c")])
        return first + second, await session.close()

    results, final = run(trajectory())
    assert [(r.text, r.status, r.reward) for r in results] == [("a", "ok", 1.0), ("b", "ok", 0.5), ("c", "ok", 0.0)]
    assert results[0].metrics == {"calls": 1.0}  # non-numeric metrics are dropped
    assert final == {"probe": 0.25}
    kinds = [event[0] for event in probe.events]
    assert kinds.count("create") == 1 and kinds[-2:] == ["calc_reward", "release"]  # one instance per trajectory
    assert probe.events[0] == ("create", {"create_kwargs": {"ground_truth": "3"}})
    assert probe.events[1][1:] == ("probe-instance", {"text": "a", "reward": 1.0}, {"mode": "fast"})
    assert probe.events[-2] == ("calc_reward", "probe-instance", {"strict": True})


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_session_runs_at_most_max_parallel_calls_concurrently_and_answers_the_rest():
    probe = _Probe()
    session = ToolSession({"probe": probe}, ToolLimits(max_parallel_calls=2))
    started = time.perf_counter()
    results = run(session.run_calls([call(sleep=0.2, text=str(i)) for i in range(3)]))
    assert time.perf_counter() - started < 0.39  # the two that ran overlapped
    assert probe.peak == 2
    assert [r.status for r in results] == ["ok", "ok", "skipped"]
    assert results[2].text == "Error: not run; at most 2 tool call(s) are run per turn."


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_session_times_out_a_slow_tool_with_a_message():
    slow = _Probe("slow", config={"timeout_s": 0.05})
    session = ToolSession({"slow": slow}, ToolLimits(timeout_s=10))
    started = time.perf_counter()
    [result] = run(session.run_calls([call("slow", sleep=5)]))
    assert time.perf_counter() - started < 1
    assert (result.status, result.text) == ("timeout", "Error: tool 'slow' did not answer within 0.05 s.")


def test_session_turns_every_failure_into_a_message():
    session = ToolSession({"probe": _Probe()}, ToolLimits(max_parallel_calls=5, max_response_length=40))
    results = run(
        session.run_calls(
            [
                call(fail="boom"),
                call("nope"),
                FunctionCall(name="probe", arguments="[1, 2]"),
                FunctionCall(name="", arguments="{}", error="the tool call is not valid JSON (Expecting value)"),
                call(fail="x" * 100),
            ]
        )
    )
    assert [r.status for r in results] == ["error"] * 5
    assert results[0].text == "Error: tool 'probe' failed: boom"
    assert results[1].text == "Error: unknown tool 'nope'. Available tools: probe."
    assert results[2].text == "Error: the arguments of 'probe' must be a JSON object."
    assert results[3].text == "Error: the tool call is not valid JSON (Expecting value)."
    assert TRUNCATION_MARK in results[4].text  # error text obeys the response limit too


def test_session_reports_a_failing_create_for_each_call_and_never_releases_it():
    class FailsToStart(_Probe):
        async def create(self, instance_id=None, **kwargs):
            raise ConnectionError("sandbox unreachable")

    tool = FailsToStart()
    session = ToolSession({"probe": tool}, ToolLimits(max_parallel_calls=2))
    results = run(session.run_calls([call(), call()]))
    assert [r.text for r in results] == ["Error: tool 'probe' failed: sandbox unreachable"] * 2
    assert run(session.close()) == {} and tool.events == []


def _painter(response: ToolResponse):
    class Painter(_Probe):
        async def execute(self, instance_id, parameters, **kwargs):
            return response, 0.0, {}

    return Painter()


@pytest.mark.parametrize(
    "response, takes_images, expected",
    [
        (ToolResponse(text="see", image=[Image.new("RGB", (28, 28))]), False, "the policy is a text model"),
        (ToolResponse(text="see", video=[[Image.new("RGB", (28, 28))]]), True, "video content"),
        (ToolResponse(text="see", image=[{"bytes": b"not a png"}]), True, "cannot be read"),
    ],
)
def test_session_answers_media_it_cannot_show_with_a_message(response, takes_images, expected):
    session = ToolSession({"probe": _painter(response)}, ToolLimits(), takes_images=takes_images)
    [result] = run(session.run_calls([call()]))
    assert result.text.startswith("Error: tool 'probe' returned") and expected in result.text
    assert result.images == []


def test_session_passes_a_tools_images_on_for_a_vision_language_policy():
    red = Image.new("RGB", (28, 28), (255, 0, 0))
    response = ToolResponse(text="zoomed", image=red)  # verl's field takes one image or a list
    [result] = run(ToolSession({"probe": _painter(response)}, ToolLimits(), takes_images=True).run_calls([call()]))
    assert result.text == "zoomed" and [image.tobytes() for image in result.images] == [red.tobytes()]


@pytest.mark.parametrize(
    "side, expected",
    [
        ("left", "abcd" + TRUNCATION_MARK),
        ("right", TRUNCATION_MARK + "ghij"),
        ("middle", "ab" + TRUNCATION_MARK + "ij"),
    ],
)
def test_truncate_sides(side, expected):
    assert truncate("abcdefghij", 4, side) == expected
    assert truncate("abcd", 4, side) == "abcd"


def test_limits_are_checked():
    with pytest.raises(ToolConfigError, match="max_parallel_calls must be an int >= 1"):
        ToolLimits(max_parallel_calls=0)
    with pytest.raises(ToolConfigError, match="tool_response_truncate_side must be one of"):
        ToolLimits(truncate_side="top")
    with pytest.raises(ToolConfigError, match="max_tool_response_length"):
        ToolLimits(max_response_length=0)


def test_clean_tools_kwargs_drops_parquet_nulls():
    assert clean_tools_kwargs({"a": {"create_kwargs": {"x": 1, "y": None}, "execute_kwargs": None}, "b": None}) == {
        "a": {"create_kwargs": {"x": 1}}
    }
    assert clean_tools_kwargs(None) == {}
