"""The V0 entry `core_v1.main_ppo` calls when a run asks for V0 (`trainer.use_v1=false`).

It composes the V0 config (`legacy_v0.config.compose_v0`: verl's V0 key layout), imports every
class the config names (a missing one is one error line at start-up), then prints the plan
(`trainer.dry_run=true`: nothing is started and the V0 trainer is not imported) or trains
through `legacy_v0.main_ppo.run_ppo`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence

from omegaconf import DictConfig

from core_v1.config import PPOConfig
from legacy_v0 import warn_deprecated
from legacy_v0.config import V0Config, V0Settings, compose_v0

if TYPE_CHECKING:
    from core_v1.data import PromptDataset


def run_v0_from_args(config_name: str, config_dir: Optional[str], overrides: Sequence[str],
                     task_runner_class: Optional[type] = None) -> int:
    """What `core_v1.main_ppo` calls when the run asks for V0: compose the V0 config, then print
    the plan (`trainer.dry_run=true`) or train. Refusals raise ConfigError. Returns 0."""
    warn_deprecated()
    return run_v0(compose_v0(config_name, config_dir, overrides), task_runner_class)


def run_v0(config: V0Config | DictConfig, task_runner_class: Optional[type] = None) -> int:
    """Run a composed V0 config: refuse what cannot run (ConfigError), print the plan on a dry
    run, else train. A bare DictConfig (V1 layout) is taken as it is. Returns 0."""
    from core_v1.main_ppo import dry_run
    from core_v1.trainer.constraints import refuse_unrunnable
    from core_v1.utils.plugins import import_plugins

    warn_deprecated()
    v0 = config if isinstance(config, V0Config) else V0Config(config, V0Settings())
    ppo = v0.ppo_config()
    import_plugins(ppo.trainer.v1.plugins)  # a plug-in may register the reward manager or sampler named below
    check_class_paths(ppo, v0.settings)
    refuse_agent_loops(ppo, [])  # the rows' agent names are checked again once the trainer reads the data
    if ppo.trainer.dry_run:
        try:
            return dry_run(v0.raw)
        finally:
            print("\n".join(v0.describe()))
    refuse_unrunnable(ppo)  # the V1 validation pass (V0's part of it), before any worker is built
    from legacy_v0.main_ppo import run_ppo  # the trainer, only for a real run

    run_ppo(v0, task_runner_class)
    return 0


def check_class_paths(config: PPOConfig, settings: V0Settings) -> None:
    """Import every class a V0 config names, at start-up: a missing one is one error line here
    rather than a failure (or silence) mid-run."""
    from legacy_v0.reward import BATCH_NEEDS_A_FUNCTION, REWARD_MANAGERS, BatchRewardManager, RewardFunctionError

    from legacy_v0.config.class_paths import load_checkpoint_manager_class

    manager = REWARD_MANAGERS.get(settings.reward_manager)
    if issubclass(manager, BatchRewardManager) and not config.reward.custom_reward_function.path:
        raise RewardFunctionError(BATCH_NEEDS_A_FUNCTION)  # as the manager refuses it once built
    load_checkpoint_manager_class(config.actor_rollout_ref.rollout.checkpoint_manager_class)


def refuse_agent_loops(config: PPOConfig, datasets: Sequence[PromptDataset]) -> None:
    """Refuse, at start-up and in the dry run (from the config; again once the trainer has read the
    rows), the agent loops that could not run: V0's rollout runs V1's agent loops
    (`legacy_v0.workers`), so this is V1's start-up check (`check_agent_loops`): an unknown loop name
    in the config or a row's `agent_name`, a bad agent-loop, tool or interaction file, interactions
    without `tool_agent`. A loop that returns several outputs for one sample cannot be laid out in
    V0's one-row-per-sample batch; that is known only when it returns, and is refused then
    (`MultiOutputSessionError`)."""
    from core_v1.agent_loop.manager import check_agent_loops

    check_agent_loops(config, list(datasets))
