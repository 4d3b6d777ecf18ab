"""A config composed from a verl checkout's own files (`hydra.searchpath: file://verl/trainer/config`,
as verl's multi-turn examples set it) brings every verl default along: keys at one of verl's defaults
pass, a value that asks for something rlbridge lacks is still refused. The YAML files written here
name verl's keys with their values; no file of verl's is copied."""

from __future__ import annotations

import textwrap

import pytest

import legacy_v0.config  # noqa: F401 - V0's presets registered too, as in a process that also ran V0
from core_v1.main_ppo import main

VERL_TRAINER_CONFIG = """\
defaults:
  - ppo_trainer
  - _self_
actor_rollout_ref:
  actor:
    strategy: megatron
reward_model:
  enable: false
  strategy: ${actor_rollout_ref.actor.strategy}
  model:
    external_lib: ${actor_rollout_ref.model.external_lib}
"""


def checkout(tmp_path, reward_strategy: str | None = None):
    """A folder laid out as a verl checkout: verl's megatron trainer config, and an example config
    that reaches it through the search path."""
    config_dir = tmp_path / "verl" / "trainer" / "config"
    config_dir.mkdir(parents=True)
    text = VERL_TRAINER_CONFIG
    if reward_strategy is not None:
        text = text.replace("strategy: ${actor_rollout_ref.actor.strategy}", f"strategy: {reward_strategy}")
    (config_dir / "ppo_megatron_trainer.yaml").write_text(text)
    example = tmp_path / "examples" / "config"
    example.mkdir(parents=True)
    (example / "multiturn.yaml").write_text(
        textwrap.dedent("""\
        hydra:
          searchpath:
            - file://verl/trainer/config
        defaults:
          - ppo_megatron_trainer
          - _self_
        data:
          max_prompt_length: 256
        """)
    )
    return example


def test_verls_config_of_the_same_name_on_the_search_path_composes_and_keys_at_verls_defaults_pass(
    tmp_path, monkeypatch, capsys
):
    example = checkout(tmp_path)
    monkeypatch.chdir(tmp_path)  # file://verl/... is read from where the script runs: verl's root
    code = main([f"--config-path={example}", "--config-name=multiturn", "trainer.dry_run=true"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "actor_rollout_ref.actor.strategy=megatron -> fsdp" in err
    assert "error:" not in err


@pytest.mark.parametrize("strategy, passes", [("fsdp", True), ("megatron", True), ("my_engine", False)])
def test_a_legacy_key_refuses_only_a_value_that_is_none_of_verls_defaults(
    tmp_path, monkeypatch, capsys, strategy, passes
):
    example = checkout(tmp_path, reward_strategy=strategy)
    monkeypatch.chdir(tmp_path)
    code = main([f"--config-path={example}", "--config-name=multiturn", "trainer.dry_run=true"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert (
        (code == 0 and errors == [])
        if passes
        else (code == 2 and len(errors) == 1 and "reward_model.strategy" in errors[0])
    )


VERL_PPO_TRAINER = """\
reward_model:
  reward_manager: naive
actor_rollout_ref:
  rollout:
    trace:
      backend: null
      token2text: false
"""


def composed_over_verls_defaults(tmp_path, monkeypatch, user_config: str, overrides: list[str]):
    """`user_config` on top of a verl checkout's `ppo_trainer` (verl's legacy keys at their defaults),
    as V1 reads it with `overrides`."""
    from core_v1.config import to_config
    from core_v1.main_ppo import compose_v1

    verl_config = tmp_path / "verl" / "trainer" / "config"
    verl_config.mkdir(parents=True)
    (verl_config / "ppo_trainer.yaml").write_text(VERL_PPO_TRAINER)
    example = tmp_path / "examples"
    example.mkdir()
    (example / "mine.yaml").write_text(
        "hydra:\n  searchpath:\n    - file://verl/trainer/config\n"
        "defaults:\n  - ppo_trainer\n  - _self_\n" + user_config
    )
    monkeypatch.chdir(tmp_path)
    raw, _ = compose_v1("mine", str(example), overrides, judge_named_files=False)
    return to_config(raw)


@pytest.mark.parametrize(
    "user_config, manager",
    [
        ("reward:\n  reward_manager:\n    name: dapo\n", "dapo"),  # a YAML migrated to V1's home
        ("reward_model:\n  reward_manager: prime\n", "prime"),  # the legacy key, set: it moves
        ("", "naive"),  # verl's default, moved
    ],
)
def test_a_v1_home_in_the_users_yaml_wins_over_verls_default_of_its_old_key(
    tmp_path, monkeypatch, user_config, manager
):
    config = composed_over_verls_defaults(tmp_path, monkeypatch, user_config, [])
    assert config.reward.reward_manager.name == manager


@pytest.mark.parametrize(
    "override, manager",
    [
        ("reward_model.reward_manager=dapo", "dapo"),  # moved to reward.reward_manager.name
        ("actor_rollout_ref.rollout.trace.backend=mlflow", "naive"),  # a no-op key, dropped
    ],
)
def test_a_command_line_key_moved_or_dropped_leaves_no_copy_of_verls_default_behind(
    tmp_path, monkeypatch, override, manager
):
    config = composed_over_verls_defaults(tmp_path, monkeypatch, "", [override])
    assert config.reward.reward_manager.name == manager
