"""Function tools run in pooled worker subprocesses with wall-time, CPU-time and memory limits and,
by default, no network (`actor_rollout_ref.rollout.multi_turn.tool_sandbox`).

Why a process: a thread cannot be stopped, so a tool that loops forever, allocates without bound or
talks to the network would keep doing it after its asyncio timeout fired. A worker process is
killed on timeout and replaced; the model is told what happened; nothing else is disturbed.

Each `@function_tool` function gets its own small pool (`workers` processes at most). A worker is
a plain `python -m core_v1.agent_loop.tools._sandbox_worker` child (not `multiprocessing`, which
would re-import the parent's `__main__`, a Ray worker's among others) that

1. leaves the network: a new network namespace (`unshare(CLONE_NEWNET)`, or with a user namespace
   where only that is allowed) has no interface but a loopback that is down; where the kernel
   refuses both, a Python audit hook refuses socket connects, binds and name look-ups instead
   (native code can bypass it, so the pool says so once, at start-up);
2. imports the function's file and looks the function up by its qualified name;
3. caps its address space at what it uses then plus `memory_mb` (the call sees `MemoryError`);
4. serves calls, one at a time, each with a CPU-time budget of `cpu_s` (SIGXCPU ends the
   process) and the wall-clock `timeout_s` of the tool, after which the parent kills it.

BaseTool subclasses keep per-trajectory state in their own object, so they keep running in the
agent-loop worker under the asyncio timeout, as before; only function tools are isolated here.
A function the worker cannot import by file and name (a lambda, a function defined inside another
function) runs in a thread, with one warning naming it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from core_v1.agent_loop.tools.base_tool import ToolConfigError

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_START_TIMEOUT_S = 120.0  # interpreter + the tool's imports, before any limit applies


@dataclass(frozen=True)
class SandboxLimits:
    """`actor_rollout_ref.rollout.multi_turn.tool_sandbox`, validated."""

    enable: bool = True
    workers: int = 2
    """Worker processes per function tool, at most; calls beyond that wait for a free one."""
    memory_mb: int = 1024
    """Address space a worker may add after importing the tool (MiB)."""
    cpu_s: float = 30.0
    """CPU seconds one call may use."""
    network: bool = False
    """Whether tools may use the network."""

    def __post_init__(self) -> None:
        key = "actor_rollout_ref.rollout.multi_turn.tool_sandbox"
        for name in ("workers", "memory_mb"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ToolConfigError(f"{key}.{name} must be an int >= 1, got {value!r}")
        if not self.cpu_s > 0:
            raise ToolConfigError(f"{key}.cpu_s must be > 0, got {self.cpu_s!r}")

    @classmethod
    def from_config(cls, section: Any) -> "SandboxLimits":
        return cls(enable=bool(section.enable), workers=section.workers, memory_mb=section.memory_mb,
                   cpu_s=float(section.cpu_s), network=bool(section.network))


class SandboxFailure(Exception):
    """A call that did not return: `status` is "timeout" or "error"; the message is for the model."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class FunctionReference:
    """Where a worker finds the function: its module (when importable by name), file and qualified name."""

    module: str
    file: str
    qualname: str

    @classmethod
    def of(cls, fn: Callable[..., Any]) -> Optional["FunctionReference"]:
        """The reference, or None for a function a fresh process cannot look up by name."""
        qualname = getattr(fn, "__qualname__", "")
        try:
            file = inspect.getsourcefile(fn)
        except TypeError:
            return None
        if not file or "<" in qualname or not Path(file).is_file():
            return None
        return cls(getattr(fn, "__module__", "") or "", str(Path(file).resolve()), qualname)


