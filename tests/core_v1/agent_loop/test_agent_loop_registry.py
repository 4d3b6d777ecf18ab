"""Agent-loop registration: decorator, YAML file, errors; and the output record's checks."""

from __future__ import annotations

import textwrap

import pytest

from core_v1.agent_loop import (
    AGENT_LOOPS,
    AgentLoopBase,
    AgentLoopConfigError,
    AgentLoopOutput,
    load_agent_loop_config,
    register,
)
from core_v1.utils.registry import UnknownNameError


class _Echo(AgentLoopBase):
    async def run(self, sampling_params, **kwargs):
        return AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1])


def test_builtin_single_turn_is_registered():
    assert "single_turn_agent" in AGENT_LOOPS


def test_register_decorator_and_rebinding_rules():
    register("echo_for_test")(_Echo)
    assert AGENT_LOOPS.get("echo_for_test") is _Echo
    register("echo_for_test")(_Echo)  # same class again: a no-op (modules get imported twice)

    class Other(_Echo):
        pass

    with pytest.raises(ValueError, match="already registered"):
        register("echo_for_test")(Other)


def test_register_refuses_a_non_agent_loop():
    with pytest.raises(TypeError, match="subclass of AgentLoopBase"):
        register("not_a_loop")(dict)


def test_unknown_name_lists_known_and_suggests():
    with pytest.raises(UnknownNameError) as error:
        AGENT_LOOPS.get("single_turn_agnt")
    message = str(error.value)
    assert "single_turn_agent" in message and "Did you mean 'single_turn_agent'" in message
    assert "default_agent_loop" in message


def test_yaml_registration_imports_module_next_to_the_file(tmp_path):
    (tmp_path / "yaml_loop_mod.py").write_text(
        textwrap.dedent("""
        from core_v1.agent_loop import AgentLoopBase, AgentLoopOutput
        class YamlLoop(AgentLoopBase):
            async def run(self, sampling_params, **kwargs):
                return AgentLoopOutput(prompt_ids=[1], response_ids=[], response_mask=[])
    """)
    )
    config = tmp_path / "loops.yaml"
    config.write_text("- name: yaml_loop\n  _target_: yaml_loop_mod.YamlLoop\n")
    assert load_agent_loop_config(config) == ["yaml_loop"]
    assert AGENT_LOOPS.get("yaml_loop").__name__ == "YamlLoop"


@pytest.mark.parametrize(
    "content, message",
    [
        ("name: x\n", "expected a list"),
        ("- name: x\n", "needs both 'name' and '_target_'"),
        ("- name: x\n  _target_: no_such_module_zz.Loop\n", "cannot import 'no_such_module_zz.Loop'"),
    ],
)
def test_yaml_errors_are_one_clear_line(tmp_path, content, message):
    config = tmp_path / "bad.yaml"
    config.write_text(content)
    with pytest.raises(AgentLoopConfigError, match=message):
        load_agent_loop_config(config)


def test_missing_yaml_file_names_the_key(tmp_path):
    with pytest.raises(AgentLoopConfigError, match="agent_loop_config_path"):
        load_agent_loop_config(tmp_path / "nope.yaml")


def test_output_checks_mask_and_logprob_lengths():
    with pytest.raises(ValueError, match="response_mask has 1 entries for 2 response tokens"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2, 3], response_mask=[1])
    with pytest.raises(ValueError, match="response_logprobs"):
        AgentLoopOutput(prompt_ids=[1], response_ids=[2], response_mask=[1], response_logprobs=[0.1, 0.2])
