"""The resolved plan a dry run prints: what would run where, and what this machine cannot run."""

from __future__ import annotations

import torch

from core_v1.config.schema import PPOConfig, unsupported_features


def describe_plan(config: PPOConfig, legacy_notes: list[str] | None = None) -> str:
    aro, trainer = config.actor_rollout_ref, config.trainer
    mode = trainer.v1.trainer_mode if trainer.use_v1 else "V0 RayPPOTrainer (deprecated)"
    device = trainer.device if trainer.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    reward = config.reward.custom_reward_function
    lines = [
        "rlbridge plan",
        f"  trainer:     {'V1' if trainer.use_v1 else 'V0'}, mode {mode}",
        f"  devices:     {device}; training {trainer.nnodes}x{trainer.n_gpus_per_node}; "
        f"rollout pool {'separate ' + str(aro.rollout.nnodes) + 'x' + str(aro.rollout.n_gpus_per_node) if aro.rollout.nnodes else 'colocated'}",
        f"  model:       {aro.model.path}",
        f"  rollout:     engine {aro.rollout.name}, {aro.rollout.num_replicas} replica(s), n={aro.rollout.n}, "
        f"temperature={aro.rollout.temperature}, response_length={aro.rollout.response_length}",
        f"  agent loops: default {aro.rollout.agent.default_agent_loop}"
        + (f", from {aro.rollout.agent.agent_loop_config_path}" if aro.rollout.agent.agent_loop_config_path else ""),
        f"  algorithm:   {config.algorithm.adv_estimator}, policy loss {aro.actor.policy_loss.loss_mode}, "
        f"critic {'on' if config.use_critic else 'off'}, reference {'on' if config.use_reference_policy else 'off'}",
        f"  reward:      {reward.path + ':' + reward.name if reward.path else 'built-in scorer by data_source'}",
        f"  weight sync: {aro.rollout.checkpoint_engine.backend}",
        f"  data:        train {config.data.train_files}, val {config.data.val_files}, "
        f"batch {config.data.train_batch_size} prompts",
    ]
    for note in legacy_notes or []:
        lines.append(f"  legacy key:  {note}")
    for problem in unsupported_features(config):
        lines.append(f"  cannot run:  {problem}")
    return "\n".join(lines)
