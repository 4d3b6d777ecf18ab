"""What V0 refuses as it starts, before any worker is built: the classes its config names and the
agent loops it cannot run. The entry (`legacy_v0.entry`), the trainer and the migration tool's
verifier call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from core_v1.config import PPOConfig
from legacy_v0.config import V0Settings

if TYPE_CHECKING:
    from core_v1.data import PromptDataset


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
