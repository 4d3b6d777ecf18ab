"""Function tools that misbehave, for the sandbox tests (module level: the sandbox finds them by name)."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.function_tool import function_tool


def add(a: int, b: int) -> dict:
    print("noise on stdout must not reach the protocol")
    return {"sum": a + b, "pid": os.getpid(), "worker": os.getppid()}


async def async_echo(text: str) -> str:
    return text


def sleep_forever() -> str:
    while True:
        time.sleep(1)


def allocate_without_bound() -> str:
    hoard = []
    while True:
        hoard.append(bytearray(64 * 1024 * 1024))


def spin_forever() -> str:
    while True:
        pass


def open_a_socket(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as connection:
        connection.sendall(b"leak")
    return "connected"


def raise_error() -> str:
    raise RuntimeError("the tool broke")


@function_tool("read_allowed_env", env=["RLBRIDGE_ALLOWED"])
def read_allowed_env() -> dict:
    """Read two environment variables.
    """
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
