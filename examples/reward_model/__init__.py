"""The quickstart task trained by a served reward model (see __main__.py and make_reward_model.py)."""

from pathlib import Path


def reward_model_overrides(reward_model_dir: str | Path) -> list[str]:
    """The overrides that put the reward model in charge of the quickstart's reward."""
    # One-token answers: the reward model has seen every one (make_reward_model.candidate_responses).
    return [
        "data.max_response_length=1",
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={reward_model_dir}",
        "reward.reward_model.micro_batch_size_per_gpu=64",
    ]
