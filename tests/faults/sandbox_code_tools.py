"""Tools registered through rlbridge's own API, for the sandbox tests. Apart from `sandbox_tools`
because importing `core_v1.agent_loop.tools` is slow (torch), and each worker imports its tool's module."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.function_tool import function_tool


@function_tool("read_allowed_env", env=["RLBRIDGE_ALLOWED"])
def read_allowed_env() -> dict:
    """Read two environment variables."""
    return {name: os.environ.get(name) for name in ("RLBRIDGE_ALLOWED", "RLBRIDGE_HIDDEN")}


class CodeRunningTool(BaseTool):
    """A BaseTool that runs code we did not write, so it declares it: its execute runs in the sandbox."""

    runs_code = True

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        if parameters.get("sleep"):
            time.sleep(parameters["sleep"])
        try:
            socket.socket()
            network = "open"
        except OSError:
            network = "refused"
        seen = {name: os.environ.get(name) for name in ("RLBRIDGE_ALLOWED", "RLBRIDGE_HIDDEN")}
        return f"pid={os.getpid()} network={network} env={seen}", 0.5, {"config": self.config.get("flavour")}


class PidTool(BaseTool):
    """Runs no foreign code: executes where the loop runs."""

    async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any):
        return str(os.getpid()), 0.0, {}


class SandboxedPidTool(PidTool):
    """The same execute, inherited, declared as running code: executes in the sandbox."""

    runs_code = True
