"""What stops a valid-looking config from running, checked before anything starts.

`check_mode_constraints(config)` holds the hard constraints of the built-in trainer modes
(docs/design.md: `separate_async`'s batch arithmetic, weight-sync backend and reward-model placement).
It is the one place those facts live: the dry run calls it through `config_problems`, and a mode's
`check_config` calls it at start-up, so `trainer.dry_run=true` and a real run never disagree.

`config_problems(config)` is everything the dry run and `core_v1.main_ppo` refuse: values the
schema accepts but rlbridge cannot run (`unsupported_features`), plug-in names nobody registered
(trainer mode, advantage estimator, policy loss, weight-sync backend, default agent loop), the
mode constraints, and a registered mode's own `check_config`. Each reason is one line naming
the fix. Nothing here starts Ray or loads a model.
"""

from __future__ import annotations

import os
from typing import Callable

from core_v1.config.schema import ConfigError, PPOConfig, unsupported_features
from core_v1.utils.registry import UnknownNameError


def check_mode_constraints(config: PPOConfig) -> list[str]:
    """Every reason the configured built-in trainer mode cannot run `config` (empty: it can)."""
    check = _MODE_CONSTRAINTS.get(config.trainer.v1.trainer_mode)
    return check(config) if check is not None else []


def separate_async_problems(config: PPOConfig) -> list[str]:
    """The separate_async constraints (docs/design.md), each with the fix."""
    aro, mode = config.actor_rollout_ref, config.trainer.v1.separate_async
    problems = []
    if mode.parameter_sync_step < 1:
        problems.append(f"trainer.v1.separate_async.parameter_sync_step={mode.parameter_sync_step} must be >= 1")
    # One step is then exactly parameter_sync_step optimizer updates, so a sync after every step
    # syncs every parameter_sync_step updates and the one-version-per-step staleness count holds.
    if config.data.train_batch_size != mode.parameter_sync_step * aro.actor.ppo_mini_batch_size:
        problems.append(f"separate_async needs data.train_batch_size ({config.data.train_batch_size}) == "
                        f"trainer.v1.separate_async.parameter_sync_step ({mode.parameter_sync_step}) * "
                        f"actor_rollout_ref.actor.ppo_mini_batch_size ({aro.actor.ppo_mini_batch_size}); "
                        "change one of them")
    if aro.rollout.checkpoint_engine.backend == "naive":
        problems.append("separate_async cannot sync weights through actor_rollout_ref.rollout.checkpoint_engine."
                        "backend=naive (colocated only); set it to gloo (CPU) or nccl (GPU)")
    return problems


_MODE_CONSTRAINTS: dict[str, Callable[[PPOConfig], list[str]]] = {"separate_async": separate_async_problems}


def config_problems(config: PPOConfig) -> list[str]:
    """Every reason `config` cannot run (empty: it can), for V1 and for the V0 trainer."""
    problems = list(unsupported_features(config))
    problems += _unknown_names(config)
    problems += _algorithm_problems(config)
    if config.trainer.use_v1:
        problems += _mode_problems(config)
        problems += _reward_manager_problems(config)
    return list(dict.fromkeys(problems))  # a mode's check_config may repeat check_mode_constraints


def _reward_manager_problems(config: PPOConfig) -> list[str]:
    """V1's reward managers (core_v1.reward.managers) are checked here, before any worker builds one."""
    from core_v1.reward.managers import reward_manager_policy

    try:
        reward_manager_policy(config.reward, config.data.max_response_length)
    except ConfigError as error:
        return [str(error)]
    return []


def _unknown_names(config: PPOConfig) -> list[str]:
    """Registry lookups of every plug-in name the config gives (each message lists the known names)."""
    from core_v1.agent_loop import AGENT_LOOPS
    from core_v1.algorithms import get_adv_estimator_fn
    from core_v1.algorithms.policy_loss import get_policy_loss_fn
    from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS

    aro = config.actor_rollout_ref
    lookups = [lambda: get_adv_estimator_fn(config.algorithm.adv_estimator),
               lambda: get_policy_loss_fn(aro.actor.policy_loss.loss_mode)]
    if config.trainer.use_v1:
        lookups.append(lambda: CHECKPOINT_BACKENDS.get(aro.rollout.checkpoint_engine.backend))
        if not aro.rollout.agent.agent_loop_config_path:  # a loop file registers its own names
            lookups.append(lambda: AGENT_LOOPS.get(aro.rollout.agent.default_agent_loop))
    problems = []
    for lookup in lookups:
        try:
            lookup()
        except UnknownNameError as error:
            problems.append(str(error))
    return problems


def _algorithm_problems(config: PPOConfig) -> list[str]:
    """Algorithm sections parsed the way the trainer will parse them, so a bad value fails before Ray starts."""
    from core_v1.algorithms.errors import AlgorithmConfigError
    from core_v1.trainer.off_policy import correction_config

    try:
        correction_config(config.algorithm.rollout_correction)
    except AlgorithmConfigError as error:
        return [str(error)]
    return []


def startup_problems(config: PPOConfig) -> list[str]:
    """What this machine lacks to start `config` (checked by a real run, not by the dry run, which only notes it)."""
    paths = [config.actor_rollout_ref.model.path]
    if config.use_critic:
        paths.append(config.critic.model.path)
    if config.reward.reward_model.enable:
        paths.append(config.reward.reward_model.model_path)
    from core_v1.rollout.engines.registry import engine_problems
    problems = engine_problems(config.actor_rollout_ref.rollout.name, config.trainer.device)
    return problems + [problem for path in dict.fromkeys(p for p in paths if p) for problem in model_problems(path)]


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
            return [f"model {model_path!r} is not a local directory and not in the Hugging Face cache, and "
                    f"HF_HUB_OFFLINE is set; {fix}"]
        model_info(model_path, timeout=_HUB_PROBE_TIMEOUT_S)
    except (HFValidationError, RepositoryNotFoundError):
        return [f"model {model_path!r} is not a local directory and not a model on the Hugging Face Hub; {fix}"]
    except Exception as error:  # no network, proxy, TLS: all mean the download would fail too
        return [f"model {model_path!r} is not a local directory, and the Hugging Face Hub cannot be reached "
                f"({type(error).__name__}); {fix}"]
    return []


_HUB_PROBE_TIMEOUT_S = 5.0


def _mode_problems(config: PPOConfig) -> list[str]:
    from core_v1.trainer.registry import get_trainer_cls

    try:
        trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    except UnknownNameError as error:
        return [str(error)]
    problems = check_mode_constraints(config)
    listed = getattr(trainer_cls, "config_problems", None)  # modes that list reasons, not just raise
    if listed is not None:
        return problems + list(listed(config))
    try:
        trainer_cls.check_config(config)
    except ConfigError as error:
        problems.append(str(error))
    return problems
