"""The GSM8K tool and interaction that verl's multi-turn GSM8K examples name, loaded from YAML by
the real loaders and run: scores, step rewards, when the conversation ends, and state released."""

from __future__ import annotations

import asyncio

from core_v1.agent_loop.interaction import load_interactions
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config


def test_the_tool_scores_each_submitted_answer_and_charges_for_no_improvement(tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text("tools:\n  - class_name: core_v1.agent_loop.tools.gsm8k.Gsm8kTool\n    config: {type: native}\n")
    [tool] = initialize_tools_from_config(config)
    assert tool.name == "calc_gsm8k_reward" and tool.get_openai_tool_schema().function.parameters.required == ["answer"]

    async def trajectory():
        instance = await tool.create(create_kwargs={"ground_truth": "72"})
        wrong = await tool.execute(instance, {"answer": "70"})
        right = await tool.execute(instance, {"answer": "#### 72"})
        again = await tool.execute(instance, {"answer": 72})  # a number, as a model's JSON may give it
        final = await tool.calc_reward(instance)
        await tool.release(instance)
        return wrong, right, again, final, instance

    wrong, right, again, final, instance = asyncio.run(trajectory())
    assert (wrong[1], right[1], again[1]) == (-0.05, 0.0, -0.05)  # no better than before costs 0.05
    assert "score=0.0" in wrong[0].text and "score=1.0" in right[0].text and final == 1.0
    assert instance not in tool._trajectories


def test_the_interaction_asks_again_until_the_answer_is_right(tmp_path):
    config = tmp_path / "interactions.yaml"
    config.write_text(
        "interaction:\n  - name: gsm8k\n    class_name: core_v1.agent_loop.gsm8k_interaction.Gsm8kInteraction\n"
    )
    interaction = load_interactions(config)["gsm8k"]

    async def conversation():
        instance = await interaction.start_interaction(ground_truth="18")
        loose = await interaction.generate_response(
            instance, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "it is 18"}]
        )
        strict = await interaction.generate_response(
            instance, [{"role": "assistant", "content": "so #### 18"}, {"role": "user", "content": "ok"}]
        )
        await interaction.finalize_interaction(instance)
        return loose, strict, instance

    loose, strict, instance = asyncio.run(conversation())
    assert loose[0] is False and loose[2] == 0.0 and "#### <number>" in loose[1]  # strict: needs '#### '
    assert strict[0] is True and strict[2] == 1.0  # the last assistant turn, even before a user turn
    assert instance not in interaction._ground_truth
