"""Hypothesis: scripts built from override tokens never get corrupted, re-runs are no-ops, and a
script with nothing legacy in it is returned byte for byte."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codemods.shell import migrate_shell
from tests.codemods.reparse import assert_reparses
from shims import rename_table

LEGACY_KEYS = sorted(
    {row.literal_prefix for row in rename_table.CONFIG_KEY_ROWS}
    | {f.key for f in rename_table.V0_ONLY_FEATURES}
    | {"reward_model.rollout.gpu_memory_utilization", "reward_model.reward_kwargs.max_len"}
)
V1_KEYS = [
    "algorithm.adv_estimator",
    "data.train_files",
    "actor_rollout_ref.actor.optim.lr",
    "actor_rollout_ref.rollout.n",
    "trainer.total_epochs",
    "trainer.logger",
    "reward.reward_model.enable",
    "critic.fsdp.param_offload",
    "trainer.v1.trainer_mode",
    "actor_rollout_ref.rollout.mode",
]
SAFE_VALUES = [
    "True",
    "false",
    "8",
    "1e-6",
    "grpo",
    "prime",
    "batch",
    "sync",
    "null",
    "my_pkg.Cls",
    "$HOME/data/gsm8k/train.parquet",
    "${MODEL_PATH}",
    "[1,2]",
]
QUOTABLE_VALUES = ["True", "false", "8", "grpo", "prime", "sync", "a b", "[1, 2]"]

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
identifier = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True)
random_key = st.lists(identifier, min_size=1, max_size=4).map(".".join)


@st.composite
def override_token(draw, keys) -> str:
    key = draw(keys)
    prefix = draw(st.sampled_from(["", "", "+", "++", "~"]))
    if prefix == "~":
        return f"~{key}"
    quoting = draw(st.sampled_from(["none", "none", "double", "single", "value-single"]))
    if quoting == "none":
        return f"{prefix}{key}={draw(st.sampled_from(SAFE_VALUES))}"
    value = draw(st.sampled_from(QUOTABLE_VALUES))
    if quoting == "double":
        return f'"{prefix}{key}={value}"'
    if quoting == "single":
        return f"'{prefix}{key}={value}'"
    return f"{prefix}{key}='{value}'"


@st.composite
def launch_script(draw, keys, modules) -> str:
    tokens = draw(st.lists(override_token(keys), min_size=0, max_size=10))
    in_array = draw(st.integers(0, len(tokens)))
    array_tokens, command_tokens = tokens[:in_array], tokens[in_array:]
    wrapper = draw(st.sampled_from(["", "nohup ", "env A=1 ", "PYTHONUNBUFFERED=1 ", "$PYTHON_PREFIX "]))
    python = draw(st.sampled_from(["python3", "python", "$PYTHON", "${PYTHON_BIN}"]))
    module = draw(st.sampled_from(modules))
    separator = draw(st.sampled_from([" \\\n    ", " ", " \\\n\t"]))
    suffix = draw(st.sampled_from(["", ' "$@"', " > train.log 2>&1 &", " | tee log.txt", " $@"]))
    lines = ["#!/bin/bash", "# generated", "set -x"]
    arguments = list(command_tokens)
    if array_tokens:
        lines.append("ARGS=(\n" + "".join(f"    {t}\n" for t in array_tokens) + ")")
        arguments.append('"${ARGS[@]}"')
    command = f"{wrapper}{python} -m {module}" + "".join(separator + token for token in arguments) + suffix
    indent = draw(st.booleans())
    if indent:
        command = "if true; then\n    " + command.replace("\n", "\n    ") + "\nfi"
    lines.append(command)
    return "\n".join(lines) + "\n"


ANY_KEY = st.one_of(st.sampled_from(LEGACY_KEYS), st.sampled_from(V1_KEYS), random_key)
ALL_ENTRYPOINTS = [row.old.replace("*", "x.main_x") for row in rename_table.ENTRYPOINT_ROWS]


@SETTINGS
@given(launch_script(ANY_KEY, ALL_ENTRYPOINTS))
def test_never_corrupts_and_is_idempotent(script):
    assert_reparses(script, "sh")
    result = migrate_shell(script)
    assert not result.failed, result.findings
    assert_reparses(result.migrated, "sh")
    assert migrate_shell(result.migrated).migrated == result.migrated


NON_LEGACY_KEY = st.one_of(
    st.sampled_from([k for k in V1_KEYS if k != "actor_rollout_ref.rollout.mode"]), random_key.map(lambda k: "x_" + k)
)


@SETTINGS
@given(launch_script(NON_LEGACY_KEY, [rename_table.V1_ENTRYPOINT]))
def test_untouched_when_nothing_matches(script):
    result = migrate_shell(script)
    assert result.migrated == script
    assert not result.findings
