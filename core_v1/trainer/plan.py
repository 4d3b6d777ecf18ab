"""The resolved plan `trainer.dry_run=true` prints: what would run where, what each legacy key
became, what this config cannot do anywhere, and what this machine cannot run.

Nothing here starts Ray, loads a model or reads a data file; it only looks at the config, at
which packages are importable, at which paths exist and at how many GPUs torch sees.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path
from typing import Iterable, Sequence

from core_v1.config.schema import PPOConfig


def describe_plan(config: PPOConfig, legacy_notes: Sequence[str] = (), problems: Sequence[str] = ()) -> str:
    """The plan as text: one labelled line per aspect; `legacy_notes` are the shim's "X -> Y"
    lines and `problems` the reasons the config is refused (see `core_v1.trainer.constraints`)."""
    lines = ["rlbridge plan", *_sections(config)]
    lines += [f"  legacy key:  {note}" for note in legacy_notes]
    lines += [f"  refused:     {problem}" for problem in problems]
    lines += [f"  cannot run here: {limit}" for limit in machine_limits(config)]
    return "\n".join(lines)


def _async_schedule(v1) -> str:
    section = getattr(v1, v1.trainer_mode, None)
    if not hasattr(section, "num_warmup_batches"):
        return ""
    schedule = (
        "reproducible: requests finish on the weights they began with, batches in submission order"
        if section.reproducible
        else "timing decides where updates cut requests"
    )
    return f" ({section.num_warmup_batches} batch(es) ahead; {schedule})"


def _sections(config: PPOConfig) -> list[str]:
    aro, trainer = config.actor_rollout_ref, config.trainer
    rollout = aro.rollout
    if trainer.use_v1:
        which = f"V1, mode {trainer.v1.trainer_mode}" + _async_schedule(trainer.v1)
    else:
        which = "V0 (deprecated RayPPOTrainer, synchronous; trainer.use_v1=false)"
    pool = (
        f"separate rollout pool {rollout.nnodes}x{rollout.n_gpus_per_node}"
        if rollout.nnodes
        else "rollout colocated with training"
    )
    reward_model, sampler = config.reward.reward_model, config.data.sampler
    if reward_model.enable:
        pool += f"; reward model {reward_model.model_path} (in the trainer process)"
    return [
        f"  trainer:     {which}",
        f"  devices:     {resolved_device(config)}; training {trainer.nnodes}x{trainer.n_gpus_per_node}; {pool}",
        f"  training:    {describe_training(training_placement(config)) if trainer.use_v1 else V0_TRAINING}",
        f"  model:       {aro.model.path}",
        f"  engines:     rollout {rollout.name} ({rollout.num_replicas} replica(s){_in_driver(trainer)}, n={rollout.n}, "
        f"temperature={rollout.temperature}, response_length={rollout.response_length}); training "
        f"{aro.actor.strategy}; weight sync {rollout.checkpoint_engine.backend}",
        f"  agent loops: default {rollout.agent.default_agent_loop}"
        + (f", from {rollout.agent.agent_loop_config_path}" if rollout.agent.agent_loop_config_path else ""),
        f"  algorithm:   {config.algorithm.adv_estimator}, policy loss {aro.actor.policy_loss.loss_mode}, "
        f"critic {'on' if config.use_critic else 'off'}, reference {'on' if config.use_reference_policy else 'off'}"
        + (f", PF-PPO resampling ({config.algorithm.pf_ppo.reweight_method})" if config.algorithm.use_pf_ppo else ""),
        f"  reward:      {_reward_source(config)}",
        f"  data:        train {config.data.train_files}, val {config.data.val_files}, "
        f"batch {config.data.train_batch_size} prompts"
        + (f", ordered by {sampler.class_name} from {sampler.class_path} (data.sampler)" if sampler.class_path else ""),
        *_vision(config),
        *_distillation(config),
    ]


def _distillation(config: PPOConfig) -> list[str]:
    """The plan's line on on-policy distillation: the teachers, how rows reach them, the loss term."""
    from core_v1.workers.distillation import teacher_models

    distillation = config.distillation
    if not distillation.enabled:
        return []
    teachers = teacher_models(distillation)
    where = (
        f"teacher {teachers['']}"
        if list(teachers) == [""]
        else "teachers " + ", ".join(f"{path} for {distillation.teacher_key}={key}" for key, path in teachers.items())
    )
    loss = distillation.distillation_loss
    form = "as a reward in PPO's surrogate" if loss.use_policy_gradient else "back-propagated"
    task = (
        f"added to the RL loss x {loss.distillation_loss_coef}"
        if loss.use_task_rewards
        else "the whole loss (task rewards unused)"
    )
    return [
        f"  distillation: {where}, on the training ranks; per-token {loss.loss_mode} to the teacher, {form}, {task}"
    ]


# A Hub id that names a vision-language model (Qwen2.5-VL-7B-Instruct, Kimi-VL, GLM-4.1V), for a model not here.
_VISION_NAME = re.compile(r"(?i)(?<![a-z])vl(?![a-z])|vision|glm-?4\.[15]v")


