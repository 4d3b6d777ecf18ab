"""The function tool of benchmarks/soak.py (`multi_turn.function_tool_path`); it runs in the tool
sandbox's worker processes, which are killed when a call outlives `multi_turn.tool_timeout_s`."""

from __future__ import annotations

import time

from core_v1.agent_loop.tools.function_tool import function_tool


@function_tool
def check_answer(answer: str, hang: bool) -> str:
    """Say whether the answer is a whole number ("1") or not ("0").

    Args:
        answer: the model's answer.
        hang: never return (the soak's injected tool fault; the sandbox must kill the worker).
    """
    while hang:
        time.sleep(1)
    return "1" if answer.strip().isdigit() else "0"
