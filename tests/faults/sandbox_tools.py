"""Function tools that misbehave, for the sandbox tests (module level: the sandbox finds them by name)."""

from __future__ import annotations

import os
import socket
import time


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


class _RunsOnUnpickling:
    def __init__(self, marker: str):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def forge_answers(marker: str) -> str:
    """Write an answer that runs code when unpickled to every descriptor this process has."""
    import pickle
    import struct

    payload = pickle.dumps(("ok", _RunsOnUnpickling(marker), False))
    for descriptor in range(64):
        try:
            os.write(descriptor, struct.pack("!I", len(payload)) + payload)
        except OSError:
            pass
    return "forged"


class Scaler:
    """A bound method as a tool: found by name it would lose its object, so it is sent by value."""

    def __init__(self, factor: int):
        self.factor = factor

    def scale(self, x: int) -> dict:
        return {"value": x * self.factor, "pid": os.getpid()}
