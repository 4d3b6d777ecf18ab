"""The Geometry3K tool that verl's multi-turn geo3k example names, loaded from a tool YAML in that
example's shape by the real loader: right, equivalent and wrong answers, the whole answer graded
(a boxed or think-formatted answer earns no format credit), step rewards, and state released."""

from __future__ import annotations

import asyncio

import pytest

from core_v1.agent_loop.tools.geo3k import NO_IMPROVEMENT_PENALTY, Geo3kTool
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config

# The shape of verl's geo3k_tool_config.yaml (schema text written here).
TOOL_YAML = """\
tools:
  - class_name: "core_v1.agent_loop.tools.geo3k.Geo3kTool"
    config:
      type: native
    tool_schema:
      type: "function"
      function:
        name: "calc_geo3k_reward"
        description: "Score the answer to a geometry problem"
        parameters:
          type: "object"
          properties:
            answer:
              type: "string"
              description: "The answer, digits only"
          required: ["answer"]
"""


def submit(tool: Geo3kTool, ground_truth, answers: list) -> tuple[list[tuple[str, float]], float, str]:
    """Each call's (text, step reward), the final reward and the instance id (released by then)."""

    async def trajectory():
        instance = await tool.create(create_kwargs={"ground_truth": ground_truth})
        calls = []
        for answer in answers:
            response, step_reward, metrics = await tool.execute(instance, {"answer": answer})
            assert metrics == {}
            calls.append((response.text, step_reward))
        final = await tool.calc_reward(instance)
        await tool.release(instance)
        return calls, final, instance

    return asyncio.run(trajectory())


@pytest.fixture()
def tool(tmp_path) -> Geo3kTool:
    config = tmp_path / "geo3k_tool_config.yaml"
    config.write_text(TOOL_YAML)
    [loaded] = initialize_tools_from_config(config)
    assert isinstance(loaded, Geo3kTool) and loaded.name == "calc_geo3k_reward"
    assert loaded.get_openai_tool_schema().function.parameters.required == ["answer"]
    return loaded


def test_a_wrong_then_right_answer_scores_0_then_1_and_a_resubmission_costs(tool):
    calls, final, instance = submit(tool, "12", ["13", "12", "12"])
    assert [reward for _, reward in calls] == [NO_IMPROVEMENT_PENALTY, 0.0, NO_IMPROVEMENT_PENALTY]
    assert calls[0][0] == "parsed answer='13' score=0.0" and calls[1][0] == "parsed answer='12' score=1.0"
    assert final == 1.0 and instance not in tool._trajectories


@pytest.mark.parametrize(
    "answer, truth", [("12.0", "12"), ("\\frac{1}{2}", "0.5"), ("2\\sqrt{3}", "2\\sqrt{3}"), ("x = 7", "7"), (7, "7")]
)
def test_equivalent_forms_of_the_answer_are_right(tool, answer, truth):
    calls, final, _ = submit(tool, truth, [answer])
    assert calls[0][1] == 0.0 and final == 1.0


@pytest.mark.parametrize("answer", ["\\boxed{12}", "<think>easy</think> \\boxed{12}", "", "twelve"])
def test_the_whole_answer_is_graded_without_format_credit(tool, answer):
    # verl calls the scorer with use_boxed=False and format_score=0: a boxed answer is not unwrapped,
    # and the think-then-box shape earns nothing on its own.
    calls, final, _ = submit(tool, "12", [answer])
    assert final == 0.0 and calls[0][1] == NO_IMPROVEMENT_PENALTY


def test_the_ground_truth_can_come_as_a_keyword_and_is_needed_for_a_score():
    tool = Geo3kTool()  # the default schema is verl's tool name and argument

    async def trajectories():
        with_truth = await tool.create(ground_truth="30")
        without = await tool.create()
        await tool.execute(with_truth, {"answer": "30"})
        await tool.execute(without, {"answer": "30"})
        return await tool.calc_reward(with_truth), await tool.calc_reward(without)

    assert tool.name == "calc_geo3k_reward"
    assert asyncio.run(trajectories()) == (1.0, 0.0)
