"""The one validation pass: every reason a config cannot run, found before Ray or any worker starts.

`refuse_unrunnable(config)` is what a real run calls (V1 in `core_v1.main_ppo.run_v1`, V0 in
`legacy_v0.entry.run_v0`) before it builds anything; it raises one `ConfigError` whose message
lists every problem, each naming the key and the fix, so the entrypoint prints one `error:` line.
It is two lists:

- `config_problems(config)`: what the config itself asks for and rlbridge cannot do. The plug-ins
  of `trainer.v1.plugins` are imported first (they register the names the rest looks up); then
  values the schema accepts but nothing runs (`unsupported_features`), registry names (advantage
  estimator, policy loss, trainer mode, weight-sync backend), algorithm sections (rollout
  correction, KL controller and estimators), what the training workers read (dtypes, the
  sampling temperature, dynamic batch sizes, the LR schedule, the rank layout), the trainer
  mode's constraints (its `config_problems`, which a mode extends from its parent's), the
  reward manager, a vision-language model rlbridge cannot feed images to (a family other than
  Qwen2-VL / Qwen2.5-VL / Qwen3-VL, or a critic), and every piece of user code a run loads (reward function and prompt sampler
  `data.sampler` on both trainers; on V1 also the custom replay buffer, agent-loop YAML and tool
  files, `trainer.v1.worker_class`), each through the loader that will load it. The dry run
  prints these.
- `machine_problems(config)`: what this machine lacks for it: the device, the rollout engine's
  package, the weight-sync backend, model directories (or Hub ids it can reach), the logger
  packages, the checkpoint `trainer.resume_mode` points at, the `hdfs` client that an `hdfs://`
  `trainer.default_hdfs_dir` needs.

Each check calls the code that will later read the value (a dtype through `resolve_dtype`, a
sampler through `replay_buffer_class`...), so this pass and a real run cannot disagree; a check
raises a `UserError` (`core_v1.errors`), which is turned into one line here.
"""

from __future__ import annotations

import os
from typing import Callable

from core_v1.config.schema import ConfigError, PPOConfig, unsupported_features
from core_v1.errors import UserError


def user_error_types() -> tuple[type[BaseException], ...]:
    """Errors that describe a mistake in the user's config, data or code, never a bug of ours:
    every `UserError`, and a path the user named that the library opening it did not find."""
    return UserError, FileNotFoundError


def refuse_unrunnable(config: PPOConfig) -> None:
    """Raise one ConfigError naming every problem of `config` on this machine (see the module docstring)."""
    problems = config_problems(config)
    problems += [problem for problem in machine_problems(config) if problem not in problems]
    if problems:
        raise ConfigError("; ".join(problems))


def problems_of(*checks: Callable[[], object]) -> list[str]:
    """Run each check; the message of each one that raises a user error, in order."""
    user_errors = user_error_types()
    problems = []
    for check in checks:
        try:
            check()
        except user_errors as error:
            problems.append(str(error).strip())
    return problems


# -------------------------------------------------------------------------------- the config
def config_problems(config: PPOConfig) -> list[str]:
    """Every reason `config` cannot run anywhere (empty: it can), for V1 and for the V0 trainer."""
    from core_v1.utils.plugins import import_plugins

    plugins = problems_of(lambda: import_plugins(config.trainer.v1.plugins))
    if plugins:  # the names below may be registered by the plug-in that failed: say only the cause
        return plugins
    problems = list(unsupported_features(config))
    problems += _unknown_names(config)
    problems += _algorithm_problems(config)
    problems += _worker_problems(config)
    problems += _reward_function_problems(config)
    problems += _prompt_sampler_problems(config)
    problems += _vision_model_problems(config)
    problems += _distillation_problems(config)
    if config.trainer.use_v1:
        problems += _placement_problems(config)
        problems += _mode_problems(config)
        problems += _user_code_problems(config)
    return problems


