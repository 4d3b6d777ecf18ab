"""Rewards: scorers run inside the agent loop as each trajectory finishes."""

from core_v1.reward.loop import RewardFunctionError, RewardScorer, load_custom_reward_function

__all__ = ["RewardFunctionError", "RewardScorer", "load_custom_reward_function"]
