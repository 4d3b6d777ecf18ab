"""verl's `TaskRunner` and `run_ppo` on the V0 trainer: choose the workers, reward managers and
prompt sampler, then train.

To run your own worker class, subclass `TaskRunner` (verl's pattern) and pass it on:

    class MyTaskRunner(TaskRunner):
        def add_actor_rollout_worker(self, config):
            self.role_worker_mapping[Role.ActorRollout] = MyWorker
            return MyWorker

    run_ppo(config, task_runner_class=MyTaskRunner)

`legacy_v0.main_ppo` (the command line) exports both names, where verl's users import them from.
"""

from __future__ import annotations

from typing import Optional

from omegaconf import DictConfig

from core_v1.config import PPOConfig
from core_v1.data import build_dataset
from core_v1.data.samplers import build_custom_sampler_feed
from core_v1.utils.plugins import import_plugins
from legacy_v0 import warn_deprecated
from legacy_v0.config import V0Config, V0Settings
from legacy_v0.reward import load_reward_manager
from legacy_v0.trainer import RayPPOTrainer, Role, as_ppo_config
from legacy_v0.workers import ActorRolloutRefWorker, CriticWorker, load_tokenizer


class TaskRunner:
    """Chooses the worker classes (`role_worker_mapping`), the reward managers and the prompt
    sampler, then trains.

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

    def run(self, config: V0Config | PPOConfig | DictConfig) -> list[dict]:
        """Train with the chosen workers; returns every step's metrics."""
        v0 = config if isinstance(config, V0Config) else None
        settings = v0.settings if v0 is not None else V0Settings()
        config = v0.ppo_config() if v0 is not None else as_ppo_config(config)
        # As the entrypoint does, for scripts that call run_ppo themselves, as verl's main does.
        import_plugins(config.trainer.v1.plugins)
        actor_rollout_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        tokenizer = load_tokenizer(config)
        train_dataset = build_dataset(config.data, config.data.train_files, tokenizer)
        trainer = RayPPOTrainer(
            config,
            tokenizer,
            role_worker_mapping=self.role_worker_mapping,
            reward_fn=load_reward_manager(config, tokenizer, num_examine=0, settings=settings),
            val_reward_fn=load_reward_manager(config, tokenizer, num_examine=1, settings=settings),
            train_dataset=train_dataset,
            train_sampler=build_custom_sampler_feed(
                config.data.sampler.class_path,
                config.data.sampler.class_name,
                train_dataset,
                config.data,
                config.data.train_batch_size,
            ),
        )
        try:
            trainer.init_workers()
            return trainer.fit()
        finally:
            trainer.shutdown()


def run_ppo(
    config: V0Config | PPOConfig | DictConfig, task_runner_class: Optional[type[TaskRunner]] = None
) -> list[dict]:
    """verl's `run_ppo`: train on V0 with `task_runner_class` (default `TaskRunner`)."""
    warn_deprecated()
    return (task_runner_class or TaskRunner)().run(config)
