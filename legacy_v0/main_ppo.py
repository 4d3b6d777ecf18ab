"""The V0 entry: `run_v0(config)`, verl's `run_ppo` / `TaskRunner`, and `python -m legacy_v0.main_ppo`.

`python -m core_v1.main_ppo ... trainer.use_v1=false` composes the config (mapping legacy keys
through the shims) and calls `run_v0`; `python -m legacy_v0.main_ppo ...`, for scripts that call
the V0 entry directly, does exactly the same. Both print one deprecation warning naming the V1
replacement and the release that removes V0.

To run your own worker class, subclass `TaskRunner` (verl's pattern) and pass it on:

    class MyTaskRunner(TaskRunner):
        def add_actor_rollout_worker(self, config):
            self.role_worker_mapping[Role.ActorRollout] = MyWorker
            return MyWorker

    run_ppo(config, task_runner_class=MyTaskRunner)
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from omegaconf import DictConfig

from core_v1.config import ConfigError, PPOConfig
from legacy_v0 import warn_deprecated
from legacy_v0.reward import load_reward_manager
from legacy_v0.trainer import RayPPOTrainer, Role, as_ppo_config
from legacy_v0.workers import ActorRolloutRefWorker, CriticWorker, load_tokenizer


class TaskRunner:
    """Chooses the worker classes (`role_worker_mapping`) and the reward managers, then trains.

    Override `add_actor_rollout_worker`, `add_critic_worker` or `add_ref_policy_worker` to put
    your own worker class in the loop; `run(config)` builds `RayPPOTrainer` with them.
    """

    def __init__(self):
        self.role_worker_mapping: dict[Role, type] = {}

    def add_actor_rollout_worker(self, config: PPOConfig) -> type:
        self.role_worker_mapping[Role.ActorRollout] = ActorRolloutRefWorker
        return ActorRolloutRefWorker

    def add_critic_worker(self, config: PPOConfig) -> None:
        if config.use_critic:
            self.role_worker_mapping[Role.Critic] = CriticWorker

    def add_ref_policy_worker(self, config: PPOConfig, ref_policy_cls: type) -> None:
        if config.use_reference_policy:
            self.role_worker_mapping[Role.RefPolicy] = ref_policy_cls

    def run(self, config: PPOConfig | DictConfig) -> list[dict]:
        """Train with the chosen workers; returns every step's metrics."""
        config = as_ppo_config(config)
        actor_rollout_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        tokenizer = load_tokenizer(config)
        trainer = RayPPOTrainer(config, tokenizer, role_worker_mapping=self.role_worker_mapping,
                                reward_fn=load_reward_manager(config, tokenizer, num_examine=0),
                                val_reward_fn=load_reward_manager(config, tokenizer, num_examine=1))
        try:
            trainer.init_workers()
            return trainer.fit()
        finally:
            trainer.shutdown()


def run_ppo(config: PPOConfig | DictConfig, task_runner_class: Optional[type[TaskRunner]] = None) -> list[dict]:
    """verl's `run_ppo`: train on V0 with `task_runner_class` (default `TaskRunner`)."""
    warn_deprecated()
    return (task_runner_class or TaskRunner)().run(config)


def run_v0(raw_config: DictConfig, task_runner_class: Optional[type[TaskRunner]] = None) -> int:
    """Run a composed config on the V0 trainer (what `core_v1.main_ppo` calls when
    `trainer.use_v1=false`): refuse what cannot run (ConfigError), print the plan on a dry run,
    else train. Returns 0."""
    from core_v1.trainer.constraints import config_problems

    warn_deprecated()
    config = as_ppo_config(raw_config)
    if config.trainer.dry_run:
        from core_v1.main_ppo import dry_run
        return dry_run(raw_config)
    problems = config_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    run_ppo(config, task_runner_class)
    return 0


_USE_V1_PREFIXES = ("trainer.use_v1=", "+trainer.use_v1=", "++trainer.use_v1=")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m legacy_v0.main_ppo [--config-name=NAME] key=value ...`: `core_v1.main_ppo` on V0."""
    from core_v1.main_ppo import main as main_ppo

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg.startswith(_USE_V1_PREFIXES) and arg.split("=", 1)[1].lower() == "true" for arg in argv):
        print("error: legacy_v0.main_ppo runs the V0 trainer; drop trainer.use_v1=true or run "
              "`python -m core_v1.main_ppo` for V1", file=sys.stderr)
        return 2
    overrides = [arg for arg in argv if not arg.startswith(_USE_V1_PREFIXES)]
    return main_ppo([*overrides, "trainer.use_v1=false"])


if __name__ == "__main__":
    sys.exit(main())
