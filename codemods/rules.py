"""The codemod rule registry: every rule's stable id, the file kinds it reads, and what it does.

Rules are data here; the engines (`shell`, `yaml_config`, `python_code`) implement them, keyed by
id. Config-key rules come straight from `shims.rename_table` (each table row names its rule), so
a rule id seen in a report is also the id `--only` / `--skip` take. A rule is mechanical when it
rewrites, manual when it only leaves a `TODO(migrate:RULE)` marker and a report line.
"""

from __future__ import annotations

from dataclasses import dataclass

from core_v1.utils.registry import Registry, UnknownNameError
from shims import rename_table

SHELL, YAML, PYTHON = "sh", "yaml", "py"
CONFIG_KINDS = (SHELL, YAML)


@dataclass(frozen=True)
class Rule:
    """A migration rule. `kinds` lists the file kinds it applies to (config-key rules read both
    launch scripts and YAML configs under one id)."""

    id: str
    kinds: tuple[str, ...]
    description: str
    mechanical: bool


RULES: Registry[Rule] = Registry("codemod rule", check=lambda obj: isinstance(obj, Rule))


def _add(rule_id: str, kinds: tuple[str, ...], description: str, mechanical: bool) -> None:
    RULES.register(rule_id, Rule(rule_id, kinds, description, mechanical))


# Config keys (launch-script overrides and YAML configs), in the rename table's order.
_add("reward-model-moved", CONFIG_KINDS, "reward_model.{enable,nnodes,model.path,rollout.*,...} -> reward.*", True)
_add("reward-manager", CONFIG_KINDS, "reward_model.reward_manager -> reward.reward_manager.name", True)
_add(
    "reward-loop-source",
    CONFIG_KINDS,
    "reward_model.reward_loop_* -> reward.reward_manager.{source,module.path,name}",
    True,
)
_add("reward-kwargs", CONFIG_KINDS, "reward_model.reward_kwargs.* -> reward.reward_kwargs.*", True)
_add("removed-keys", CONFIG_KINDS, "delete keys V1 no longer reads (use_reward_loop, use_legacy_worker_impl)", True)
_add(
    "reward-model-served",
    CONFIG_KINDS,
    "reward-model worker settings: forward-pass batching/offload/kernel switches deleted, the rest manual",
    False,
)
_add("sandbox-fusion", CONFIG_KINDS, "sandbox_fusion.* -> reward.sandbox_fusion.*", True)
_add("custom-reward-function", CONFIG_KINDS, "custom_reward_function.* -> reward.custom_reward_function.*", True)
_add("critic-fsdp-config", CONFIG_KINDS, "critic.model.fsdp_config.* -> critic.fsdp.*", True)
_add("rollout-mode-sync", CONFIG_KINDS, "delete actor_rollout_ref.rollout.mode=sync (server rollout only)", True)
_add(
    "checkpoint-engine-bucket",
    CONFIG_KINDS,
    "rollout.update_weights_bucket_megabytes -> rollout.checkpoint_engine.*",
    True,
)
_add("multi-turn-removed", CONFIG_KINDS, "completion_callback: write an AgentLoop", False)
_add(
    "multi-turn-agent-loop", CONFIG_KINDS, "multi_turn.enable=true also sets agent.default_agent_loop=tool_agent", True
)
_add("data-hooks-removed", CONFIG_KINDS, "data.datagen.*: removed (generate the data before training)", False)
_add(
    "verl-test-sampler",
    CONFIG_KINDS,
    "data.sampler.class_path naming verl's test RandomCurriculumSampler -> core_v1.data.random_curriculum",
    True,
)
_add("skip-rollout", CONFIG_KINDS, "rollout.skip_rollout / skip_dump_dir -> skip.rollout.{enable,dump_dir}", True)
_add("profiler-keys", CONFIG_KINDS, "trainer.profile_steps / *_nsight_options / npu_profile -> global_profiler.*", True)
_add("ray-init", CONFIG_KINDS, "ray_init.* -> ray_kwargs.*", True)
_add("actor-fsdp-config", CONFIG_KINDS, "actor ulysses / use_torch_compile -> *.fsdp_config.*", True)
_add("rollout-correction", CONFIG_KINDS, "removed rollout_correction options: choose the replacement by hand", False)
_add(
    "rollout-correction-loss-type",
    CONFIG_KINDS,
    "rollout_correction.use_policy_gradient=true/false -> loss_type=reinforce/ppo_clip",
    True,
)
_add(
    "keep-on-v0", CONFIG_KINDS, "a feature V1 lacks (a custom checkpoint manager class): add trainer.use_v1=false", True
)
# Older homes of keys verl moved itself (see shims/verl_keys).
_add(
    "worker-fsdp-config",
    CONFIG_KINDS,
    "ref / critic ulysses and ref param_offload -> *.fsdp_config.* / critic.fsdp.*",
    True,
)
_add(
    "engine-offload",
    CONFIG_KINDS,
    "*.{megatron,mindspeed,veomni,torchtitan}.{param,optimizer}_offload -> "
    "*.fsdp_config.* / critic.fsdp.* (FSDP2 offloads the same state)",
    True,
)
_add(
    "moe-router-loss",
    CONFIG_KINDS,
    "actor.{megatron.override_transformer_config,mindspeed.mcore_kwargs}.moe_{aux_loss,"
    "z_loss}_coeff / moe_router_load_balancing_type -> actor.moe.* (the same router losses)",
    True,
)
_add("tool-config-path", CONFIG_KINDS, "data.tool_config_path / function_tool_path -> rollout.multi_turn.*", True)
_add(
    "checkpoint-contents",
    CONFIG_KINDS,
    "*.checkpoint.contents -> *.checkpoint.save_contents (set load_contents too)",
    True,
)
_add(
    "multi-turn-max-turns",
    CONFIG_KINDS,
    "rollout.multi_turn.max_turns -> max_assistant_turns (max_user_turns is separate)",
    True,
)
_add("val-generations", CONFIG_KINDS, "trainer.val_generations_to_log_to_wandb -> trainer.log_val_generations", True)
_add("interpolation", (YAML,), "${old.key} -> ${new.key} in YAML values, for keys the table moves", True)
_add(
    "class-name",
    (YAML,),
    "class_name: verl.* in tool / interaction YAMLs -> the rlbridge class the rename "
    "table names (a class rlbridge lacks: marker)",
    True,
)
# Launch scripts only.
_add(
    "entrypoint",
    (SHELL,),
    "python -m verl.trainer.main_ppo[_sync] (or verl/trainer/main_ppo.py), verl's experimental "
    "one-step-off / fully async trainers (trainer.v1.trainer_mode=separate_async), and the DAPO, entropy and "
    "TransferQueue recipes (on the recipe's own config) -> python -m core_v1.main_ppo",
    True,
)
_add(
    "other-entrypoint",
    (SHELL,),
    "a verl entry rlbridge lacks (other recipes, verl.experimental.vla.*, SFT, generation) or "
    "an unknown program given trainer keys: marker naming it; trainer keys still migrated",
    False,
)
_add("dynamic-key", (SHELL,), "an override whose key is built from a shell variable: reported, not guessed", False)
# Python code.
_add("py-imports", (PYTHON,), "verl imports -> legacy_v0 / core_v1 (plain, aliased, from, star, dotted use)", True)
_add("py-removed-api", (PYTHON,), "imports of removed verl APIs (interactions, samplers, tools, ...): marker", False)
_add("py-subclass", (PYTHON,), "subclass of a V0 worker / removed class: marker naming the V1 extension point", False)
_add("py-constructor", (PYTHON,), "constructing an LLM server manager: built by the AgentLoopManager on V1", False)
_add(
    "py-agent-loop-run",
    (PYTHON,),
    "v0.5 AgentLoop.run(self, messages, sampling_params) -> run(self, sampling_params, **kwargs)",
    True,
)
_add("py-generate-output", (PYTHON,), "v0.5 server_manager.generate(...) list result -> (...).token_ids", True)
_add(
    "py-no-equivalent",
    (PYTHON,),
    "a verl name whose rlbridge home lacks it (e.g. core_algos.AdvantageEstimator): marker",
    False,
)
_add("py-unmapped-verl", (PYTHON,), "a verl import the rename table does not cover: rlbridge does not ship verl", False)


