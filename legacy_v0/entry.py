"""The V0 entry `core_v1.main_ppo` calls when a run asks for V0 (`trainer.use_v1=false`).

`run_v0` takes the V0 config the command line composed (`legacy_v0.config.compose_v0`: verl's V0
key layout, its moved keys read through the shims' rename table), imports every class the config
names (a missing one is one error line at start-up), then prints the plan (`trainer.dry_run=true`:
nothing is started and the V0 trainer is not imported) or trains through
`legacy_v0.task_runner.run_ppo`.
"""

from __future__ import annotations

from typing import Optional

from omegaconf import DictConfig

from legacy_v0 import warn_deprecated
from legacy_v0.config import V0Config, V0Settings
from legacy_v0.startup_checks import check_class_paths, refuse_agent_loops


def run_v0(config: V0Config | DictConfig, task_runner_class: Optional[type] = None) -> int:
    """Run a composed V0 config: refuse what cannot run (ConfigError), print the plan on a dry
    run, else train. A bare DictConfig (V1 layout) is taken as it is. Returns 0."""
    from core_v1.launch import dry_run
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
    from legacy_v0.task_runner import run_ppo  # the trainer, only for a real run

    run_ppo(v0, task_runner_class)
    return 0