def check_mode_constraints(config: PPOConfig) -> list[str]:
    """Every reason the configured trainer mode cannot run `config` (empty: it can, or the mode is
    unknown, which `_mode_problems` reports): what its `config_problems` lists."""
    from core_v1.trainer.registry import TRAINER_MODES

    mode = config.trainer.v1.trainer_mode
    return list(TRAINER_MODES.get(mode).config_problems(config)) if mode in TRAINER_MODES else []


def _placement_problems(config: PPOConfig) -> list[str]:
    from core_v1.trainer.setup import placement_problems

    return placement_problems(config)


def _unknown_names(config: PPOConfig) -> list[str]:
    """Registry lookups of the plug-in names the config gives (each message lists the known names)."""
    from core_v1.algorithms import get_adv_estimator_fn
    from core_v1.algorithms.policy_loss import get_policy_loss_fn
    from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS

    aro = config.actor_rollout_ref
    lookups = [
        lambda: get_adv_estimator_fn(config.algorithm.adv_estimator),
        lambda: get_policy_loss_fn(aro.actor.policy_loss.loss_mode),
    ]
    if config.trainer.use_v1:
        lookups.append(lambda: CHECKPOINT_BACKENDS.get(aro.rollout.checkpoint_engine.backend))
    return problems_of(*lookups)


def _algorithm_problems(config: PPOConfig) -> list[str]:
    """Algorithm sections parsed by the functions the trainer and the actor will use on them."""
    import torch

    from core_v1.algorithms.advantages.otb import require_sum_pi_squared
    from core_v1.algorithms.kl import get_kl_controller, kl_penalty
    from core_v1.trainer.off_policy import correction_config

    algorithm, actor = config.algorithm, config.actor_rollout_ref.actor
    one = torch.zeros(1)
    checks = [
        lambda: correction_config(algorithm.rollout_correction).training_loss_mode(actor.policy_loss.loss_mode),
        lambda: require_sum_pi_squared(
            algorithm.adv_estimator, actor.calculate_sum_pi_squared, algorithm.rollout_correction.bypass_mode
        ),
    ]
    if algorithm.use_kl_in_reward:
        checks += [lambda: get_kl_controller(algorithm.kl_ctrl), lambda: kl_penalty(one, one, algorithm.kl_penalty)]
    if actor.use_kl_loss:
        checks.append(lambda: kl_penalty(one, one, actor.kl_loss_type))
    return problems_of(*checks)


def _distillation_problems(config: PPOConfig) -> list[str]:
    """On-policy distillation's teachers and loss, read as the ranks and the actor will read them
    (V0 refuses it: it predates distillation in verl)."""
    from core_v1.workers.distillation import check_distillation

    return problems_of(lambda: check_distillation(config))


def _worker_problems(config: PPOConfig) -> list[str]:
    """What the training workers read from the config, through the functions that read it there."""
    import torch

    from core_v1.workers.group import check_layout
    from core_v1.workers.model import resolve_dtype, sampling_temperature
    from core_v1.workers.training import build_lr_scheduler, micro_batching

    aro, critic = config.actor_rollout_ref, config.critic
    dtypes = [("actor_rollout_ref.actor.fsdp_config.model_dtype", aro.actor.fsdp_config.model_dtype)]
    budgets = [
        (
            aro.actor.use_dynamic_bsz,
            aro.actor.ppo_max_token_len_per_gpu,
            "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
        ),
        (
            aro.rollout.log_prob_use_dynamic_bsz,
            aro.rollout.log_prob_max_token_len_per_gpu,
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
        ),
    ]
    optimizers = [(aro.actor.optim, "actor_rollout_ref.actor.optim")]
    if config.use_reference_policy:
        dtypes.append(("actor_rollout_ref.ref.fsdp_config.model_dtype", aro.ref.fsdp_config.model_dtype))
        budgets.append(
            (
                aro.ref.log_prob_use_dynamic_bsz,
                aro.ref.log_prob_max_token_len_per_gpu,
                "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
            )
        )
    if config.use_critic:
        dtypes.append(("critic.fsdp.model_dtype", critic.fsdp.model_dtype))
        budgets += [
            (critic.use_dynamic_bsz, critic.ppo_max_token_len_per_gpu, "critic.ppo_max_token_len_per_gpu"),
            (critic.use_dynamic_bsz, critic.forward_max_token_len_per_gpu, "critic.forward_max_token_len_per_gpu"),
        ]
        optimizers.append((critic.optim, "critic.optim"))

    def schedule(optim, prefix: str):  # a one-parameter optimizer: the schedule checks what it reads
        build_lr_scheduler(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=optim.lr), optim, 1, prefix)

    return problems_of(
        lambda: sampling_temperature(aro.rollout),
        lambda: check_layout(config),
        *(lambda k=key, d=dtype: resolve_dtype(d, k) for key, dtype in dtypes),
        *(lambda b=budget: micro_batching(b[0], b[1], None, b[2]) for budget in budgets),
        *(lambda o=optim, p=prefix: schedule(o, p) for optim, prefix in optimizers),
    )


