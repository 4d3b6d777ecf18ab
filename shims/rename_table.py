"""The V0 -> V1 rename table: the V0 -> V1 facts as data (docs/migration.md is their user-facing page), shared by `shims` and `codemods`.

This module is the single source of truth for what every V0-era name becomes on V1. The run-time
config shim and the `python -m codemods.migrate` tool both read it, so a script migrated on disk
and a script shimmed at start-up always agree. It imports only the standard library: the config
shim calls it on every start-up, and the codemods call it once per override token.

Four tables, each with a small query function:

- config keys (`CONFIG_KEY_ROWS`, `resolve_config_key(key, value)`): a dotted Hydra key (without
  its `+`, `++` or `~` prefix) and, when known, its value as written, give a `KeyAction`:
  mechanical, mechanical with a caveat, manual, or delete; the new key; the message. A row's key
  may end in `.<k>`, which matches the bare prefix and any number of further components, which
  are carried over to the new key (`reward_model.rollout.<k>` -> `reward.reward_model.rollout.<k>`).
  A row with `new_values` also rewrites the value (verl's `use_policy_gradient=true` is
  `loss_type=reinforce`), and applies only to the values it lists. Rows are matched most
  specific first (longest literal prefix), so an exact row wins over a wildcard row that also
  covers it.
- entrypoints (`ENTRYPOINT_ROWS`, `resolve_entrypoint(module)`): `python -m <module>` targets.
- Python names (`PYTHON_NAME_ROWS`, `resolve_python_name(qualified_name)`): modules and classes,
  matched by the longest dotted prefix.
- V0-only features (`V0_ONLY_FEATURES`, `v0_only_feature(key, value)`): what rlbridge's V1 does
  not carry yet; a script using one stays on V0 through `trainer.use_v1=false`.

Every row names the codemod rule (`rule`) that applies it, so a user can `--only`/`--skip` it and a
report line says which rule spoke.
"""

from __future__ import annotations

import enum
import fnmatch
from dataclasses import dataclass

WILDCARD = "<k>"
KEEP_ON_V0_KEY = "trainer.use_v1"
# verl's launch scripts name the sampler of verl's own test `tests/utils/dataset/test_create_rl_sampler_on_cpu.py`.
VERL_TEST_SAMPLER_PATHS = (
    "pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu",
    "tests.utils.dataset.test_create_rl_sampler_on_cpu",
)
RANDOM_CURRICULUM_MODULE = "core_v1.data.random_curriculum"


class Action(str, enum.Enum):
    """What a migration does with a legacy name (mechanical, with a caveat, or by hand)."""

    MECHANICAL = "M"  # rewrite it
    CAVEAT = "M*"  # rewrite it and say what changed in meaning
    MANUAL = "H"  # a person must decide: marker + report; at run time an error
    DELETE = "delete"  # the key has no meaning any more: remove it


@dataclass(frozen=True)
class KeyAction:
    """The answer for one config key (and value): what to do, the new key, and why.

    `new_key` is the full new dotted key for MECHANICAL/CAVEAT, None for MANUAL and DELETE.
    `also_set` lists (key, value) overrides that the old meaning now needs in addition; a migration
    adds each one unless the user already set that key. `new_value` is the value to write at
    `new_key` instead of the one written (None: keep the value).
    """

    old_key: str
    action: Action
    new_key: str | None
    rule: str
    message: str
    also_set: tuple[tuple[str, str], ...] = ()
    new_value: str | None = None


@dataclass(frozen=True)
class ConfigKeyRow:
    """One row of the config-key table.

    `only_values`: the row applies only when the value is one of these (lower-cased); an unknown
    value (a shell variable) makes the row MANUAL, since a person must check it.
    `new_values`: (value as written, lower-cased -> value on V1) pairs; the row applies only to
    these values and writes the mapped one (an unknown value makes the row MANUAL, unless
    `unknown_means_other`: then the row does not apply).
    """

    old: str
    action: Action
    new: str | None
    rule: str
    message: str = ""
    only_values: frozenset[str] | None = None
    also_set: tuple[tuple[str, str], ...] = ()
    new_values: tuple[tuple[str, str], ...] = ()
    unknown_means_other: bool = False  # an unknown value is taken as one the row does not list (no question)

    @property
    def applies_to(self) -> frozenset[str] | None:
        """The values the row is limited to (None: any value)."""
        if self.new_values:
            return frozenset(old for old, _ in self.new_values)
        return self.only_values

    @property
    def literal_prefix(self) -> str:
        return self.old[: -len(WILDCARD) - 1] if self.is_wildcard else self.old

    @property
    def is_wildcard(self) -> bool:
        return self.old.endswith("." + WILDCARD)

    def matches(self, key: str) -> bool:
        prefix = self.literal_prefix
        if self.is_wildcard:
            return key == prefix or key.startswith(prefix + ".")
        return key == prefix

    def new_key_for(self, key: str) -> str | None:
        if self.new is None:
            return None
        if not self.new.endswith("." + WILDCARD):
            return self.new
        return self.new[: -len(WILDCARD) - 1] + key[len(self.literal_prefix) :]


def _rows(action: Action, rule: str, pairs: list[tuple[str, str | None]], message: str = "") -> list[ConfigKeyRow]:
    return [ConfigKeyRow(old, action, new, rule, message) for old, new in pairs]


_SERVED_REWARD_MODEL = (
    "the reward model has no worker of its own: the trainer's reward stage runs it on the "
    "trainer's device (reward.reward_model.*), so verl's worker settings for it (strategy, "
    "parallelism, offload, dynamic batches) have no equivalent; drop the key "
    "(reward.reward_model.micro_batch_size_per_gpu and max_length size its forward passes)"
)
_RM_FORWARD_ONLY = (
    "how verl's reward-model worker batched, offloaded or computed its forward passes; rlbridge's "
    "reward stage scores each response whole with the same model (reward.reward_model."
    "micro_batch_size_per_gpu sets the rows per forward pass), so it cannot change a score"
)
_NO_CUSTOM_REWARD_MANAGER = (
    "custom reward-loop classes are not supported on V1 nor on V0: drop the key "
    "(reward.reward_manager.name picks naive, dapo, prime, gdpo or batch) and score with "
    "reward.custom_reward_function"
)

