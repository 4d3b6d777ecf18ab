"""A null is accepted wherever verl accepts one: verl's configs are untyped, so any key may be null
there, and verl writes null for "not set" (its 0.8 legacy sections are all nulls). On rlbridge a
null on a key that takes none means the key's schema default; a key that takes null keeps it. A
value of the wrong type is one line naming the key and the values it takes."""

from __future__ import annotations

import dataclasses
import io
import contextlib

import pytest
from omegaconf import OmegaConf

from core_v1.config import ConfigError, compose_config, to_config
from core_v1.config.schema import PPOConfig
from core_v1.main_ppo import main
from shims.config import LegacyConfigShim
from shims.verl_keys import verdicts

PRESET = "quickstart"


def schema_keys(sections: bool) -> list[str]:
    """The schema's leaf keys, or its sections (below the top level)."""
    found = []

    def walk(cls, prefix):
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                if sections and prefix.count(".") == 1:  # not a section inside one set to null too
                    found.append(prefix + f.name)
                walk(type(default), f"{prefix}{f.name}.")
            elif not sections:
                found.append(prefix + f.name)

    walk(PPOConfig, "")
    return found


@pytest.mark.parametrize("sections", [False, True], ids=["leaves", "sections"])
def test_every_schema_key_set_to_null_gives_its_default_or_keeps_null(sections):
    keys = schema_keys(sections)
    composed = compose_config("ppo_trainer", [f"{key}=null" for key in keys])
    to_config(composed)  # every section's checks pass
    defaults = OmegaConf.structured(PPOConfig)
    for key in keys:
        section, _, name = key.rpartition(".")
        takes_null = OmegaConf.select(defaults, section)._get_node(name)._metadata.optional
        value = OmegaConf.select(composed, key)
        assert value is None if takes_null else value == OmegaConf.select(defaults, key), key


NULLABLE = sorted(key for key, entry in verdicts.verl_keys().items() if entry["default"] is None)


def test_the_key_tables_nullable_keys_accept_null_through_the_shim():
    """verl's keys whose default is null (in the release that had them), each set to null as a
    script writes it: never refused, never an OmegaConf type error; composed per release."""
    assert len(NULLABLE) > 100
    survivors: dict[str, list[str]] = {}
    for key in NULLABLE:
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                survivors[key] = LegacyConfigShim().migrate_overrides([f"{key}=null"])
            except ConfigError as error:
                pytest.fail(f"{key}=null refused: {error}")
        assert "error" not in err.getvalue(), err.getvalue()
    for tag in verdicts.verl_tags():
        tokens = {
            t.lstrip("+~").split("=", 1)[0]: t
            for key, migrated in survivors.items()
            if tag in verdicts.verl_keys()[key]["tags"]
            for t in migrated
        }
        try:
            to_config(compose_config(PRESET, list(tokens.values())))
        except ConfigError as error:
            pytest.fail(f"{tag}: {error}")


@pytest.mark.parametrize(
    "token",
    [
        "reward.custom_reward_function.name=null",
        "custom_reward_function.name=null",
        "reward_model.enable=null",
        "data.max_prompt_length=null",
    ],
)
def test_nulls_verl_scripts_write_pass_the_dry_run(token, capsys):
    assert main([f"--config-name={PRESET}", token, "trainer.dry_run=true"]) == 0
    assert "error:" not in capsys.readouterr().err


def test_a_verl_08_yaml_with_null_legacy_sections_composes(tmp_path):
    (tmp_path / "run.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\n"
        "custom_reward_function:\n  path: null\n  name: null\n"
        "reward_model:\n  enable: null\n  micro_batch_size_per_gpu: null\n"
        "reward:\n  custom_reward_function:\n    name: null\n  sandbox_fusion:\n    max_concurrent: null\n"
    )
    shim = LegacyConfigShim(config_dir=str(tmp_path))
    config = to_config(compose_config("run", [], str(tmp_path), migrate=shim.migrate_config))
    assert config.reward.custom_reward_function.name == "compute_score"
    assert config.reward.reward_model.enable is False and config.reward.sandbox_fusion.max_concurrent == 64


@pytest.mark.parametrize(
    "token, line",
    [
        ("data.max_prompt_length=abc", "data.max_prompt_length='abc' is not a value it takes: an integer; default 512"),
        ("data.shuffle=maybe", "data.shuffle='maybe' is not a value it takes: true or false; default true"),
        ("data.seed=x", "data.seed='x' is not a value it takes: an integer or null; default null"),
        (
            "actor_rollout_ref.actor.optim.betas=3",
            "actor_rollout_ref.actor.optim.betas=3 is not a value it takes: a list",
        ),
        ("data.sampler=5", "data.sampler=5 is not a value it takes: a section (class_path, class_name)"),
    ],
)
def test_a_wrong_type_is_one_line_naming_the_key_and_what_it_takes(token, line, capsys):
    assert main([f"--config-name={PRESET}", token, "trainer.dry_run=true"]) == 2
    errors = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {line}"), errors
