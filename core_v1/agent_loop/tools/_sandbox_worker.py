"""The worker process of `core_v1.agent_loop.tools.sandbox` (see there): one function, many calls.

Protocol on stdin/stdout: length-prefixed pickles. First the setup message (where the function
is, the limits), answered with ("ready", isolation) or ("failed", reason); then one message per
call (the keyword arguments), answered with ("ok", value) or ("error", text for the model).
The tool's own prints go to stderr, so they cannot corrupt the protocol.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import importlib
import inspect
import os
import pickle
import resource
import struct
import sys
from typing import Any, BinaryIO, Callable

_HEADER = struct.Struct("!I")
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_BLOCKED_EVENTS = ("socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto", "socket.gethostbyname")


def main() -> None:
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a tool's print() lands on stderr
    setup = _read(protocol_in)
    try:
        isolation = "network allowed" if setup["network"] else _leave_network()
        fn = _load(setup["module"], setup["file"], setup["qualname"])
        _cap_memory(setup["memory_mb"])
    except Exception as error:
        _write(protocol_out, ("failed", f"{type(error).__name__}: {error}"))
        return
    _write(protocol_out, ("ready", isolation))
    while True:
        try:
            arguments = _read(protocol_in)
        except EOFError:
            return
        _write(protocol_out, _call(fn, arguments, setup["cpu_s"]))


def _call(fn: Callable[..., Any], arguments: dict, cpu_s: float) -> tuple[str, Any]:
    used = resource.getrusage(resource.RUSAGE_SELF)
    budget = int(used.ru_utime + used.ru_stime + cpu_s) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (budget, resource.RLIM_INFINITY))
    try:
        value = fn(**arguments)
        if inspect.iscoroutine(value):
            value = asyncio.run(value)
        pickle.dumps(value)
        return "ok", value
    except MemoryError:
        return "error", "ran out of its memory limit"
    except Exception as error:
        return "error", f"failed: {error or type(error).__name__}"


def _leave_network() -> str:
    """'namespace' when this process has a network of its own (nothing up), else 'audit-hook'."""
    libc = ctypes.CDLL(None, use_errno=True)
    for flags in (_CLONE_NEWNET, _CLONE_NEWUSER | _CLONE_NEWNET):
        if libc.unshare(flags) == 0:
            return "namespace"
    sys.addaudithook(_refuse_sockets)
    return "audit-hook"


def _refuse_sockets(event: str, args: tuple) -> None:
    if event in _BLOCKED_EVENTS:
        raise OSError(errno.ENETUNREACH, "network access is disabled in the tool sandbox "
                                         "(actor_rollout_ref.rollout.multi_turn.tool_sandbox.network=false)")


def _load(module_name: str, file: str, qualname: str) -> Callable[..., Any]:
    module = _import_by_name(module_name, file) or _import_by_path(file)
    target: Any = module
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def _import_by_name(module_name: str, file: str):
    """The module by its own name when that name leads to the same file (keeps relative imports working)."""
    if not module_name or module_name.startswith("_") or module_name == "__main__":
        return None
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None
    same = os.path.realpath(getattr(module, "__file__", "") or "") == os.path.realpath(file)
    return module if same else None


def _import_by_path(file: str):
    from core_v1.utils.loading import load_file  # the one loader: the same module name as in the driver
    return load_file(file)


def _cap_memory(memory_mb: int) -> None:
    with open("/proc/self/statm") as statm:
        in_use = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = in_use + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    return pickle.loads(stream.read(_HEADER.unpack(header)[0]))


def _write(stream: BinaryIO, message: Any) -> None:
    payload = pickle.dumps(message)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


if __name__ == "__main__":
    main()