CONFIG_KEY_ROWS: tuple[ConfigKeyRow, ...] = tuple(
    _rows(
        Action.MECHANICAL,
        "reward-model-moved",
        [
            ("reward_model.enable", "reward.reward_model.enable"),
            ("reward_model.enable_resource_pool", "reward.reward_model.enable_resource_pool"),
            ("reward_model.n_gpus_per_node", "reward.reward_model.n_gpus_per_node"),
            ("reward_model.nnodes", "reward.reward_model.nnodes"),
            ("reward_model.model.path", "reward.reward_model.model_path"),
            ("reward_model.rollout.<k>", "reward.reward_model.rollout.<k>"),
            ("reward_model.num_workers", "reward.num_workers"),
            # The sequence-classification reward model's own settings (core_v1/reward/reward_model.py).
            ("reward_model.micro_batch_size_per_gpu", "reward.reward_model.micro_batch_size_per_gpu"),
            ("reward_model.max_length", "reward.reward_model.max_length"),
            ("reward_model.model.input_tokenizer", "reward.reward_model.input_tokenizer"),
            ("reward_model.model.trust_remote_code", "reward.reward_model.trust_remote_code"),
        ],
    )
    + _rows(
        Action.CAVEAT,
        "reward-model-moved",
        [
            ("reward_model.micro_batch_size", "reward.reward_model.micro_batch_size_per_gpu"),
        ],
        message="verl divided this global count by the number of ranks; the reward model runs in one process, so "
        "it is now the rows per forward pass",
    )
    + [
        ConfigKeyRow("reward_model.reward_manager", Action.MECHANICAL, "reward.reward_manager.name", "reward-manager"),
        ConfigKeyRow("reward_manager.<k>", Action.MECHANICAL, "reward.reward_manager.<k>", "reward-manager"),
    ]
    # Moved to the V1 home verl gave them, where the key table refuses them (on V1 and V0) with the reason.
    + _rows(
        Action.CAVEAT,
        "reward-loop-source",
        [
            ("reward_model.reward_loop_source", "reward.reward_manager.source"),
            ("reward_model.reward_loop_module_path", "reward.reward_manager.module.path"),
        ],
        message=_NO_CUSTOM_REWARD_MANAGER,
    )
    + _rows(
        Action.CAVEAT,
        "reward-loop-source",
        [
            ("reward_model.reward_loop_class_name", "reward.reward_manager.name"),
        ],
        message="reward.reward_manager.name picks one of the built-in reward managers (naive, dapo, prime, gdpo, batch)",
    )
    + _rows(
        Action.MECHANICAL,
        "reward-kwargs",
        [
            ("reward_model.reward_kwargs.<k>", "reward.reward_kwargs.<k>"),
            # DAPO recipe's home of the overlong buffer; V1's dapo manager reads verl's reward_kwargs name.
            ("reward_model.overlong_buffer.<k>", "reward.reward_kwargs.overlong_buffer_cfg.<k>"),
        ],
    )
    + _rows(
        Action.MECHANICAL,
        "sandbox-fusion",
        [
            ("reward_model.sandbox_fusion.<k>", "reward.sandbox_fusion.<k>"),
            ("sandbox_fusion.<k>", "reward.sandbox_fusion.<k>"),
        ],
    )
    + _rows(
        Action.MECHANICAL,
        "custom-reward-function",
        [
            ("custom_reward_function.<k>", "reward.custom_reward_function.<k>"),
        ],
    )
    + _rows(
        Action.DELETE,
        "removed-keys",
        [
            ("reward_model.use_reward_loop", None),
            ("trainer.use_legacy_worker_impl", None),
        ],
        message="V1 always uses the reward loop and the new worker implementation; the key has no effect",
    )
    + [
        # `discriminative` is what rlbridge's reward model is: that value is a no-op (shims.verl_keys).
        ConfigKeyRow(
            "reward_model.model.type",
            Action.MANUAL,
            None,
            "reward-model-served",
            "rlbridge's reward model is a sequence classifier run in the trainer's reward stage (verl's "
            "'discriminative'; reward.reward_model.*); a generative reward model served through "
            "reward_model.rollout.* and called by the reward function is not supported: score with "
            "reward.custom_reward_function",
            only_values=frozenset({"generative"}),
        ),
    ]
    + _rows(
        Action.MANUAL,
        "reward-model-served",
        [
            ("reward_model.strategy", None),
            ("reward_model.ulysses_sequence_parallel_size", None),
            ("reward_model.model.<k>", None),
            ("reward_model.megatron.<k>", None),
        ],
        message=_SERVED_REWARD_MODEL,
    )
    # How verl's worker batched, offloaded or computed the forward pass: no score depends on it.
    + _rows(
        Action.DELETE,
        "reward-model-served",
        [
            ("reward_model.use_dynamic_bsz", None),
            ("reward_model.forward_max_token_len_per_gpu", None),
            ("reward_model.param_offload", None),
            ("reward_model.model.use_remove_padding", None),
            ("reward_model.model.use_fused_kernels", None),
            ("reward_model.model.use_shm", None),
            ("reward_model.model.fsdp_config.<k>", None),
        ],
        message=_RM_FORWARD_ONLY,
    )
    + [
        # Anything else under reward_model: never silently ignored.
        ConfigKeyRow(
            "reward_model.<k>",
            Action.MANUAL,
            None,
            "reward-model-served",
            "this reward_model key has no V1 home; the reward model now lives under reward.reward_model.*",
        ),
    ]
    + _rows(Action.MECHANICAL, "critic-fsdp-config", [("critic.model.fsdp_config.<k>", "critic.fsdp.<k>")])
    + [
        ConfigKeyRow(
            "actor_rollout_ref.rollout.mode",
            Action.DELETE,
            None,
            "rollout-mode-sync",
            "server-based rollout is the only mode on V1; the synchronous rollout mode is gone",
            only_values=frozenset({"sync"}),
        ),
    ]
    + _rows(
        Action.MECHANICAL,
        "checkpoint-engine-bucket",
        [
            (
                "actor_rollout_ref.rollout.update_weights_bucket_megabytes",
                "actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes",
            ),
        ],
    )
    + [
        ConfigKeyRow(
            "actor_rollout_ref.rollout.multi_turn.completion_callback",
            Action.MANUAL,
            None,
            "multi-turn-removed",
            "completion callbacks are removed: put that logic in an AgentLoop",
        ),
        ConfigKeyRow(
            "actor_rollout_ref.rollout.multi_turn.enable",
            Action.CAVEAT,
            "actor_rollout_ref.rollout.multi_turn.enable",
            "multi-turn-agent-loop",
            "multi-turn rollout now runs through an agent loop: rows without an agent_name column use "
            "actor_rollout_ref.rollout.agent.default_agent_loop",
            only_values=frozenset({"true"}),
            also_set=(("actor_rollout_ref.rollout.agent.default_agent_loop", "tool_agent"),),
        ),
        ConfigKeyRow(
            "data.datagen.<k>",
            Action.MANUAL,
            None,
            "data-hooks-removed",
            "dynamic data generation (data.datagen) is removed; generate the data before training",
        ),
        # verl's example scripts name a sampler from verl's own test tree; rlbridge ships its equivalent.
        ConfigKeyRow(
            "data.sampler.class_path",
            Action.MECHANICAL,
            "data.sampler.class_path",
            "verl-test-sampler",
            "verl's test sampler RandomCurriculumSampler is rlbridge's core_v1.data.random_curriculum."
            "RandomCurriculumSampler (a random order each pass, a curriculum update that changes nothing)",
            new_values=tuple((path, "pkg://" + RANDOM_CURRICULUM_MODULE) for path in VERL_TEST_SAMPLER_PATHS),
            unknown_means_other=True,
        ),  # a path from a variable is the user's own sampler
    ]
    + _rows(
        Action.CAVEAT,
        "skip-rollout",
        [
            ("actor_rollout_ref.rollout.skip_rollout", "skip.rollout.enable"),
            ("actor_rollout_ref.rollout.skip_dump_dir", "skip.rollout.dump_dir"),
        ],
        message="rollout skipping moved to the top-level skip section; dumps from V0 runs are not read by V1",
    )
    + _rows(
        Action.CAVEAT,
        "profiler-keys",
        [
            ("trainer.profile_steps", "global_profiler.steps"),
            (
                "trainer.controller_nsight_options.<k>",
                "global_profiler.global_tool_config.nsys.controller_nsight_options.<k>",
            ),
            ("trainer.worker_nsight_options.<k>", "global_profiler.global_tool_config.nsys.worker_nsight_options.<k>"),
            ("trainer.npu_profile.<k>", "global_profiler.global_tool_config.npu.<k>"),
        ],
        message="profiling is configured under global_profiler; also set global_profiler.tool (nsys, npu, torch)",
    )
    + _rows(
        Action.MECHANICAL,
        "ray-init",
        [
            ("ray_init.num_cpus", "ray_kwargs.ray_init.num_cpus"),
            ("ray_init.timeline_json_file", "ray_kwargs.timeline_json_file"),
        ],
    )
    + _rows(
        Action.MECHANICAL,
        "actor-fsdp-config",
        [
            (
                "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
                "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
            ),
            ("actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.actor.fsdp_config.use_torch_compile"),
            ("actor_rollout_ref.ref.use_torch_compile", "actor_rollout_ref.ref.fsdp_config.use_torch_compile"),
        ],
    )
    + [
        # verl 0.6's switch became loss_type in 0.7, with the same two losses (bypass mode only).
        ConfigKeyRow(
            "algorithm.rollout_correction.use_policy_gradient",
            Action.CAVEAT,
            "algorithm.rollout_correction.loss_type",
            "rollout-correction-loss-type",
            "verl 0.7 replaced the switch by loss_type: true (REINFORCE with IS weights, no clipping) is "
            "reinforce, false (PPO clipped against the rollout policy) is ppo_clip, which also drops the "
            "tokens rollout_rs rejects (verl 0.6 only measured them with false)",
            new_values=(("true", "reinforce"), ("false", "ppo_clip")),
        ),
        # verl 0.7 renamed 0.6's three criteria; each is the same statistic of the log-ratio, and one
        # threshold U still keeps 1/U <= ratio <= U (core_v1.algorithms.rollout_correction).
        ConfigKeyRow(
            "algorithm.rollout_correction.rollout_rs",
            Action.CAVEAT,
            "algorithm.rollout_correction.rollout_rs",
            "rollout-correction",
            "verl 0.7 renamed verl 0.6's rejection criteria (token -> token_k1, sequence -> seq_sum_k1, "
            "geometric -> seq_mean_k1): the same statistic, and a single rollout_rs_threshold U still keeps "
            "1/U <= ratio <= U",
            new_values=(("token", "token_k1"), ("sequence", "seq_sum_k1"), ("geometric", "seq_mean_k1")),
            unknown_means_other=True,
        ),
        ConfigKeyRow(
            "algorithm.rollout_correction.rollout_rs_threshold_lower",
            Action.MANUAL,
            None,
            "rollout-correction",
            "removed in verl 0.7: with rollout_rs_threshold=U, write both bounds as rollout_rs_threshold="
            "'<1/U>_<1/L>' (a k1 criterion bounds -log ratio, so that keeps L <= ratio <= U as before)",
        ),
        ConfigKeyRow(
            "algorithm.rollout_correction.rollout_token_veto_threshold",
            Action.MANUAL,
            None,
            "rollout-correction",
            "removed in verl 0.7, and rlbridge has no equivalent of dropping a whole sequence for one token "
            "whose ratio is below the threshold: rollout_rs=token_k1 drops only that token, seq_max_k2 bounds "
            "both sides; drop the key or choose one of those",
        ),
    ]
    # Older homes of keys verl moved itself (shims/verl_keys/verl_keys.json lists the tags).
    + _rows(
        Action.MECHANICAL,
        "worker-fsdp-config",
        [
            (
                "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
                "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
            ),
            ("critic.ulysses_sequence_parallel_size", "critic.fsdp.ulysses_sequence_parallel_size"),
            ("actor_rollout_ref.ref.param_offload", "actor_rollout_ref.ref.fsdp_config.param_offload"),
        ],
    )
    + _rows(
        Action.CAVEAT,
        "engine-offload",
        [
            (f"{section}.{engine}.{flag}", f"{home}.{flag}")
            for section, home in (
                ("actor_rollout_ref.actor", "actor_rollout_ref.actor.fsdp_config"),
                ("actor_rollout_ref.ref", "actor_rollout_ref.ref.fsdp_config"),
                ("critic", "critic.fsdp"),
            )
            for engine in ("megatron", "mindspeed", "veomni", "torchtitan")
            for flag in ("param_offload", "optimizer_offload")
        ],
        message="the offload flag of verl's Megatron, MindSpeed, VeOmni or TorchTitan engine: rlbridge trains with FSDP2, "
        "which offloads the same weights or optimizer state with fsdp_config.* (memory only, the same update)",
    )
    + _rows(
        Action.CAVEAT,
        "moe-router-loss",
        [
            (f"actor_rollout_ref.actor.{engine}.{key}", f"actor_rollout_ref.actor.moe.{home}")
            for engine in ("megatron.override_transformer_config", "mindspeed.mcore_kwargs")
            for key, home in (
                ("moe_aux_loss_coeff", "aux_loss_coeff"),
                ("moe_z_loss_coeff", "z_loss_coeff"),
                ("moe_router_load_balancing_type", "load_balancing_type"),
            )
        ],
        message="Megatron-core's MoE router losses: rlbridge's FSDP2 actor adds the same per-layer load-balancing and "
        "z-loss terms from the Hugging Face MoE model's router logits (core_v1.algorithms.moe)",
    )
    + _rows(
        Action.MECHANICAL,
        "tool-config-path",
        [
            ("data.tool_config_path", "actor_rollout_ref.rollout.multi_turn.tool_config_path"),
            ("data.function_tool_path", "actor_rollout_ref.rollout.multi_turn.function_tool_path"),
        ],
    )
    + _rows(
        Action.CAVEAT,
        "checkpoint-contents",
        [
            ("actor_rollout_ref.actor.checkpoint.contents", "actor_rollout_ref.actor.checkpoint.save_contents"),
            ("critic.checkpoint.contents", "critic.checkpoint.save_contents"),
        ],
        message="verl 0.3's checkpoint.contents became save_contents and load_contents; load_contents follows "
        "save_contents unless it is set (as in verl)",
    )
    + _rows(
        Action.CAVEAT,
        "multi-turn-max-turns",
        [
            (
                "actor_rollout_ref.rollout.multi_turn.max_turns",
                "actor_rollout_ref.rollout.multi_turn.max_assistant_turns",
            ),
        ],
        message="verl 0.4's max_turns split into max_assistant_turns and max_user_turns",
    )
    + _rows(
        Action.MECHANICAL,
        "val-generations",
        [
            ("trainer.val_generations_to_log_to_wandb", "trainer.log_val_generations"),
        ],
    )
)

