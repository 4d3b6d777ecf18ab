"""What a launch does once its config is composed: train on V1, print the plan, or run the smoke test.

The command line (`core_v1.main_ppo`) and V0's entry (`legacy_v0.entry`) both call these; the
command line also composes the config and picks V0 or V1, which these never do.
"""

from __future__ import annotations

from typing import Callable, Sequence

from omegaconf import DictConfig

from core_v1.config import ConfigError, PPOConfig, to_config


def run_v1(config: PPOConfig) -> int:
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.constraints import refuse_unrunnable
    from core_v1.trainer.setup import build_components

    refuse_unrunnable(config)  # the one validation pass, before Ray or any worker starts
    trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    components = build_components(
        config, replay_buffer_cls=trainer_cls.replay_buffer_cls, partial_rollout=trainer_cls.partial_rollout
    )
    try:
        trainer_cls(config, components).fit()
    finally:
        components.close()
    return 0


def dry_run(raw: DictConfig, legacy_notes: Sequence[str] = ()) -> int:
    """Validate and print the plan (V1 or V0) without starting anything; refusals exit 2."""
    from core_v1.trainer.constraints import config_problems
    from core_v1.trainer.plan import describe_plan

    config = to_config(raw)
    problems = config_problems(config)
    print(describe_plan(config, legacy_notes, problems))
    if problems:
        raise ConfigError("; ".join(problems))
    return 0


def smoke_or_run(raw: DictConfig, run: Callable[[DictConfig], int]) -> int:
    """`run(raw)`; with `trainer.smoke=true`, first rewritten into its smoke form (core_v1.smoke),
    with one line per replacement before the run and a verdict after it."""
    if not raw.trainer.smoke:
        return run(raw)
    from core_v1.smoke import run_smoke

    return run_smoke(raw, run)