class UnknownRuleError(ValueError):
    """A rule id given to --only/--skip that no rule has."""


@dataclass(frozen=True)
class RuleSelection:
    """Which rules run: all, minus `skip`, limited to `only` when given."""

    only: frozenset[str] = frozenset()
    skip: frozenset[str] = frozenset()

    @classmethod
    def from_ids(cls, only: list[str] | None = None, skip: list[str] | None = None) -> "RuleSelection":
        """Build a selection, raising UnknownRuleError (with the known ids) for a misspelt id."""
        for rule_id in [*(only or []), *(skip or [])]:
            if rule_id not in RULES:
                raise UnknownRuleError(RULES.unknown_message(rule_id) + " See --list-rules.")
        return cls(frozenset(only or ()), frozenset(skip or ()))

    def enabled(self, rule_id: str) -> bool:
        return rule_id not in self.skip and (not self.only or rule_id in self.only)


ALL_RULES = RuleSelection()


def rules_used_by_table() -> set[str]:
    """Every rule id the rename table names (each must be registered here)."""
    ids = {row.rule for row in rename_table.CONFIG_KEY_ROWS}
    ids |= {row.rule for row in rename_table.ENTRYPOINT_ROWS}
    ids |= {row.rule for row in rename_table.PYTHON_NAME_ROWS}
    ids |= {feature.rule for feature in rename_table.V0_ONLY_FEATURES}
    return ids


__all__ = [
    "RULES",
    "Rule",
    "RuleSelection",
    "ALL_RULES",
    "UnknownRuleError",
    "UnknownNameError",
    "SHELL",
    "YAML",
    "PYTHON",
    "rules_used_by_table",
]