# Most specific first: a longer literal prefix wins, and an exact row wins over a wildcard one.
_ROWS_BY_SPECIFICITY = sorted(CONFIG_KEY_ROWS, key=lambda r: (-len(r.literal_prefix), r.is_wildcard))


def _row_for(key: str) -> ConfigKeyRow | None:
    """The first row of `_ROWS_BY_SPECIFICITY` that matches `key`. A row can only match a key it
    prefixes at a dot (or equals), so only the rows filed under the key's dotted prefixes are
    tried: every config leaf of every reading is looked up, and the table has hundreds of rows."""
    by_prefix = _rows_by_prefix(_ROWS_BY_SPECIFICITY)
    parts = key.split(".")
    found = None
    for end in range(1, len(parts) + 1):
        for position, row in by_prefix.get(".".join(parts[:end]), ()):
            if (found is None or position < found[0]) and row.matches(key):
                found = (position, row)
                break  # a later row under this prefix comes later in the order too
    return None if found is None else found[1]


_ROWS_FILED: tuple[list, dict] = ([], {})


def _rows_by_prefix(rows: list[ConfigKeyRow]) -> dict[str, list[tuple[int, ConfigKeyRow]]]:
    """(position, row) by literal prefix, in the rows' order; filed again when `rows` is another
    list (a test may replace the table)."""
    global _ROWS_FILED
    if _ROWS_FILED[0] is not rows:
        filed: dict[str, list[tuple[int, ConfigKeyRow]]] = {}
        for position, row in enumerate(rows):
            filed.setdefault(row.literal_prefix, []).append((position, row))
        _ROWS_FILED = (rows, filed)
    return _ROWS_FILED[1]