def _mode_problems(config: PPOConfig) -> list[str]:
    from core_v1.trainer.base import PPOTrainer
    from core_v1.trainer.registry import get_trainer_cls
    from core_v1.utils.registry import UnknownNameError

    try:
        trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    except UnknownNameError as error:
        return [str(error)]
    problems = list(trainer_cls.config_problems(config))
    if trainer_cls.check_config.__func__ is not PPOTrainer.check_config.__func__:
        # A mode written before config_problems that raises from its own check_config.
        problems += [p for p in problems_of(lambda: trainer_cls.check_config(config)) if p not in problems]
    return problems


def _reward_function_problems(config: PPOConfig) -> list[str]:
    """The reward function both trainers call (`reward.custom_reward_function`), loaded as they load it."""
    from core_v1.reward import load_custom_reward_function

    custom = config.reward.custom_reward_function
    return problems_of(lambda: load_custom_reward_function(custom.path, custom.name))


def _prompt_sampler_problems(config: PPOConfig) -> list[str]:
    """The prompt sampler both trainers build (`data.sampler`), its class loaded as they load it."""
    from core_v1.data.samplers import load_sampler_class

    sampler = config.data.sampler
    if not sampler.class_path:
        return []
    return problems_of(lambda: load_sampler_class(sampler.class_path, sampler.class_name))


def _user_code_problems(config: PPOConfig) -> list[str]:
    """Every other piece of user code a V1 run loads, loaded now by the function that loads it then."""
    from core_v1.agent_loop.manager import check_agent_loops
    from core_v1.reward.managers import reward_manager_policy
    from core_v1.trainer.registry import TRAINER_MODES
    from core_v1.trainer.setup import replay_buffer_class
    from core_v1.workers.worker_class import load_worker_class

    mode = config.trainer.v1.trainer_mode
    mode_buffer = TRAINER_MODES.get(mode).replay_buffer_cls if mode in TRAINER_MODES else None
    checks = [
        lambda: reward_manager_policy(config.reward, config.data.max_response_length),
        lambda: replay_buffer_class(config, mode_buffer),
        lambda: check_agent_loops(config, []),
    ]
    if config.trainer.v1.worker_class:
        checks.append(lambda: load_worker_class(config.trainer.v1.worker_class))
    return problems_of(*checks)


def _vision_model_problems(config: PPOConfig) -> list[str]:
    """A vision-language policy or critic of a family rlbridge cannot feed images to (read from the
    model folders' config.json; a folder not here is the machine's problem)."""
    from core_v1.utils.vision import vision_model_problem

    found = [vision_model_problem(config.actor_rollout_ref.model.path, "actor_rollout_ref.model.path")]
    if config.use_critic:
        found.append(vision_model_problem(config.critic.model.path, "critic.model.path"))
    return [problem for problem in found if problem]