class _Worker:
    """One child process bound to one function; used by one call at a time."""

    def __init__(self, reference: FunctionReference, limits: SandboxLimits):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "core_v1.agent_loop.tools._sandbox_worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
        self._send({"module": reference.module, "file": reference.file, "qualname": reference.qualname,
                    "memory_mb": limits.memory_mb,
                    "cpu_s": limits.cpu_s, "network": limits.network})
        kind, detail = self._receive(_START_TIMEOUT_S)
        if kind != "ready":
            self.kill()
            raise SandboxFailure("error", f"could not start: {detail}")
        self.isolation: str = detail

    def call(self, arguments: dict, timeout_s: float) -> Any:
        self._send(arguments)
        kind, detail = self._receive(timeout_s)
        if kind == "ok":
            return detail
        raise SandboxFailure("error", detail)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, signal.SIGKILL)  # the tool's own children go too
        self.process.wait()

    def _send(self, message: Any) -> None:
        payload = pickle.dumps(message)
        try:
            self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise SandboxFailure("error", self._death()) from None

    def _receive(self, timeout_s: float) -> tuple[str, Any]:
        out = self.process.stdout
        ready, _, _ = select.select([out], [], [], timeout_s)
        if not ready:
            self.kill()
            raise SandboxFailure("timeout", f"did not answer within {timeout_s:g} s and was stopped")
        header = out.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise SandboxFailure("error", self._death())
        return pickle.loads(out.read(_HEADER.unpack(header)[0]))

    def _death(self) -> str:
        code = self.process.wait()
        if code == -signal.SIGXCPU:
            return "used more CPU time than its limit and was stopped"
        if code < 0:
            return f"was killed by signal {signal.Signals(-code).name}"
        return f"exited with code {code}"


class ToolSandbox:
    """The worker pools of one process (one per function), shared by every session."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self._lock = threading.Lock()
        self._idle: dict[FunctionReference, list[_Worker]] = {}
        self._slots: dict[FunctionReference, threading.BoundedSemaphore] = {}
        self._warned: set[str] = set()

    def runs(self, fn: Callable[..., Any]) -> bool:
        """Whether calls of `fn` go to a worker process (else they run in a thread)."""
        if FunctionReference.of(fn) is not None:
            return True
        self._warn_once(f"{fn!r}", f"function tool {getattr(fn, '__qualname__', fn)!r} cannot be looked up by file "
                                   "and name (a lambda or a nested function), so it runs unsandboxed in a thread; "
                                   "define it at module level to sandbox it")
        return False

    async def call(self, fn: Callable[..., Any], arguments: dict, timeout_s: float) -> Any:
        """`fn(**arguments)` in a worker; raises SandboxFailure when it does not return a value."""
        reference = FunctionReference.of(fn)
        return await asyncio.to_thread(self._call_blocking, reference, arguments, timeout_s)

    def close(self) -> None:
        with self._lock:
            workers = [w for pool in self._idle.values() for w in pool]
            self._idle.clear()
        for worker in workers:
            worker.kill()

    def _call_blocking(self, reference: FunctionReference, arguments: dict, timeout_s: float) -> Any:
        with self._slot(reference):
            worker = self._take(reference)
            try:
                return worker.call(arguments, timeout_s)
            finally:
                self._give_back(reference, worker)

    def _slot(self, reference: FunctionReference) -> threading.BoundedSemaphore:
        with self._lock:
            return self._slots.setdefault(reference, threading.BoundedSemaphore(self.limits.workers))

    def _take(self, reference: FunctionReference) -> _Worker:
        with self._lock:
            pool = self._idle.setdefault(reference, [])
            worker = pool.pop() if pool else None
        if worker is None:
            worker = _Worker(reference, self.limits)
            if worker.isolation != "namespace" and not self.limits.network:
                self._warn_once("isolation", "tool sandbox: this kernel refuses a network namespace; sockets are "
                                             "refused by a Python audit hook instead, which native code can bypass")
        return worker

    def _give_back(self, reference: FunctionReference, worker: _Worker) -> None:
        if not worker.alive():
            worker.kill()  # reaps it
            return
        with self._lock:
            self._idle[reference].append(worker)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)


_SANDBOXES: dict[SandboxLimits, ToolSandbox] = {}
_SANDBOXES_LOCK = threading.Lock()


def sandbox_for(limits: SandboxLimits) -> Optional[ToolSandbox]:
    """This process's sandbox for `limits` (one pool set serves every loop), or None when disabled."""
    if not limits.enable:
        return None
    with _SANDBOXES_LOCK:
        if limits not in _SANDBOXES:
            _SANDBOXES[limits] = ToolSandbox(limits)
        return _SANDBOXES[limits]