def normalize_value(value: object) -> str:
    """The lower-cased text form of a parsed override value, as the rows' value sets spell it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value).strip().lower()


def resolve_config_key(key: str, value: str | None = None) -> KeyAction | None:
    """What a legacy config key (with its value, None when unknown) becomes on V1.

    `key` is a bare dotted key (no `+`, `++`, `~`). `value` is its value as text, or None when it
    is not known (a shell variable, a deletion, a YAML subtree). Returns None when the key is not
    legacy, i.e. means the same on V1.
    """
    row = _row_for(key)
    if row is None:
        return None
    norm = None if value is None else normalize_value(value)
    limited = row.applies_to
    if limited is not None:
        if norm is None and row.unknown_means_other:
            return None
        if norm is None:
            return KeyAction(
                key,
                Action.MANUAL,
                None,
                row.rule,
                f"value unknown here; when it is one of {sorted(limited)}: {row.message}",
            )
        if norm not in limited:
            return None
    action, message = row.action, row.message
    new_key = row.new_key_for(key)
    new_value = dict(row.new_values).get(norm) if norm is not None else None
    if not message and new_key is not None:
        message = f"renamed to {new_key}" if new_value is None else f"{key}={norm} is {new_key}={new_value}"
    return KeyAction(key, action, new_key, row.rule, message, row.also_set, new_value)


def moved_by_name(key: str) -> bool:
    """Whether a row names `key` itself (no wildcard) and moves it to a new home: that home's verdict is
    the key's, before any wildcard verdict of the section it leaves (`megatron.param_offload`)."""
    return any(
        row.old == key
        and not row.is_wildcard
        and row.new is not None
        and row.action in (Action.MECHANICAL, Action.CAVEAT)
        for row in CONFIG_KEY_ROWS
    )