def _vision(config: PPOConfig) -> list[str]:
    """The plan's line on images, for a vision-language policy: its model folder here has a vision
    tower, or (the folder not here) its name says so, or the config freezes a vision tower."""
    path, actor = config.actor_rollout_ref.model.path, config.actor_rollout_ref.actor
    folder = Path(path).expanduser()
    if (folder / "config.json").is_file():
        is_vision = "vision_config" in json.loads((folder / "config.json").read_text())
        if not is_vision:
            return (
                ["  vision:      none (a text model): actor.freeze_vision_tower=true has no effect"]
                if actor.freeze_vision_tower
                else []
            )
        known = "a vision-language model"
    elif _VISION_NAME.search(str(path)):
        known = "a vision-language model by its name (the folder is not here)"
    elif actor.freeze_vision_tower:
        known = "a vision-language model, as actor.freeze_vision_tower says (the folder is not here)"
    else:
        return []
    tower = "frozen" if actor.freeze_vision_tower else "trained with the rest"
    return [
        f"  vision:      {known}: each row's images (data.image_key={config.data.image_key}) and video frames "
        f"(data.video_key={config.data.video_key}) go through "
        f"the AutoProcessor of {path} (beside its tokenizer) to the rollout engine and every forward; "
        f"vision tower {tower} (actor.freeze_vision_tower={str(actor.freeze_vision_tower).lower()})"
    ]


V0_TRAINING = "V0 keeps actor, reference and critic in the driver process (one device)"


def _in_driver(trainer) -> str:
    if trainer.v1.placement != "local":
        return ""
    return " in the driver process with the agent loops and the store, trainer.v1.placement=local"


def training_placement(config: PPOConfig) -> dict:
    """Where the training ranks run, as `core_v1.workers.group.WorkerGroup.layout()` reports it once started."""
    from core_v1.workers.distillation import teacher_models, teacher_role
    from core_v1.workers.group import rank_bundle, world_size_of

    ranks, device = world_size_of(config), resolved_device(config)
    roles = ["actor"] + ["ref"] * config.use_reference_policy + ["critic"] * config.use_critic
    if config.distillation.enabled:
        roles += [teacher_role(key) for key in teacher_models(config.distillation)]
    return {
        "ranks": ranks,
        "device": device,
        "roles": roles,
        "in_driver": ranks == 1,
        "bundle": None if ranks == 1 else rank_bundle(device),
    }


def describe_training(placement: dict) -> str:
    roles = "+".join(placement["roles"])
    if placement["in_driver"]:
        return f"1 rank in the driver process holding {roles} ({placement['device']})"
    backend = "nccl" if placement["device"] == "cuda" else "gloo"
    return (
        f"{placement['ranks']} ranks, one Ray actor each (placement group of {placement['ranks']} x "
        f"{placement['bundle']}), each holding {roles}; FSDP2 over {backend}"
    )


def _reward_source(config: PPOConfig) -> str:
    reward = config.reward
    if reward.reward_model.enable:
        rm = reward.reward_model
        return f"reward model {rm.model_path} (combine={rm.combine}, {rm.micro_batch_size_per_gpu} rows per forward)"
    if reward.custom_reward_function.path:
        return f"{reward.custom_reward_function.path}:{reward.custom_reward_function.name}"
    manager = reward.reward_manager
    via = "" if manager.name == "naive" else f" through reward manager {manager.name}"
    return f"built-in scorer by {config.data.reward_fn_key}{via}"


def resolved_device(config: PPOConfig) -> str:
    """`trainer.device`, with `auto` resolved the way a run resolves it."""
    if config.trainer.device != "auto":
        return config.trainer.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def machine_limits(config: PPOConfig) -> list[str]:
    """What keeps this machine from running `config` as written (the config itself is valid)."""
    import torch

    trainer, rollout = config.trainer, config.actor_rollout_ref.rollout
    limits = []
    asked = trainer.nnodes * trainer.n_gpus_per_node + rollout.nnodes * rollout.n_gpus_per_node
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if trainer.device == "cuda" and not visible:
        limits.append("trainer.device=cuda but no GPU is visible here")
    elif resolved_device(config) == "cuda" and trainer.nnodes == 1 and asked > visible:
        limits.append(f"the layout asks for {asked} GPUs; this machine has {visible}")
    elif trainer.device == "auto" and resolved_device(config) == "cpu" and asked > 1:
        limits.append(
            f"no GPU here: the layout asks for {asked} GPUs; trainer.device=auto runs the "
            f"{trainer.nnodes * trainer.n_gpus_per_node} training ranks as CPU processes instead"
        )
    if trainer.nnodes > 1 and not os.environ.get("RAY_ADDRESS"):
        limits.append(f"trainer.nnodes={trainer.nnodes} needs a Ray cluster (start one and set RAY_ADDRESS)")
    if rollout.name == "vllm" and importlib.util.find_spec("vllm") is None:
        limits.append("the vllm rollout engine needs the vllm package, which is not installed here")
    limits += [f"data file {path} does not exist here" for path in _missing(_paths(config.data.train_files))]
    limits += [f"data file {path} does not exist here" for path in _missing(_paths(config.data.val_files))]
    model = config.actor_rollout_ref.model.path
    if not Path(model).expanduser().is_dir():
        limits.append(f"model {model} is not a local directory here (a Hugging Face Hub id needs network access)")
    return limits


def _paths(files: object) -> list[str]:
    if files is None:
        return []
    return [files] if isinstance(files, str) else [str(f) for f in files]


def _missing(paths: Iterable[str]) -> list[str]:
    return [p for p in paths if "://" not in p and not Path(p).expanduser().exists()]
