"""Agent loops: the generation-logic extension point (see `base.py` for how to write one)."""

from core_v1.agent_loop.base import (
    AGENT_LOOPS,
    AgentLoopBase,
    AgentLoopConfigError,
    AgentLoopOutput,
    load_agent_loop_config,
    register,
)
from core_v1.agent_loop import single_turn  # noqa: F401  (registers single_turn_agent)
from core_v1.agent_loop import tool_agent  # noqa: F401  (registers tool_agent)

__all__ = [
    "AGENT_LOOPS",
    "AgentLoopBase",
    "AgentLoopConfigError",
    "AgentLoopOutput",
    "load_agent_loop_config",
    "register",
]