def is_value_dependent(key: str) -> bool:
    """True when the answer for `key` depends on its value (so a caller should parse the value)."""
    row = _row_for(key)
    return (row is not None and row.applies_to is not None) or any(f.key == key for f in V0_ONLY_FEATURES)


# --------------------------------------------------------------------------- V0-only features


@dataclass(frozen=True)
class V0OnlyFeature:
    """A V0 feature rlbridge's V1 does not carry yet: a script using it keeps `trainer.use_v1=false`.

    `values`: the values that turn the feature on (lower-cased); None means any value other than
    null/empty does.
    """

    key: str
    name: str
    reason: str
    values: frozenset[str] | None = None
    rule: str = "keep-on-v0"

    def is_on(self, value: str | None) -> bool | None:
        """True/False for a known value, None when the value is unknown."""
        if value is None:
            return None
        norm = normalize_value(value)
        if self.values is None:
            return norm not in ("", "null", "none", "~")
        return norm in self.values


# PF-PPO runs on V1 too (core_v1.algorithms.pf_ppo); core_v1.config.schema refuses the same list on V1.
V0_ONLY_FEATURES: tuple[V0OnlyFeature, ...] = (
    V0OnlyFeature(
        "actor_rollout_ref.rollout.checkpoint_manager_class",
        "custom checkpoint manager",
        "a custom checkpoint manager class has no V1 hook yet (V1 syncs weights through "
        "actor_rollout_ref.rollout.checkpoint_engine backends)",
    ),
)


def v0_only_feature(key: str) -> V0OnlyFeature | None:
    """The V0-only feature a bare dotted key switches, or None."""
    return next((f for f in V0_ONLY_FEATURES if f.key == key), None)


# --------------------------------------------------------------------------- entrypoints


@dataclass(frozen=True)
class EntrypointRow:
    """`python -m old` becomes `python -m new` plus `also_set` overrides.

    `old` is a module name, or a pattern where `*` stands for any dotted rest (`recipe.*`). `new`
    None means rlbridge has no such entry: the launch keeps its module and gets a marker saying
    `message`. `trainer_config` says whether the launch takes verl's PPO trainer overrides (then
    they are migrated like any trainer launch's); the other entries (SFT, generation) have their
    own config, whose keys are left as they are.
    """

    old: str
    new: str | None
    also_set: tuple[tuple[str, str], ...] = ()
    rule: str = "entrypoint"
    message: str = ""
    trainer_config: bool = True
    # verl's own configs of this entry (`--config-name`), which rlbridge's config stands in for: the
    # migration drops `--config-path`/`--config-name` naming one (their settings are `also_set`).
    own_configs: tuple[str, ...] = ()
    # The entry's own Hydra config, (config_path relative to the module's folder, config_name), as its
    # `@hydra.main` names it: rlbridge composes that same file, so the launch is given both flags,
    # a relative path read from where `python -m` finds the module (`recipe/dapo/config`).
    config: tuple[str, str] | None = None
    # What the entry scores with when the launch names no reward function, where rlbridge's built-in
    # scorer differs: the migration leaves it as a marker.
    own_scorer: str | None = None


V1_ENTRYPOINT = "core_v1.main_ppo"
_NOT_SHIPPED = "rlbridge does not ship verl"
_RECIPE = (
    "verl's recipes are not part of rlbridge: port what the recipe changes onto rlbridge's trainer "
    "(python -m core_v1.main_ppo, custom trainer modes and stages), or keep running it with verl"
)
# verl recipes whose trainer is verl's PPO trainer plus what rlbridge's V1 has: their launches run
# core_v1.main_ppo on the recipe's own config (facts of verl 0.4-0.6, where recipe/ is in verl's tree).
_DAPO = (
    "verl's DAPO recipe is rlbridge's trainer with what its config turns on: dynamic sampling "
    "(algorithm.filter_groups), clip-higher (actor.clip_ratio_low/high), the overlong buffer of the "
    "dapo reward manager (reward.reward_kwargs.overlong_buffer_cfg); the recipe's config is composed "
    "as it is"
)
_ENTROPY = (
    "verl's entropy recipe is the DAPO trainer with the clip_cov/kl_cov policy losses "
    "(actor.policy_loss.loss_mode), which rlbridge has; the recipe's config is composed as it is"
)
_TRANSFER_QUEUE = (
    "verl's TransferQueue recipe is verl's PPO trainer with its batches moved through TransferQueue; "
    "rlbridge's trainer moves them through its own transfer store; the recipe's config is composed as it is"
)
_ENTROPY_SCORER = (
    "with no reward.custom_reward_function, verl's entropy recipe scores every sample with its own math "
    "grader (recipe/entropy/reward_score), not verl's scorer of the data source that rlbridge uses: "
    "to keep the recipe's grading, name a file whose compute_score(data_source, solution_str, "
    "ground_truth, extra_info) calls that grader (reward.custom_reward_function.path)"
)
# verl recipes whose algorithm rlbridge lacks: one line naming it.
_RECIPE_ALGORITHMS = {
    "recipe.prime.main_prime": "PRIME (an implicit process reward model trained online beside the policy)",
    "recipe.spin.main_spin": "SPIN (self-play fine-tuning: a DPO-style loss against the previous iterate's "
    "generations)",
    "recipe.sppo.main_sppo": "SPPO (self-play preference optimization: a squared loss towards preference "
    "probabilities)",
    "recipe.flowrl.main_flowrl": "FlowRL (a trajectory-balance loss with a learned partition function)",
}
_EXPERIMENTAL = (
    "verl's experimental trainers are not part of rlbridge; for asynchronous training use "
    "python -m core_v1.main_ppo with trainer.v1.trainer_mode=colocate_async or separate_async"
)

