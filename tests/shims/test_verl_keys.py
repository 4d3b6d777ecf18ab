"""Every config key verl had from v0.3 to v0.9 gets exactly its declared verdict at start-up.

The keys come from `shims/verl_keys/verl_keys.json` (generated from verl's own trainer configs);
each is written as a verl script writes it (`key=<verl's default>`) and goes through the
entrypoint's path: the config shim, then Hydra composition with the key check. It must end as the
key table (`shims.verl_keys.verdicts.declared`) says: used (silently), moved (one `legacy key`
line), no-op (one `has no effect here` line) or refused (one error line, never "unknown config
key"). Refused keys are also given a value that asks for the feature.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections import Counter

import pytest
from omegaconf import OmegaConf

from core_v1.config import ConfigError, compose_config, config_keys
from core_v1.config.schema import PPOConfig
from core_v1.main_ppo import main
from shims.config import LegacyConfigShim, NoOpNote
from shims.rename_table import normalize_value
from shims.verl_keys import verdicts
from shims.verl_keys.verdicts import Verdict

PRESET = "quickstart"
KEYS = verdicts.verl_keys()
TABLE = {key: verdicts.declared(key) for key in KEYS}
SCHEMA_KEYS = frozenset(config_keys())


def override_text(value) -> str:
    """A value as a verl script writes it on the command line (Hydra's override grammar)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(override_text(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{override_text(v)}" for k, v in value.items()) + "}"
    if re.fullmatch(r"\$\{[\w.]+\}", value):
        return value
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def asking_value(value):
    """A value that asks for the feature a refused key names (verl's default usually does not)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1.5  # not 1.0 from 0.0: a decay floor of 1.0 is no decay (optim.min_lr_factor)
    if isinstance(value, str) and value:
        return value + "_other"
    return "on"


def shim_one(token: str) -> tuple[str, list[str], list[str]]:
    """('refused'|'passed', stderr lines, migrated tokens) for one override through the shim."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            migrated = LegacyConfigShim().migrate_overrides([token])
        except ConfigError as error:
            return "refused", [str(error)], []
    return "passed", [line for line in err.getvalue().splitlines() if line.strip()], migrated


def expected_outcome(key: str, value) -> str:
    declared = TABLE[key]
    if declared.verdict is Verdict.REFUSED:
        row = verdicts.row_for(declared.v1_key) if declared.v1_key else None
        checked_key = declared.v1_key or key
        if verdicts.asks_for_nothing(
            normalize_value(value),
            key,
            checked_key,
            schema_default=schema_default(checked_key),
            off=row.off if row else (),
        ):
            return Verdict.NO_OP.value
    return declared.verdict.value


def schema_default(key: str):
    default = OmegaConf.select(OmegaConf.structured(PPOConfig), key, default=None)
    return None if OmegaConf.is_config(default) else default


def observed_outcome(key: str, status: str, lines: list[str]) -> str:
    if status == "refused":
        assert len(lines) == 1 and "\n" not in lines[0] and key in lines[0], lines
        assert "unknown config key" not in lines[0]
        return Verdict.REFUSED.value
    assert len(lines) <= 1, lines
    if not lines:
        return Verdict.USED.value
    assert key in lines[0], lines
    if "has no effect here" in lines[0] or " deleted: " in lines[0]:
        return Verdict.NO_OP.value
    assert lines[0].startswith(f"legacy key {key} -> "), lines
    return Verdict.MOVED.value


def test_every_verl_key_has_a_verdict():
    unknown = sorted(key for key, declared in TABLE.items() if declared.verdict is None)
    assert unknown == []
    counts = Counter(declared.verdict.value for declared in TABLE.values())
    assert set(counts) == {"used", "moved", "no-op", "refused"}, counts


def test_each_key_gets_its_declared_verdict_and_composes():
    """All 1200+ keys, each through the shim alone, then all surviving overrides composed at once
    (the key check that says "unknown config key")."""
    wrong, survivors = [], []
    for key, entry in KEYS.items():
        token = f"{key}={override_text(entry['default'])}"
        status, lines, migrated = shim_one(token)
        observed = observed_outcome(key, status, lines)
        if observed != expected_outcome(key, entry["default"]):
            wrong.append((key, expected_outcome(key, entry["default"]), observed, lines))
        survivors.append((key, migrated))
    assert wrong == []
    assert_compose_all(survivors)


def assert_compose_all(survivors: list[tuple[str, list[str]]]) -> None:
    """Compose the preset with the surviving overrides of each verl release, one release at a time
    (keys of different releases may clash: a leaf in one is a section in another). Overrides of
    typed schema fields are left out: they cannot be unknown, and verl's newest default is not
    always a value of that field's type in an older release."""
    for tag in verdicts.verl_tags():
        tokens = [
            t
            for key, migrated in survivors
            if tag in KEYS[key]["tags"]
            for t in migrated
            if t.lstrip("+~").split("=", 1)[0] not in SCHEMA_KEYS
        ]
        try:
            compose_config(PRESET, dedupe(tokens))
        except ConfigError as error:
            pytest.fail(f"{tag}: {error}")


def dedupe(tokens: list[str]) -> list[str]:
    """The last override of each key (a moved key and its new home may both be in the list)."""
    last = {t.lstrip("+~").split("=", 1)[0]: t for t in tokens}
    return list(last.values())


REFUSED_KEYS = sorted(key for key, declared in TABLE.items() if declared.verdict is Verdict.REFUSED)


def test_refused_keys_refuse_a_value_that_asks_for_the_feature():
    missed = []
    for key in REFUSED_KEYS:
        token = f"{key}={override_text(asking_value(KEYS[key]['default']))}"
        status, lines, _ = shim_one(token)
        if status != "refused":
            missed.append((token, lines))
    assert missed == []


@pytest.mark.parametrize(
    "key",
    [
        "algorithm.kl_ctrl._target_",
        "actor_rollout_ref.actor.fsdp_config.dtype",
        "actor_rollout_ref.actor.profiler.tool",
        "actor_rollout_ref.model.use_remove_padding",
    ],
)
def test_no_op_keys_say_why_in_one_line_through_the_entrypoint(key, capsys):
    value = override_text(KEYS[key]["default"])
    code = main([f"--config-name={PRESET}", f"{key}={value}", "trainer.dry_run=true"])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert code == 0
    assert len(warnings) == 1 and key in warnings[0] and TABLE[key].reason in warnings[0]


@pytest.mark.parametrize(
    "token",
    [
        "actor_rollout_ref.rollout.over_sample_rate=0.1",  # verl reads it nowhere since 0.7
        "actor_rollout_ref.model.torch_dtype=bfloat16",  # in no verl config; read nowhere
        "+actor_rollout_ref.model.torch_dtype=bfloat16",
    ],
)
def test_keys_verl_itself_ignores_are_no_ops_that_say_so_on_v1_and_v0(token, capsys):
    key = token.lstrip("+").split("=")[0]
    for use_v1 in ("true", "false"):
        code = main([f"--config-name={PRESET}", token, "trainer.dry_run=true", f"trainer.use_v1={use_v1}"])
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert code == 0
        assert len(warnings) == 1 and key in warnings[0] and verdicts.declared(key).reason in warnings[0]


def test_launch_reward_fn_async_is_a_no_op_that_says_so_on_v1_and_v0(capsys):
    """verl 0.4-0.7's speed switch: neither trainer refuses it or takes it silently."""
    token = "reward_model.launch_reward_fn_async=true"
    for use_v1, why in (("true", "asynchronous anyway"), ("false", "V0 computes the rewards in its reward stage")):
        code = main([f"--config-name={PRESET}", token, "trainer.dry_run=true", f"trainer.use_v1={use_v1}"])
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert code == 0
        assert len(warnings) == 1 and token in warnings[0] and why in warnings[0], warnings


@pytest.mark.parametrize("threshold, ok", [("'0.6_1.6,2.5'", True), ("0.01", True), ("'0.6_1.6'", False)])
def test_rollout_rs_threshold_is_read_as_verl_writes_it_text_or_number(threshold, ok, capsys):
    # verl 0.7 takes "lower_upper" for a *_k1 criterion and one spec per criterion, comma-separated.
    for use_v1 in ("true", "false"):
        code = main(
            [
                f"--config-name={PRESET}",
                "algorithm.rollout_correction.rollout_is=token",
                "algorithm.rollout_correction.rollout_rs='token_k1,seq_mean_k3'",
                f"algorithm.rollout_correction.rollout_rs_threshold={threshold}",
                "trainer.dry_run=true",
                f"trainer.use_v1={use_v1}",
            ]
        )
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert (code, errors) == (0, []) if ok else (code == 2 and len(errors) == 1 and "seq_mean_k3" in errors[0])


def test_refused_key_is_one_error_line_through_the_entrypoint(capsys):
    code = main(
        [
            f"--config-name={PRESET}",
            "actor_rollout_ref.model.lora.type=dora",
            "data.audio_key=aud",
            "trainer.dry_run=true",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1
    assert "actor_rollout_ref.model.lora.type=dora (DoRA and other adapter types are not supported" in errors[0]
    assert "data.audio_key=aud (audio inputs are not supported" in errors[0]


@pytest.mark.parametrize(
    "token, key, value",
    [
        ("actor_rollout_ref.actor.strategy=megatron", "actor_rollout_ref.actor.strategy", "fsdp"),
        ("critic.strategy=megatron", "critic.strategy", "fsdp"),
        ("actor_rollout_ref.ref.strategy=fsdp_turbo", "actor_rollout_ref.ref.strategy", "fsdp"),
        ("actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.name", "vllm"),
        ("trainer.device=npu", "trainer.device", "auto"),
        ("critic.fsdp.ulysses_sequence_parallel_size=4", "critic.fsdp.ulysses_sequence_parallel_size", 1),
    ],
)
def test_a_backend_rlbridge_lacks_maps_to_what_it_has_with_one_line(token, key, value, capsys):
    shim = LegacyConfigShim()
    cfg = compose_config(PRESET, shim.migrate_overrides([token]), migrate=shim.migrate_config)
    assert OmegaConf.select(cfg, key) == value
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"warning: {token} -> {value}: ")


def test_a_backend_value_in_yaml_maps_too(tmp_path, capsys):
    (tmp_path / "megatron.yaml").write_text(
        "defaults: [ppo_trainer, _self_]\nactor_rollout_ref:\n  actor:\n"
        "    strategy: megatron\n    megatron:\n      tensor_model_parallel_size: 4\n"
    )
    shim = LegacyConfigShim(config_dir=str(tmp_path))
    cfg = compose_config("megatron", [], tmp_path, migrate=shim.migrate_config)
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp" and len(cfg.actor_rollout_ref.actor.megatron) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 2 and any("strategy=megatron -> fsdp" in line for line in lines)


def test_a_whole_verl_config_in_yaml_composes_and_names_each_key_once(tmp_path, capsys):
    """verl v0.9's every key at its default, as a user's `--config-path` YAML: it composes, each key
    that is moved or has no effect is named once, and the no-op lines are one per reason."""
    tag = verdicts.verl_tags()[-1]
    config = OmegaConf.create({"defaults": ["ppo_trainer", "_self_"]})
    for key, entry in KEYS.items():
        if tag in entry["tags"]:
            OmegaConf.update(config, key, entry["default"], force_add=True)
    OmegaConf.update(config, "actor_rollout_ref.model.path", "models/tiny")
    (tmp_path / "verl.yaml").write_text(OmegaConf.to_yaml(config))
    shim = LegacyConfigShim(config_dir=str(tmp_path))
    cfg = compose_config("verl", [], tmp_path, migrate=shim.migrate_config)
    assert cfg.actor_rollout_ref.model.path == "models/tiny"
    noted = Counter(note.old_key for note in shim.notes)
    assert noted and all(count == 1 for count in noted.values())
    reasons = {note.reason for note in shim.notes if isinstance(note, NoOpNote)}
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len([line for line in lines if line.startswith("warning:")]) == len(reasons)
    text = "\n".join(lines)
    assert all(key in text for key in noted)
    assert "unknown config key" not in text


def test_the_table_file_is_generated_facts():
    data = json.loads(verdicts.KEYS_FILE.read_text())
    assert data["tags"][0].startswith("v0.3") and "v0.9.0" in data["tags"] and data["tags"][-1] == "main"
    assert all(set(entry) == {"tags", "configs", "default", "defaults"} for entry in data["keys"].values())
    assert all(entry["default"] in entry["defaults"] for entry in data["keys"].values())
    assert len(data["keys"]) > 1000
    assert {"model_engine", "actor@actor_rollout_ref.actor", "critic@critic"} <= set(data["groups"])


GROUP_CHOICES = sorted(
    (group, choice) for group, entry in verdicts.verl_groups().items() for choice in entry["choices"]
)


def test_every_choice_of_verls_config_groups_composes_with_one_line():
    """Each choice verl's trainer configs offer (any tag, main too) is accepted: another engine's is
    trained with FSDP2 (one `-> FSDP2` line), the section's own or FSDP one is a no-op line."""
    wrong = []
    for group, choice in GROUP_CHOICES:
        status, lines, migrated = shim_one(f"{group}={choice}")
        engine = verdicts.group_choice(group, choice).verdict is None
        expected = (
            f"warning: {group}={choice} -> FSDP2: " if engine else f"warning: {group}={choice} has no effect here"
        )
        if status != "passed" or migrated or len(lines) != 1 or not lines[0].startswith(expected):
            wrong.append((group, choice, status, lines, migrated))
    assert wrong == []
    assert {"megatron", "veomni", "torchtitan", "mindspeed"} <= {c for g, c in GROUP_CHOICES if g == "model_engine"}


def _composed(overrides, config_name=PRESET):
    shim = LegacyConfigShim()
    return compose_config(config_name, shim.migrate_overrides(list(overrides)), migrate=shim.migrate_config)


def test_an_engines_decaying_lr_schedule_comes_with_its_config_unless_the_user_set_one(capsys):
    # verl's TorchTitan optimizer decays linearly to 0 and VeOmni's along a cosine; rlbridge's default is constant.
    # The quickstart preset sets the actor's schedule itself (cosine, floor 0.1): that one is the user's.
    cfg = _composed(["model_engine=torchtitan"])
    assert (cfg.actor_rollout_ref.actor.optim.lr_scheduler_type, cfg.actor_rollout_ref.actor.optim.min_lr_ratio) == (
        "cosine",
        0.1,
    )
    assert (cfg.critic.optim.lr_scheduler_type, cfg.critic.optim.min_lr_ratio) == ("linear", 0.0)
    assert "critic.optim.lr_scheduler_type=(from model_engine=torchtitan) -> linear" in capsys.readouterr().err
    cfg = _composed(
        [
            "actor@actor_rollout_ref.actor=veomni_actor",
            "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
            "actor_rollout_ref.actor.optim.min_lr_ratio=0.0",
        ]
    )
    assert cfg.actor_rollout_ref.actor.optim.lr_scheduler_type == "constant"  # set on the command line
    cfg = _composed(["model_engine=megatron"])  # Megatron's default schedule is constant, as the schema's
    assert cfg.critic.optim.lr_scheduler_type == "constant"


def test_v0_reads_a_group_choice_as_v1_does(capsys):
    # On V0 the command line's `model_engine=torchtitan` arrives as a key of the composed config.
    from legacy_v0.config import compose_v0
    from shims.v0_keys import KeyTableOnV0

    v0 = compose_v0(PRESET, None, ["model_engine=torchtitan"], legacy_keys=KeyTableOnV0())
    assert v0.raw.actor_rollout_ref.actor.optim.lr_scheduler_type == "cosine"  # the preset's, as on V1
    assert (v0.raw.critic.optim.lr_scheduler_type, v0.raw.critic.optim.min_lr_ratio) == ("linear", 0.0)
    assert "model_engine" not in v0.raw and any("model_engine=torchtitan -> FSDP2" in note for note in v0.notes)
    assert (
        main([f"--config-name={PRESET}", "trainer.use_v1=false", "trainer.dry_run=true", "model_engine=megatron"]) == 0
    )
    assert "unknown config key" not in capsys.readouterr().err


@pytest.mark.parametrize("token", ["actor@actor_rollout_ref.actor=mlite_actor", "model_engine=my_engine"])
def test_a_choice_verls_configs_lack_is_refused_in_one_line(token):
    status, lines, _ = shim_one(token)
    assert status == "refused" and len(lines) == 1
    assert lines[0].startswith(f"not supported on rlbridge: {token} (") and "plug-in" in lines[0]


def test_model_engine_megatron_runs_as_fsdp_through_the_entrypoint(capsys):
    code = main(
        [
            f"--config-name={PRESET}",
            "model_engine=megatron",
            "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
            "trainer.dry_run=true",
        ]
    )
    err = capsys.readouterr().err
    assert code == 0, err
    assert "model_engine=megatron -> FSDP2" in err and "unknown config key" not in err


@pytest.mark.parametrize("trainer", ["trainer.use_v1=true", "trainer.use_v1=false"])
def test_a_mapping_keyed_by_module_names_is_one_value_of_its_no_op_key(trainer, capsys):
    # verl's fsdp_turbo plans name modules (`model.layers.{*}`): dotted keys cannot address them one by one.
    plan = "actor_rollout_ref.actor.fsdp_config.turbo_config.distributed.fsdp_plan.apply_modules"
    code = main(
        [
            f"--config-name={PRESET}",
            trainer,
            "trainer.dry_run=true",
            "actor_rollout_ref.actor.strategy=fsdp_turbo",
            f"+{plan}={{model.layers.\\{{*\\}}:{{}},lm_head:{{}}}}",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "apply_modules" in out + err  # its no-op line


def test_verl_config_name_with_verls_relative_config_path_is_our_preset(capsys):
    shim = LegacyConfigShim()
    cfg = compose_config(
        "ppo_megatron_trainer",
        ["data.train_files=t.parquet", "actor_rollout_ref.model.path=m"],
        "config-folder-that-is-not-here",
        migrate=shim.migrate_config,
    )
    assert cfg.actor_rollout_ref.actor.strategy == "fsdp" and cfg.critic.strategy == "fsdp"
    err = capsys.readouterr().err
    assert "using rlbridge's built-in ppo_megatron_trainer" in err
    assert "actor_rollout_ref.actor.strategy=megatron -> fsdp" in err
    with pytest.raises(ConfigError, match="does not exist"):
        compose_config("dapo_trainer", [], "config-folder-that-is-not-here")


def test_yaml_starting_from_verls_megatron_preset_composes(tmp_path, capsys):
    (tmp_path / "recipe.yaml").write_text("defaults: [ppo_megatron_trainer, _self_]\ntrainer:\n  total_epochs: 2\n")
    shim = LegacyConfigShim(config_dir=str(tmp_path))
    cfg = compose_config("recipe", [], tmp_path, migrate=shim.migrate_config)
    assert cfg.trainer.total_epochs == 2 and cfg.actor_rollout_ref.ref.strategy == "fsdp"


def test_mtp_for_speculative_decoding_alone_runs_and_training_it_is_refused(capsys):
    drafting = [
        "actor_rollout_ref.model.mtp.enable=True",
        "actor_rollout_ref.model.mtp.enable_rollout=True",
        "actor_rollout_ref.model.mtp.enable_train=False",
        "actor_rollout_ref.model.mtp.detach_encoder=True",
    ]
    assert main([f"--config-name={PRESET}", *drafting, "trainer.dry_run=true"]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    code = main(
        [f"--config-name={PRESET}", *drafting, "actor_rollout_ref.model.mtp.enable_train=True", "trainer.dry_run=true"]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "mtp.enable_train=true" in errors[0]
    assert "set mtp.enable_train=false" in errors[0] and "mtp.enable=" not in errors[0]


@pytest.mark.parametrize(
    "rollout_is, threshold, ok",
    [
        ("token", "'0.5_4.0'", True),
        ("sequence", "3", True),
        ("token", "'4.0_0.5'", False),
        ("null", "null", True),
        ("token", "null", False),
    ],
)
def test_rollout_is_threshold_takes_verls_lower_upper_text_and_null_where_nothing_reads_it(
    rollout_is, threshold, ok, capsys
):
    # verl main's run_hy_v3_megatron.sh writes "0.5_4.0" (IcePop); its one-step-off scripts null with rollout_is=null.
    code = main(
        [
            f"--config-name={PRESET}",
            f"algorithm.rollout_correction.rollout_is={rollout_is}",
            f"algorithm.rollout_correction.rollout_is_threshold={threshold}",
            "trainer.dry_run=true",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert (code, errors) == (0, []) if ok else (code == 2 and len(errors) == 1 and "rollout_is_threshold" in errors[0])


@pytest.mark.parametrize(
    "token",
    [
        "actor_rollout_ref.actor.megatron.router_replay.mode=R3",
        "actor_rollout_ref.rollout.enable_rollout_routing_replay=True",
    ],
)
def test_router_replay_is_refused_in_one_line_naming_what_runs_even_under_megatron(token, capsys):
    code = main([f"--config-name={PRESET}", token, "trainer.dry_run=true"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "set it to disabled (false), which runs here" in errors[0]


def test_distillation_runs_its_serving_keys_are_no_ops_and_top_k_runs(capsys):
    launch = [
        f"--config-name={PRESET}",
        "distillation.enabled=true",
        "distillation.nnodes=1",
        "distillation.teacher_models.teacher_model.model_path=models/quickstart-tiny",
        "distillation.teacher_models.teacher_model.inference.tensor_model_parallel_size=2",
        "distillation.distillation_loss.use_chunked_topk=true",
        "trainer.dry_run=true",
    ]
    assert main(launch) == 0
    err = capsys.readouterr().err
    assert not [line for line in err.splitlines() if line.startswith("error:")]
    assert all(
        key in err
        for key in (
            "distillation.nnodes",
            "inference.tensor_model_parallel_size",
            "distillation.distillation_loss.use_chunked_topk",
        )
    )
    topk = ["distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=8"]
    assert main([*launch, *topk]) == 0
    assert not [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    code = main([*launch, "distillation.distillation_loss.loss_mode=reverse_kl_topk"])
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "loss_mode='reverse_kl_topk' is not supported" in errors[0]


@pytest.mark.parametrize("factor, ok", [("1.0", True), ("0.1", False)])
def test_torchtitan_min_lr_factor_of_one_is_the_constant_schedule(factor, ok, capsys):
    # verl's tests/special_e2e/run_ppo_trainer_torchtitan.sh sets 1.0: no decay after the warmup.
    code = main(
        [f"--config-name={PRESET}", f"actor_rollout_ref.actor.optim.min_lr_factor={factor}", "trainer.dry_run=true"]
    )
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert (
        (code, errors) == (0, []) and "rlbridge's constant schedule" in err
        if ok
        else (code == 2 and len(errors) == 1 and "optim.lr_scheduler_type=cosine and optim.min_lr_ratio" in errors[0])
    )


def test_another_engines_offload_flags_become_fsdp2_offload(capsys):
    shim = LegacyConfigShim()
    tokens = [
        "actor_rollout_ref.actor.megatron.param_offload=True",
        "actor_rollout_ref.actor.veomni.optimizer_offload=True",
        "critic.torchtitan.param_offload=True",
        "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
    ]
    cfg = compose_config(PRESET, shim.migrate_overrides(tokens), migrate=shim.migrate_config)
    fsdp = cfg.actor_rollout_ref.actor.fsdp_config
    assert fsdp.param_offload and fsdp.optimizer_offload and cfg.critic.fsdp.param_offload
    assert verdicts.declared("actor_rollout_ref.actor.megatron.param_offload").verdict is Verdict.MOVED
    assert verdicts.declared("actor_rollout_ref.actor.megatron.tensor_model_parallel_size").verdict is Verdict.NO_OP


def test_reward_model_type_discriminative_is_what_rlbridge_runs_and_generative_is_refused():
    status, lines, migrated = shim_one("reward_model.model.type=discriminative")
    assert status == "passed" and migrated == [] and any("sequence classifier" in line for line in lines)
    status, lines, _ = shim_one("reward_model.model.type=generative")
    assert status == "refused" and len(lines) == 1 and "reward.custom_reward_function" in lines[0]


@pytest.mark.parametrize(
    "old, new, upper",
    [("token", "token_k1", 1.05), ("sequence", "seq_sum_k1", 1.2), ("geometric", "seq_mean_k1", 1.01)],
)
def test_verl_06_rejection_criteria_keep_the_tokens_verl_06_kept(old, new, upper):
    import torch

    from core_v1.algorithms.rollout_correction import RolloutCorrectionConfig, compute_rollout_correction

    status, _, migrated = shim_one(f"algorithm.rollout_correction.rollout_rs={old}")
    assert status == "passed" and migrated == [f"algorithm.rollout_correction.rollout_rs={new}"]
    generator = torch.Generator().manual_seed(0)
    rollout = -torch.rand(64, 12, generator=generator) * 3
    training = rollout + torch.randn(64, 12, generator=generator) * 0.05
    mask = (torch.rand(64, 12, generator=generator) > 0.1).float()
    log_ratio = training - rollout
    # verl 0.6: a ratio statistic kept within [L, U] (L = 1/U unless rollout_rs_threshold_lower is set)
    statistic = {
        "token": log_ratio,
        "sequence": (log_ratio * mask).sum(-1, keepdim=True),
        "geometric": (log_ratio * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True),
    }[old].clamp(-20, 20)
    lower = upper**-0.5  # rollout_rs_threshold_lower: rlbridge's line asks for '<1/U>_<1/L>'
    for lower, spec in [(None, str(upper)), (lower, f"{1 / upper}_{1 / lower}")]:
        weight = statistic.exp().expand_as(log_ratio)
        kept_by_verl = mask * ((weight >= (lower or 1 / upper)) & (weight <= upper)).float()
        config = RolloutCorrectionConfig(rollout_rs=new, rollout_rs_threshold=spec)
        kept = compute_rollout_correction(training, rollout, mask, config).response_mask
        assert 0 < kept.sum() < mask.sum()
        assert torch.equal(kept, kept_by_verl)
