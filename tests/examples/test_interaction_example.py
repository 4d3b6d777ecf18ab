"""Interactions (core_v1/agent_loop/interaction.py) in the tool_agent loop, with examples/interaction's tutor.

The unit tests drive the loop with a scripted client (tests/core_v1/agent_loop/scripted_llm.py) (the loop's logic is what
is under test); the slow test trains the example for two steps on the real rollout engine.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from core_v1.agent_loop import AgentLoopConfigError
from core_v1.agent_loop.base import encode_chat
from core_v1.agent_loop.interaction import configured_interactions, load_interactions
from core_v1.agent_loop.tool_agent import ToolAgentLoop
from core_v1.config import load_config
from examples.interaction.prepare import run_overrides, write_data
from examples.tiny_model import make_tiny_model, make_tokenizer
from examples.tool_agent.prepare import TOOL_WORDS
from tests.conftest import quickstart_overrides
from tests.core_v1.agent_loop.scripted_llm import ScriptedLLM

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "interaction"
PROMPT = [{"role": "user", "content": "3+4="}]


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer(TOOL_WORDS)


def run_loop(tokenizer, script, row_extra, *overrides):
    config = load_config(
        [
            "data.max_prompt_length=64",
            "data.max_response_length=128",
            "actor_rollout_ref.rollout.multi_turn.enable=true",
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={EXAMPLE / 'interaction.yaml'}",
            *overrides,
        ],
        config_name="quickstart",
    )
    client = ScriptedLLM(tokenizer, script)
    loop = ToolAgentLoop(config, client, tokenizer, tools=[])
    row = {
        "raw_prompt": PROMPT,
        "extra_info": {"interaction_kwargs": {"name": "tutor", "ground_truth": "7"}},
        **row_extra,
    }
    output = asyncio.run(loop.run({"temperature": 1.0, "max_tokens": 128, "logprobs": True}, **row))
    return loop, client, output


def test_the_tutor_answers_until_the_answer_is_right(tokenizer):
    loop, client, output = run_loop(tokenizer, ["5", "7"], {})
    assert output.extra_fields["stop_reason"] == "interaction_ended"
    assert output.extra_fields["turn_scores"] == [0.0, 1.0]
    assert output.metrics["interaction_turns"] == 2.0 and output.num_turns == 1 + 2 + 2
    # The user turns are in the response with mask 0; the model's tokens with mask 1, as sampled.
    model_tokens = [t for t, m in zip(output.response_ids, output.response_mask) if m == 1]
    assert model_tokens == client.tokens("5") + client.tokens("7")
    conversation = [
        *PROMPT,
        {"role": "assistant", "content": "5"},
        {"role": "user", "content": "Not quite, try again."},
        {"role": "assistant", "content": "7"},
        {"role": "user", "content": "Right."},
    ]
    assert output.prompt_ids + output.response_ids == encode_chat(tokenizer, conversation, add_generation_prompt=True)
    # The second request saw the tutor's message; every session's state was released at the end.
    assert "Not quite, try again." in tokenizer.decode(client.requests[1][1])
    assert loop.interactions["tutor"]._sessions == {}


def test_the_tutor_gives_up_after_max_tries_and_user_turns_count_toward_the_limit(tokenizer):
    _, _, output = run_loop(tokenizer, ["5", "6"], {})
    assert output.extra_fields["turn_scores"] == [0.0, 0.0]
    assert tokenizer.decode(output.response_ids).count("No, it is 7.") == 1
    _, _, output = run_loop(tokenizer, ["5", "6"], {}, "actor_rollout_ref.rollout.multi_turn.max_user_turns=1")
    assert output.extra_fields["stop_reason"] == "max_user_turns" and output.extra_fields["turn_scores"] == [0.0]


def test_interaction_kwargs_may_be_a_column(tokenizer):
    _, _, output = run_loop(
        tokenizer, ["7"], {"extra_info": {}, "interaction_kwargs": {"name": "tutor", "ground_truth": "7"}}
    )
    assert output.extra_fields["turn_scores"] == [1.0]


@pytest.mark.parametrize(
    "row_extra, message",
    [
        ({"extra_info": {}}, "needs interaction_kwargs with a 'name'"),
        ({"extra_info": {"interaction_kwargs": {"name": "coach"}}}, "interaction 'coach'"),
    ],
)
def test_a_row_without_a_known_interaction_is_one_error(tokenizer, row_extra, message):
    with pytest.raises(AgentLoopConfigError, match=message):
        run_loop(tokenizer, ["7"], row_extra)


@pytest.mark.parametrize(
    "text, message",
    [
        ("interaction:\n  - class_name: no_such_module.Tutor\n", "no_such_module"),
        (
            "interaction:\n  - class_name: tutor.TutorInteraction\n  - class_name: tutor.TutorInteraction\n",
            "'tutor' is defined more than once",
        ),
        ("tools: []\n", "top-level 'interaction:' list"),
    ],
)
def test_a_bad_interaction_file_is_one_error_line(tmp_path, text, message):
    (tmp_path / "tutor.py").write_text((EXAMPLE / "tutor.py").read_text())
    (tmp_path / "bad.yaml").write_text(text)
    with pytest.raises(AgentLoopConfigError, match=message) as error:
        load_interactions(tmp_path / "bad.yaml")
    assert "\n" not in str(error.value)


def test_the_default_name_is_the_class_name_without_interaction(tmp_path):
    (tmp_path / "tutor.py").write_text((EXAMPLE / "tutor.py").read_text())
    (tmp_path / "i.yaml").write_text(
        "interaction:\n  - class_name: tutor.TutorInteraction\n    config: {max_tries: 5}\n"
    )
    interactions = load_interactions(tmp_path / "i.yaml")
    assert list(interactions) == ["tutor"] and interactions["tutor"].max_tries == 5
    assert interactions["tutor"].config["name"] == "tutor"
    assert configured_interactions(None) == {}


@pytest.mark.slow
def test_the_example_trains(ray_runtime, tmp_path):
    data, model = tmp_path / "data", make_tiny_model(tmp_path / "model", TOOL_WORDS, hidden_size=32, num_layers=2)
    train, val = write_data(data)
    assets = {"model": model, "train": train, "val": val}
    config = load_config(
        [
            *run_overrides(data, model),
            *quickstart_overrides(
                assets,
                tmp_path / "out",
                2,
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                "actor_rollout_ref.rollout.n=2",
                "trainer.test_freq=-1",
                "trainer.logger=[jsonl]",
            ),
        ],
        config_name="quickstart",
    )
    from core_v1.main_ppo import run_v1

    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and rows[-1]["rollout/failed_samples"] == 0
    # A random tiny model often spends the whole response budget on its first turn; the others are
    # answered by the tutor (never right at once), so some trajectories hold tutor turns.
    assert all(row["agent/interaction_turns/mean"] > 0 for row in rows)
    assert max(row["num_turns/max"] for row in rows) >= 3


def test_interactions_without_a_loop_that_plays_them_are_refused(tmp_path):
    from core_v1.agent_loop.manager import check_agent_loops

    config = load_config(
        [f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={EXAMPLE / 'interaction.yaml'}"],
        config_name="quickstart",
    )
    with pytest.raises(AgentLoopConfigError, match="default_agent_loop=tool_agent"):
        check_agent_loops(config, [])


def test_a_row_naming_no_configured_interaction_is_refused_at_start_up():
    from core_v1.agent_loop.manager import check_agent_loops
    from core_v1.data import PromptDataset

    config = load_config(
        [
            f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={EXAMPLE / 'interaction.yaml'}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",
        ],
        config_name="quickstart",
    )
    rows = [{"raw_prompt": PROMPT, "extra_info": {"interaction_kwargs": {"name": "coach"}}}]
    with pytest.raises(AgentLoopConfigError, match="interaction 'coach'"):
        check_agent_loops(config, [PromptDataset.of_rows(rows, "prompt", "test rows")])