# ------------------------------------------------------------------------------- the machine
def machine_problems(config: PPOConfig) -> list[str]:
    """What this machine lacks to start `config` (a real run checks it; the dry run only notes it)."""
    from core_v1.rollout.engines.registry import engine_problems
    from core_v1.trainer.checkpointing import check_checkpoint_setup
    from core_v1.device import resolve_device
    from core_v1.utils.tracking import require_sinks

    aro = config.actor_rollout_ref
    problems = problems_of(
        lambda: resolve_device(config),
        lambda: require_sinks(config.trainer.logger),
        lambda: check_checkpoint_setup(config.trainer),
    )
    if config.trainer.use_v1:
        problems += problems_of(lambda: _start_weight_sync_backend(config))
    problems += engine_problems(aro.rollout.name, config.trainer.device)
    return problems + [
        f"{key}: {problem}" for path, key in _model_paths(config).items() for problem in model_problems(path)
    ]


def _start_weight_sync_backend(config: PPOConfig) -> None:
    """Build and close the weight-sync backend: it refuses a device it cannot run on (nccl on a CPU machine)."""
    from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS

    section = config.actor_rollout_ref.rollout.checkpoint_engine
    CHECKPOINT_BACKENDS.get(section.backend)(section).close()


def _model_paths(config: PPOConfig) -> dict[str, str]:
    """Every model or tokenizer the run loads, each once, with the first key that names it (a path
    the user never set, such as verl's default model path, is then named by its key)."""
    aro = config.actor_rollout_ref
    named = [
        ("actor_rollout_ref.model.path", aro.model.path),
        ("actor_rollout_ref.model.tokenizer_path", aro.model.tokenizer_path),
        ("data.tokenizer", config.data.tokenizer),
    ]
    if config.use_critic:
        named.append(("critic.model.path", config.critic.model.path))
    if config.reward.reward_model.enable:
        named += [
            ("reward.reward_model.model_path", config.reward.reward_model.model_path),
            ("reward.reward_model.input_tokenizer", config.reward.reward_model.input_tokenizer),
        ]
    if config.distillation.enabled:
        named += [
            (f"distillation.teacher_models.{name}.model_path", dict(entry or {}).get("model_path"))
            for name, entry in dict(config.distillation.teacher_models).items()
        ]
    paths: dict[str, str] = {}
    for key, path in named:
        if path:
            paths.setdefault(str(path), key)
    return paths


def model_problems(model_path: str) -> list[str]:
    """Why `model_path` cannot be loaded here, found in seconds (transformers retries the Hub for a minute).

    A local directory is taken as it is; anything else must be a Hub id that is already in the local
    cache or that the Hub answers for within a few seconds.
    """
    from pathlib import Path

    from huggingface_hub import model_info, try_to_load_from_cache
    from huggingface_hub.errors import HFValidationError, RepositoryNotFoundError

    if Path(model_path).expanduser().is_dir():
        return []
    fix = "give a local model directory (or a Hugging Face Hub id this machine can download)"
    try:
        if isinstance(try_to_load_from_cache(model_path, "config.json"), str):
            return []
        if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0"):
            return [
                f"model {model_path!r} is not a local directory and not in the Hugging Face cache, and "
                f"HF_HUB_OFFLINE is set; {fix}"
            ]
        model_info(model_path, timeout=_HUB_PROBE_TIMEOUT_S)
    except (HFValidationError, RepositoryNotFoundError):
        return [f"model {model_path!r} is not a local directory and not a model on the Hugging Face Hub; {fix}"]
    except Exception as error:  # no network, proxy, TLS: all mean the download would fail too
        return [
            f"model {model_path!r} is not a local directory, and the Hugging Face Hub cannot be reached "
            f"({type(error).__name__}); {fix}"
        ]
    return []


_HUB_PROBE_TIMEOUT_S = 5.0
