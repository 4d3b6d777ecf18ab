"""The normalised view of a run for `--verify`: the settings that decide what it trains.

One table (`SETTINGS`) names each setting once, in its group (algorithm, policy loss, value
loss, KL, batch, sampling, reward, data, model, placement, checkpoint, logging), with the keys it
depends on. `view_of_v1(config)` reads it from V1's typed config; `view_of_v0(v0, config)` from
V0's reading of the old arguments (`legacy_v0.config.V0Config` and its typed config). Both give
plain data (numbers, text, lists, dicts), so the two views of one launch compare with `==`.

Batch arithmetic is in samples (prompts x `rollout.n`), as both trainers count it. The V0 trainer's
loop is V1's `sync` mode (number for number), so the loop reads `sync` there.

**verl's older homes.** V0 reads some moved keys through the rename table (`shims.rename_table`),
the same table the codemod rewrites with; a wrong row would then be wrong on both sides and
compare equal. So for the behaviour-deciding keys verl itself moved, `OLD_HOMES` states on its own
where verl's V0 kept them, and the V0 view reads a key there, as the script wrote it
(`V0Config.as_written`), before the typed config. A table row that sends such a key to a wrong
home shows as a difference.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

# verl's V0 homes of keys whose V1 home differs (facts about verl's configs, not the rename table).
OLD_HOMES: dict[str, tuple[str, ...]] = {
    "reward.custom_reward_function.path": ("custom_reward_function.path",),
    "reward.custom_reward_function.name": ("custom_reward_function.name",),
    "reward.reward_model.enable": ("reward_model.enable",),
    "reward.reward_model.model_path": ("reward_model.model.path",),
    "actor_rollout_ref.rollout.multi_turn.max_assistant_turns": ("actor_rollout_ref.rollout.multi_turn.max_turns",),
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": ("data.tool_config_path",),
    "trainer.log_val_generations": ("trainer.val_generations_to_log_to_wandb",),
    "actor_rollout_ref.actor.checkpoint.save_contents": ("actor_rollout_ref.actor.checkpoint.contents",),
    "critic.checkpoint.save_contents": ("critic.checkpoint.contents",),
}

_ARO = "actor_rollout_ref"
_ACTOR, _ROLLOUT = f"{_ARO}.actor", f"{_ARO}.rollout"
_REWARD_KWARGS_KEYS = (
    "reward.reward_kwargs",
    "reward_model.reward_kwargs",
    "reward.custom_reward_function.reward_kwargs",
    "custom_reward_function.reward_kwargs",
)
_MANAGER_KEYS = ("reward.reward_manager.name", "reward_model.reward_manager")


@dataclass(frozen=True)
class Setting:
    """One setting of the view: its name (a V1 key, or a derived name), its group, the keys it
    depends on (V1 keys and verl's older homes: how a difference is traced to a codemod rule), and,
    for a derived one, how it is computed from a `Source`."""

    name: str
    group: str
    keys: tuple[str, ...]
    derive: Optional[Callable[["Source"], Any]] = None


class Source:
    """What a view is read from: the typed config, plus (V0) the config as the script wrote it,
    the V0 settings, and the reward manager's reading."""

    def __init__(
        self,
        config: Any,
        trainer: str,
        as_written: Optional[DictConfig] = None,
        reward: Optional[dict] = None,
        sampler: Any = None,
    ):
        self.config, self.trainer, self.as_written = config, trainer, as_written
        self.reward = reward or {}
        self.sampler = sampler

    def get(self, key: str) -> Any:
        """`key` (a V1 key) as this trainer reads it; on V0, verl's older home first where written."""
        if self.as_written is not None:
            for home in OLD_HOMES.get(key, ()):
                found = _written(self.as_written, home)
                if found is not _ABSENT:
                    return found
        node: Any = self.config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else getattr(node, part)
        return node


_ABSENT = object()


def _written(cfg: DictConfig, key: str) -> Any:
    """The value at `key` as written (resolved), or _ABSENT when the config does not set it.

    A null there sets nothing: verl's own config files (from 0.7) keep the older homes as null
    placeholders (`legacy_reward_impl.yaml`, pulled in by `ppo_trainer`), and verl's start-up
    migration leaves the new home's value where they are null."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, default=None, throw_on_resolution_failure=False) if parent_key else cfg
    if not isinstance(parent, DictConfig) or leaf not in parent:
        return _ABSENT
    node = parent._get_node(leaf)
    if node._is_missing():
        return _ABSENT
    try:
        value = parent[leaf]
    except Exception:  # noqa: BLE001 - an interpolation V0 could not resolve either: not a setting here
        return _ABSENT
    if value is None:
        return _ABSENT
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


# ------------------------------------------------------------------------------- derived settings
def _samples(prompts_key: str) -> Callable[[Source], Any]:
    return lambda s: s.get(prompts_key) * s.get(f"{_ROLLOUT}.n")


def _updates_per_step(s: Source) -> int:
    return s.get(f"{_ACTOR}.ppo_epochs") * math.ceil(
        s.get("data.train_batch_size") / s.get(f"{_ACTOR}.ppo_mini_batch_size")
    )


def _clip(side: str) -> Callable[[Source], Any]:
    def clip(s: Source) -> Any:
        value = s.get(f"{_ACTOR}.clip_ratio_{side}")
        return s.get(f"{_ACTOR}.clip_ratio") if value is None else value

    return clip


def _lr_schedule(prefix: str) -> Callable[[Source], Any]:
    return lambda s: s.get(f"{prefix}.optim.warmup_style") or s.get(f"{prefix}.optim.lr_scheduler_type")


def _files(key: str) -> Callable[[Source], Any]:
    def files(s: Source) -> Any:
        value = s.get(key)
        return [str(value)] if isinstance(value, str) else None if value is None else [str(v) for v in value]

    return files


def _loop(s: Source) -> str:
    return "sync" if s.trainer == "V0" else s.get("trainer.v1.trainer_mode")


def _plain(key: str, group: str, *related: str) -> Setting:
    return Setting(key, group, (key, *OLD_HOMES.get(key, ()), *related))


def _derived(name: str, group: str, keys: tuple[str, ...], derive: Callable[[Source], Any]) -> Setting:
    return Setting(name, group, keys, derive)


def _each(group: str, prefix: str, *leaves: str) -> list[Setting]:
    return [_plain(f"{prefix}.{leaf}", group) for leaf in leaves]


_N = f"{_ROLLOUT}.n"
SETTINGS: tuple[Setting, ...] = (
    *_each(
        "algorithm",
        "algorithm",
        "adv_estimator",
        "gamma",
        "lam",
        "norm_adv_by_std_in_grpo",
        "use_pf_ppo",
        "pf_ppo.reweight_method",
        "pf_ppo.weight_pow",
        "filter_groups.enable",
        "filter_groups.metric",
        "filter_groups.max_num_gen_batches",
        "rollout_correction.rollout_is",
        "rollout_correction.rollout_is_threshold",
        "rollout_correction.rollout_rs",
        "rollout_correction.rollout_rs_threshold",
        "rollout_correction.bypass_mode",
        "rollout_correction.loss_type",
    ),
    _derived("algorithm.trainer_loop", "algorithm", ("trainer.v1.trainer_mode", "trainer.use_v1"), _loop),
    _derived(
        "algorithm.uses_critic",
        "algorithm",
        ("critic.enable", "algorithm.adv_estimator"),
        lambda s: bool(s.config.use_critic),
    ),
    _plain("trainer.critic_warmup", "algorithm"),
    _plain("trainer.balance_batch", "algorithm"),
    *_each(
        "policy loss",
        _ACTOR,
        "policy_loss.loss_mode",
        "clip_ratio_c",
        "loss_agg_mode",
        "entropy_coeff",
        "ppo_epochs",
        "shuffle",
        "grad_clip",
        "optim.lr",
        "optim.weight_decay",
        "optim.betas",
        "optim.lr_warmup_steps",
        "optim.lr_warmup_steps_ratio",
        "optim.min_lr_ratio",
        "optim.num_cycles",
        "optim.total_training_steps",
        "optim.clip_grad",
        "use_decoupled_loss",
        "behav_imp_weight_cap",
    ),
    _derived(
        "policy loss.clip_ratio_low", "policy loss", (f"{_ACTOR}.clip_ratio", f"{_ACTOR}.clip_ratio_low"), _clip("low")
    ),
    _derived(
        "policy loss.clip_ratio_high",
        "policy loss",
        (f"{_ACTOR}.clip_ratio", f"{_ACTOR}.clip_ratio_high"),
        _clip("high"),
    ),
    _derived(
        "policy loss.lr_schedule",
        "policy loss",
        (f"{_ACTOR}.optim.warmup_style", f"{_ACTOR}.optim.lr_scheduler_type"),
        _lr_schedule(_ACTOR),
    ),
    *_each(
        "value loss",
        "critic",
        "enable",
        "cliprange_value",
        "loss_agg_mode",
        "ppo_epochs",
        "grad_clip",
        "optim.lr",
        "optim.weight_decay",
        "optim.lr_warmup_steps_ratio",
        "model.path",
        "shuffle",
    ),
    _derived(
        "value loss.lr_schedule",
        "value loss",
        ("critic.optim.warmup_style", "critic.optim.lr_scheduler_type"),
        _lr_schedule("critic"),
    ),
    *_each("KL", _ACTOR, "use_kl_loss", "kl_loss_coef", "kl_loss_type"),
    *_each(
        "KL",
        "algorithm",
        "use_kl_in_reward",
        "kl_penalty",
        "kl_ctrl.type",
        "kl_ctrl.kl_coef",
        "kl_ctrl.horizon",
        "kl_ctrl.target_kl",
    ),
    _plain("data.train_batch_size", "batch"),
    _derived("batch.samples_per_step", "batch", ("data.train_batch_size", _N), _samples("data.train_batch_size")),
    _derived(
        "batch.generated_prompts_per_step",
        "batch",
        ("data.gen_batch_size", "data.train_batch_size"),
        lambda s: s.get("data.gen_batch_size") or s.get("data.train_batch_size"),
    ),
    _derived(
        "batch.actor_mini_batch_samples",
        "batch",
        (f"{_ACTOR}.ppo_mini_batch_size", _N),
        _samples(f"{_ACTOR}.ppo_mini_batch_size"),
    ),
    _derived(
        "batch.actor_updates_per_step",
        "batch",
        (f"{_ACTOR}.ppo_epochs", "data.train_batch_size", f"{_ACTOR}.ppo_mini_batch_size"),
        _updates_per_step,
    ),
    _derived(
        "batch.critic_mini_batch_samples",
        "batch",
        ("critic.ppo_mini_batch_size", _N),
        _samples("critic.ppo_mini_batch_size"),
    ),
    *_each(
        "batch",
        _ACTOR,
        "ppo_micro_batch_size",
        "ppo_micro_batch_size_per_gpu",
        "use_dynamic_bsz",
        "ppo_max_token_len_per_gpu",
    ),
    *_each(
        "sampling",
        _ROLLOUT,
        "name",
        "n",
        "temperature",
        "top_p",
        "top_k",
        "do_sample",
        "prompt_length",
        "response_length",
        "ignore_eos",
        "val_kwargs.n",
        "val_kwargs.temperature",
        "val_kwargs.top_p",
        "val_kwargs.top_k",
        "val_kwargs.do_sample",
        "agent.default_agent_loop",
        "agent.agent_loop_config_path",
        "multi_turn.enable",
        "multi_turn.max_assistant_turns",
        "multi_turn.max_user_turns",
        "multi_turn.tool_config_path",
        "multi_turn.function_tool_path",
        "multi_turn.format",
        "multi_turn.max_tool_response_length",
    ),
    _derived("reward.manager", "reward", _MANAGER_KEYS, lambda s: s.reward.get("manager")),
    _derived(
        "reward.score_kwargs", "reward", (*_REWARD_KWARGS_KEYS, *_MANAGER_KEYS), lambda s: s.reward.get("score_kwargs")
    ),
    _derived(
        "reward.overlong_buffer",
        "reward",
        ("reward.reward_kwargs", "reward_model.reward_kwargs", "reward_model.overlong_buffer", *_MANAGER_KEYS),
        lambda s: s.reward.get("overlong_buffer"),
    ),
    *_each("reward", "reward.custom_reward_function", "path", "name"),
    *_each("reward", "reward.reward_model", "enable", "model_path", "combine"),
    _plain("data.reward_fn_key", "reward"),
    *_each(
        "data",
        "data",
        "prompt_key",
        "max_prompt_length",
        "max_response_length",
        "shuffle",
        "seed",
        "filter_overlong_prompts",
        "truncation",
        "return_raw_chat",
        "custom_cls",
        "apply_chat_template_kwargs",
        "tokenizer",
        "image_key",
        "video_key",
    ),
    _derived("data.train_files", "data", ("data.train_files",), _files("data.train_files")),
    _derived("data.val_files", "data", ("data.val_files",), _files("data.val_files")),
    _derived("data.sampler", "data", ("data.sampler", "trainer.v1.sampler.custom_sampler"), lambda s: s.sampler),
    *_each(
        "model",
        f"{_ARO}.model",
        "path",
        "tokenizer_path",
        "lora_rank",
        "custom_chat_template",
        "override_config",
        "external_lib",
        "trust_remote_code",
    ),
    _plain(f"{_ACTOR}.freeze_vision_tower", "model"),
    *_each("placement", "trainer", "nnodes", "n_gpus_per_node", "device"),
    _derived(
        "placement.world_size",
        "placement",
        ("trainer.nnodes", "trainer.n_gpus_per_node"),
        lambda s: s.get("trainer.nnodes") * s.get("trainer.n_gpus_per_node"),
    ),
    *_each("placement", _ROLLOUT, "nnodes", "n_gpus_per_node"),
    *_each(
        "checkpoint",
        "trainer",
        "default_local_dir",
        "default_hdfs_dir",
        "save_freq",
        "resume_mode",
        "resume_from_path",
        "max_actor_ckpt_to_keep",
        "max_critic_ckpt_to_keep",
        "del_local_ckpt_after_load",
    ),
    *_each("checkpoint", f"{_ACTOR}.checkpoint", "save_contents", "load_contents"),
    *_each("checkpoint", "critic.checkpoint", "save_contents"),
    *_each(
        "logging",
        "trainer",
        "project_name",
        "experiment_name",
        "log_val_generations",
        "test_freq",
        "val_before_train",
        "val_only",
        "total_epochs",
        "total_training_steps",
        "seed",
    ),
    _derived("trainer.logger", "logging", ("trainer.logger",), lambda s: sorted(s.get("trainer.logger"))),
)


def view(source: Source) -> dict[str, Any]:
    """Every setting of `SETTINGS`, as plain data, from one source."""
    return {
        setting.name: plain(setting.derive(source) if setting.derive else source.get(setting.name))
        for setting in SETTINGS
    }


def setting(name: str) -> Setting:
    return _BY_NAME[name]


_BY_NAME = {s.name: s for s in SETTINGS}


def plain(value: Any) -> Any:
    """Plain, comparable data: containers to lists/dicts, dataclasses to dicts, integral floats
    kept as numbers (1 == 1.0 already)."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=True)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


# ------------------------------------------------------------------------------ the two readings
def view_of_v1(config: Any) -> dict[str, Any]:
    """The view of a typed V1 config (`core_v1.config.PPOConfig`)."""
    sampler = _prompt_sampler(config)
    if sampler is None and config.trainer.v1.sampler.custom_sampler.path:  # V1's replay buffer instead
        custom = config.trainer.v1.sampler.custom_sampler
        sampler = f"{custom.name} from {custom.path}"
    return view(
        Source(config, "V1", reward=_reward_of_v1(config.reward, config.data.max_response_length), sampler=sampler)
    )


def _reward_of_v1(reward: Any, max_response_length: int) -> dict[str, Any]:
    """The reward manager as V1's reward stage builds it (`reward_manager_policy`). A manager V1
    cannot run (unknown, or `batch` without a function) is V1's start-up check to refuse
    (`config_problems`), not the reading's: the view then shows the name and every argument, as
    V0's shows a name it lacks."""
    from core_v1.config import ConfigError
    from core_v1.reward.managers import reward_manager_policy

    try:
        policy = reward_manager_policy(reward, max_response_length)
    except ConfigError:
        arguments = {**dict(reward.reward_kwargs or {}), **dict(reward.custom_reward_function.reward_kwargs or {})}
        return {"manager": reward.reward_manager.name or "naive", "score_kwargs": arguments, "overlong_buffer": None}
    overlong = (
        None
        if policy.overlong is None
        else {
            "max_resp_len": policy.overlong.max_resp_len,
            "len": policy.overlong.buffer_len,
            "penalty_factor": policy.overlong.penalty_factor,
            "log": policy.overlong.log,
        }
    )
    return {"manager": policy.name, "score_kwargs": policy.score_kwargs, "overlong_buffer": overlong}


def view_of_v0(v0: Any, config: Any) -> dict[str, Any]:
    """The view of V0's reading (`legacy_v0.config.V0Config`) and its typed config: the reward
    manager as `legacy_v0.reward` builds it from the config as written (verl's keys first)."""
    from legacy_v0.reward import REWARD_MANAGERS, DAPORewardManager, overlong_config, reward_manager_arguments

    written = v0.as_written if v0.as_written is not None else v0.raw
    name, arguments = reward_manager_arguments(written, v0.settings)
    overlong = None
    if name in REWARD_MANAGERS and issubclass(REWARD_MANAGERS.get(name), DAPORewardManager):  # its own arguments
        buffer = overlong_config(arguments.pop("overlong_buffer_cfg", None))
        max_resp_len = arguments.pop("max_resp_len", None)
        if buffer.enable:
            overlong = {
                "max_resp_len": max_resp_len,
                "len": buffer.len,
                "penalty_factor": buffer.penalty_factor,
                "log": buffer.log,
            }
    reward = {"manager": name, "score_kwargs": arguments, "overlong_buffer": overlong}
    return view(Source(config, "V0", as_written=v0.as_written, reward=reward, sampler=_prompt_sampler(config)))


def _prompt_sampler(config: Any) -> Optional[str]:
    """`data.sampler` as both trainers read it (the same typed key)."""
    sampler = config.data.sampler
    return f"{sampler.class_name} from {sampler.class_path}" if sampler.class_path else None