# verl's experimental one-step-off and fully async trainers (recipes before verl 0.8) are separate_async; their configs set these
# too (the rollout's log-probs are the old policy's, weights go out over NCCL). Their own rollout.* and
# async_training.* keys are translated at start-up (shims/async_trainers.py).
_SEPARATE_ASYNC = (
    ("trainer.v1.trainer_mode", "separate_async"),
    ("actor_rollout_ref.rollout.checkpoint_engine.backend", "nccl"),
    ("algorithm.rollout_correction.bypass_mode", "true"),
)
# The fully async trainer's config always has an async_training section, which tells the start-up
# translation the launch is fully async; a launch that sets none of its keys gets verl's default of one.
_FULLY_ASYNC = (("async_training.trigger_parameter_sync_step", "4"),)
_ASYNC_CONFIGS = (
    "one_step_off_ppo_trainer",
    "one_step_off_ppo_megatron_trainer",
    "fully_async_ppo_trainer",
    "fully_async_ppo_megatron_trainer",
)
_ASYNC_TRAINER = (
    "verl's experimental asynchronous trainer runs as rlbridge's separate_async mode; its rollout.* and "
    "async_training.* keys are translated at start-up, one line each"
)

ENTRYPOINT_ROWS: tuple[EntrypointRow, ...] = (
    EntrypointRow("verl.trainer.main_ppo", V1_ENTRYPOINT),
    EntrypointRow("verl.trainer.main_ppo_sync", V1_ENTRYPOINT, (("trainer.v1.trainer_mode", "sync"),)),
    EntrypointRow("legacy_v0.main_ppo", V1_ENTRYPOINT),
    EntrypointRow(V1_ENTRYPOINT, V1_ENTRYPOINT),
    # verl entries rlbridge has no counterpart for: a marker naming the entry.
    EntrypointRow(
        "verl.trainer.fsdp_sft_trainer",
        None,
        rule="other-entrypoint",
        trainer_config=False,
        message=f"verl's SFT trainer; rlbridge trains with RL only ({_NOT_SHIPPED}): run SFT with verl "
        "or another SFT trainer",
    ),
    EntrypointRow(
        "verl.trainer.sft_trainer*",
        None,
        rule="other-entrypoint",
        trainer_config=False,
        message=f"verl's SFT trainer; rlbridge trains with RL only ({_NOT_SHIPPED}): run SFT with verl "
        "or another SFT trainer",
    ),
    EntrypointRow(
        "verl.trainer.main_generation*",
        None,
        rule="other-entrypoint",
        trainer_config=False,
        message=f"verl's offline generation entry; {_NOT_SHIPPED}: generate with verl or vLLM directly",
    ),
    EntrypointRow(
        "verl.trainer.main_eval",
        None,
        rule="other-entrypoint",
        trainer_config=False,
        message=f"verl's offline evaluation entry; {_NOT_SHIPPED}: score generations with "
        "core_v1.reward.scorers or keep using verl",
    ),
    EntrypointRow(
        "recipe.*.main_eval",
        None,
        rule="other-entrypoint",
        trainer_config=False,
        message=f"a verl recipe's offline evaluation entry; {_NOT_SHIPPED}",
    ),
    *(
        EntrypointRow(module, V1_ENTRYPOINT, _SEPARATE_ASYNC, message=_ASYNC_TRAINER, own_configs=_ASYNC_CONFIGS)
        for module in ("verl.experimental.one_step_off_policy.main_ppo", "recipe.one_step_off_policy.main_ppo")
    ),
    *(
        EntrypointRow(
            module, V1_ENTRYPOINT, _SEPARATE_ASYNC + _FULLY_ASYNC, message=_ASYNC_TRAINER, own_configs=_ASYNC_CONFIGS
        )
        for module in (
            "verl.experimental.fully_async_policy.fully_async_main",
            "recipe.fully_async_policy.fully_async_main",
        )
    ),
    EntrypointRow("recipe.dapo.main_dapo", V1_ENTRYPOINT, message=_DAPO, config=("config", "dapo_trainer")),
    EntrypointRow(
        "recipe.entropy.main_entropy",
        V1_ENTRYPOINT,
        message=_ENTROPY,
        config=("config", "entropy_trainer"),
        own_scorer=_ENTROPY_SCORER,
    ),
    EntrypointRow(
        "recipe.transfer_queue.main_ppo", V1_ENTRYPOINT, message=_TRANSFER_QUEUE, config=("config", "ppo_trainer")
    ),
    *(
        EntrypointRow(
            module,
            None,
            rule="other-entrypoint",
            message=f"verl's recipe of {algorithm} is not part of rlbridge: keep running it with verl",
        )
        for module, algorithm in _RECIPE_ALGORITHMS.items()
    ),
    EntrypointRow(
        "verl.experimental.vla.*",
        None,
        rule="other-entrypoint",
        message="verl's experimental VLA trainers (vision-language-action policies trained with PPO or SAC "
        "in robot simulators such as LIBERO and Isaac) are not part of rlbridge: keep running them with verl",
    ),
    EntrypointRow("verl.experimental.*", None, rule="other-entrypoint", message=_EXPERIMENTAL),
    EntrypointRow("recipe.*", None, rule="other-entrypoint", message=_RECIPE),
    EntrypointRow(
        "verl.*", None, rule="other-entrypoint", trainer_config=False, message=f"a verl module; {_NOT_SHIPPED}"
    ),
)
_ENTRYPOINTS_BY_MODULE = {row.old: row for row in ENTRYPOINT_ROWS if "*" not in row.old}


def resolve_entrypoint(module: str) -> EntrypointRow | None:
    """The row for a `python -m <module>` launch: an exact row, else the first pattern that matches."""
    if module in _ENTRYPOINTS_BY_MODULE:
        return _ENTRYPOINTS_BY_MODULE[module]
    return next((row for row in ENTRYPOINT_ROWS if "*" in row.old and fnmatch.fnmatchcase(module, row.old)), None)


def unknown_entrypoint(program: str) -> EntrypointRow:
    """The row for a program the table does not know that is given verl trainer overrides."""
    return EntrypointRow(
        program,
        None,
        rule="other-entrypoint",
        message="not an entry rlbridge knows, but it is given verl trainer overrides (migrated "
        "here): if it runs verl's PPO trainer, launch python -m core_v1.main_ppo instead",
    )


def module_of_script(path: str) -> str | None:
    """`verl/trainer/main_ppo.py` (under any directory) -> `verl.trainer.main_ppo`; None if not a .py path."""
    if not path.endswith(".py"):
        return None
    parts = path[:-3].split("/")
    # The package nearest the file: a checkout named verl holds recipe/ too ($HOME/verl/recipe/x/main.py).
    roots = [index for index, part in enumerate(parts[:-1]) if part in ("verl", "recipe", "legacy_v0", "core_v1")]
    if roots:
        return ".".join(parts[roots[-1] :])
    return parts[-1] or None


# --------------------------------------------------------------------------- Python names


@dataclass(frozen=True)
class PythonNameRow:
    """A module or class of verl and what it is in rlbridge.

    `new` None means removed (MANUAL, `message` names the replacement). `subclass_message` is set
    when subclassing it needs a person on V1 even though the import moves mechanically;
    `call_message` likewise for calling (constructing) it.
    """

    old: str
    new: str | None
    action: Action
    rule: str
    message: str = ""
    subclass_message: str | None = None
    call_message: str | None = None


@dataclass(frozen=True)
class NameAction:
    """The answer for one qualified name: its row and the full new name (None if removed)."""

    qualified_name: str
    new_name: str | None
    row: PythonNameRow


_WORKER_SUBCLASS = (
    'it runs on V0 as it is; on V1, name it in trainer.v1.worker_class ("package.module:Name"; '
    "shims/worker.py runs it in V1's training ranks) or override a PPOTrainer stage "
    "(core_v1.trainer.PPOTrainer)"
)
_CRITIC_WORKER_SUBCLASS = (
    "it runs on V0 as it is (trainer.use_v1=false); V1 has no hook for a critic worker subclass "
    "yet: override a PPOTrainer stage (core_v1.trainer.PPOTrainer) instead"
)
_REWARD_MANAGER_SUBCLASS = (
    "it runs on V0 as it is (legacy_v0.reward.register_reward_manager, named in "
    "reward_model.reward_manager, with trainer.use_v1=false); V1 has no reward-manager "
    "classes: score each sample in reward.custom_reward_function (verl's compute_score)"
)
_RM_NO_WORKER = (
    "the reward model has no worker class: the trainer's reward stage loads and runs it on V1 and V0 "
    "(reward.reward_model.*)"
)
_SERVER_CLIENT_CALL = (
    "the LLM server client is built by the AgentLoopManager on V1; take it from the agent loop "
    "(self.server_manager) instead of constructing it"
)


def _moved(old: str, new: str, rule: str = "py-imports", **kw: str) -> PythonNameRow:
    return PythonNameRow(old, new, Action.MECHANICAL, rule, f"moved to {new}", **kw)


def _removed(old: str, message: str, **kw: str) -> PythonNameRow:
    return PythonNameRow(old, None, Action.MANUAL, "py-removed-api", message, **kw)


PYTHON_NAME_ROWS: tuple[PythonNameRow, ...] = (
    _moved("verl.DataProto", "legacy_v0.protocol.DataProto"),
    _moved("verl.protocol", "legacy_v0.protocol"),
    _moved("verl.trainer.ppo.ray_trainer.RayPPOTrainer", "legacy_v0.trainer.RayPPOTrainer"),
    _moved(
        "verl.trainer.main_ppo.TaskRunner",
        "legacy_v0.main_ppo.TaskRunner",
        subclass_message="on V1, register a trainer mode (core_v1.trainer.register_trainer) instead of "
        "subclassing TaskRunner",
    ),
    _moved(
        "verl.workers.fsdp_workers.ActorRolloutRefWorker",
        "legacy_v0.workers.ActorRolloutRefWorker",
        subclass_message=_WORKER_SUBCLASS,
    ),
    _moved(
        "verl.workers.fsdp_workers.CriticWorker",
        "legacy_v0.workers.CriticWorker",
        subclass_message=_CRITIC_WORKER_SUBCLASS,
    ),
    # rlbridge's V0 worker always serves rollout through LLM servers: there is no separate async class.
    *(
        _removed(
            f"verl.workers.{module}.AsyncActorRolloutRefWorker",
            "rlbridge has no AsyncActorRolloutRefWorker: legacy_v0.workers.ActorRolloutRefWorker always serves "
            "rollout through LLM servers; use it instead",
            subclass_message=_WORKER_SUBCLASS,
        )
        for module in ("fsdp_workers", "megatron_workers")
    ),
    _moved("verl.workers.megatron_workers", "legacy_v0.workers", subclass_message=_WORKER_SUBCLASS),
    *(
        _removed(f"verl.workers.{module}.RewardModelWorker", _RM_NO_WORKER, subclass_message=_RM_NO_WORKER)
        for module in ("fsdp_workers", "megatron_workers")
    ),
    # verl exports each reward manager from the package and from its own submodule.
    *(
        _moved(
            f"verl.workers.reward_manager{sub}.{cls}",
            f"legacy_v0.reward.{cls}",
            subclass_message=_REWARD_MANAGER_SUBCLASS,
        )
        for cls, sub in (
            ("NaiveRewardManager", ""),
            ("NaiveRewardManager", ".naive"),
            ("DAPORewardManager", ""),
            ("DAPORewardManager", ".dapo"),
            ("BatchRewardManager", ""),
            ("BatchRewardManager", ".batch"),
            ("PrimeRewardManager", ""),
            ("PrimeRewardManager", ".prime"),
        )
    ),
    _moved("verl.utils.reward_score", "core_v1.reward.scorers"),
    _moved("verl.utils.ray_utils.get_event_loop", "core_v1.reward.event_loop.get_event_loop"),  # async reward files
    _moved("verl.trainer.ppo.core_algos", "core_v1.algorithms"),
    *(
        _moved(f"verl.experimental.agent_loop{sub}.{name}", f"core_v1.agent_loop.{name}")
        for sub in ("", ".agent_loop")
        for name in ("AgentLoopBase", "AgentLoopOutput", "register")
    ),
    *(
        _moved(f"verl.experimental.agent_loop{sub}.{old}", f"core_v1.rollout.{new}", call_message=_SERVER_CLIENT_CALL)
        for sub in ("", ".agent_loop")
        for old, new in (
            ("AsyncLLMServerManager", "LLMServerClient"),
            ("FullyAsyncLLMServerManager", "FullyAsyncLLMServerClient"),
        )
    ),
    *(
        _moved(f"verl.trainer.ppo.v1.{name}", f"core_v1.trainer.{name}")
        for name in ("PPOTrainer", "register_trainer", "get_trainer_cls")
    ),
    _moved("verl.trainer.ppo.v1.replay_buffer.ReplayBuffer", "core_v1.trainer.replay_buffer.ReplayBuffer"),
    # Interactions keep verl's API (multi_turn.interaction_config_path); of verl's own, gsm8k is carried, weather is not.
    _moved("verl.interactions.base", "core_v1.agent_loop.interaction"),
    _moved("verl.interactions.gsm8k_interaction", "core_v1.agent_loop.gsm8k_interaction"),
    _removed(
        "verl.interactions",
        "verl's built-in interactions are not carried: subclass "
        "core_v1.agent_loop.interaction.BaseInteraction (same methods) and name it in the "
        "interaction YAML",
    ),
    # verl's sampler API lives on in core_v1.data.samplers; both trainers run such a sampler through data.sampler.*.
    _moved("verl.experimental.dataset.sampler", "core_v1.data.samplers"),
    _removed("verl.experimental.dynamic_dataset", "dynamic datasets are removed; build the data before training"),
    *(
        _removed(
            f"verl.tools.{mod}",
            "this built-in tool is removed: write the tool for the tool_agent loop (core_v1.agent_loop.tools)",
        )
        for mod in ("mcp_base_tool", "mcp_search_tool")
    ),
    _moved("verl.tools.sandbox_fusion_tools", "core_v1.agent_loop.tools.sandbox_fusion"),
    _moved("verl.tools.gsm8k_tool", "core_v1.agent_loop.tools.gsm8k"),
    _moved("verl.tools.geo3k_tool", "core_v1.agent_loop.tools.geo3k"),
    _moved("verl.tools.image_zoom_in_tool", "core_v1.agent_loop.tools.image_zoom"),
    _moved("verl.tools.search_tool", "core_v1.agent_loop.tools.search"),
    _moved("verl.tools.utils.tool_registry", "core_v1.agent_loop.tools.tool_registry"),
    _moved("verl.tools.utils.function_tool", "core_v1.agent_loop.tools.function_tool"),
    # Beyond verl's own modules: the tool agent's own modules, which old custom tools import.
    _moved("verl.tools.base_tool", "core_v1.agent_loop.tools.base_tool"),
    _moved("verl.tools.schemas", "core_v1.agent_loop.tools.schemas"),
    _moved("verl.experimental.agent_loop.tool_parser", "core_v1.agent_loop.tool_parser"),
    _moved("verl.experimental.agent_loop.tool_agent_loop", "core_v1.agent_loop.tool_agent"),
    # verl's prompt dataset, the base of users' data.custom_cls classes (verl exports it from the package too).
    _moved("verl.utils.dataset.RLHFDataset", "core_v1.data.rlhf_dataset.RLHFDataset"),
    *(
        _moved(f"verl.utils.dataset.rl_dataset.{name}", f"core_v1.data.rlhf_dataset.{name}")
        for name in ("RLHFDataset", "collate_fn")
    ),
    # Rollout tracing: no backend here, so verl's decorator and context manager are its pass-throughs.
    _moved("verl.utils.rollout_trace", "core_v1.utils.rollout_trace"),
)

_PYTHON_ROWS_BY_NAME = {row.old: row for row in PYTHON_NAME_ROWS}


def resolve_python_name(qualified_name: str) -> NameAction | None:
    """The row covering a fully qualified Python name (longest dotted prefix), or None.

    `verl.utils.reward_score.gsm8k.compute_score` -> `core_v1.reward.scorers.gsm8k.compute_score`.
    """
    parts = qualified_name.split(".")
    for end in range(len(parts), 0, -1):
        row = _PYTHON_ROWS_BY_NAME.get(".".join(parts[:end]))
        if row is not None:
            rest = parts[end:]
            new = None if row.new is None else ".".join([row.new, *rest])
            return NameAction(qualified_name, new, row)
    return None


def legacy_python_roots() -> frozenset[str]:
    """Top-level packages whose imports the table covers (a cheap pre-filter for scanners)."""
    return frozenset(row.old.split(".")[0] for row in PYTHON_NAME_ROWS)
