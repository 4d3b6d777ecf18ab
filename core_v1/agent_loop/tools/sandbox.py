"""Code we did not write runs in pooled, isolated worker processes
(`actor_rollout_ref.rollout.multi_turn.tool_sandbox`): `@function_tool` functions, and `BaseTool`
subclasses that declare `runs_code = True` (their `execute`).

Why a process: a thread cannot be stopped, so a tool that loops forever, allocates without bound or
talks to the network would keep doing it after its asyncio timeout fired. A worker process tree is
killed on timeout and replaced; the model is told what happened; nothing else is disturbed.

Each tool gets its own small pool (`workers` processes at most). A worker is a plain
`python core_v1/agent_loop/tools/_sandbox_worker.py` child (not `multiprocessing`, which would
re-import the parent's `__main__`, a Ray worker's among others; a script, not `-m`: see there)
started with an environment reduced to `PATH`, `LANG`, `HOME` and `TMPDIR` (both its private temp
dir), `PYTHONPATH`, and the names the tool allows (`@function_tool(env=[...])`, a `BaseTool`'s
`config["sandbox_env"]`). It enters the strongest isolation the kernel allows
(`core_v1/utils/isolation.py`: namespaces, else seccomp, else a Python audit hook), imports the
tool, and serves calls, each in a forked child with its own limits: `cpu_s` of CPU (soft = hard,
locked), `memory_mb` of address space per process, `max_processes`; the parent kills the whole
process tree (new sessions included) past the timeout. A worker whose call hit a limit, died,
timed out or left processes behind is replaced. Only plain data comes back (see the worker). The
first worker of a sandbox logs one line: the mode and what it does not cover.

A function the worker cannot import by file and name (a lambda, a function defined inside another
function, a callable object, a bound method, a function of the script run as `__main__`) is sent
to its workers by value (cloudpickle), as it is when first used (the tool loop's start-up): what
it closes over, changed later in the driver, is not seen there. The worker unpickles it once
isolated and runs it under the same limits. One that cannot be pickled even by value (it closes
over a lock, a socket, an open file) is refused at start-up (`check_function`), never run
unsandboxed. `BaseTool` subclasses without `runs_code` run in the agent-loop worker under the
asyncio timeout.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import pickle
import select
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional
from weakref import WeakKeyDictionary

import cloudpickle

from core_v1.agent_loop.tools._sandbox_worker import loads
from core_v1.agent_loop.tools.errors import ToolConfigError
from core_v1.utils import isolation

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("!I")
_WORKER_SCRIPT = Path(__file__).with_name("_sandbox_worker.py")
_START_TIMEOUT_S = 120.0  # interpreter + the tool's imports, before any limit applies
_ISOLATION_CHOICES = ("auto",) + isolation.MODES
_ENVIRONMENT = ("PATH", "LANG")
FALLBACK_CALL_TIMEOUT_S = 3600.0
"""The wall-clock bound of a call made through a tool's `execute` when its config sets no
`timeout_s`; the tool session's own timeout cancels the call (and kills the worker) sooner."""


@dataclass(frozen=True)
class SandboxLimits:
    """`actor_rollout_ref.rollout.multi_turn.tool_sandbox`, validated."""

    enable: bool = True
    workers: int = 2
    """Worker processes per tool, at most; calls beyond that wait for a free one."""
    memory_mb: int = 1024
    """Address space each process of a call may add (MiB); also the size of its tmpfs temp dir."""
    cpu_s: float = 30.0
    """CPU seconds one call's process may use (each process it starts has the same budget)."""
    network: bool = False
    """Whether tools may use the network."""
    max_processes: int = 64
    """Processes a call may run at once (RLIMIT_NPROC; see `core_v1.utils.isolation` for where the kernel applies it)."""
    isolation: str = "auto"
    """"auto" (the strongest the kernel allows), or one of "namespaces", "seccomp", "audit-hook"."""

    def __post_init__(self) -> None:
        key = "actor_rollout_ref.rollout.multi_turn.tool_sandbox"
        for name in ("workers", "memory_mb", "max_processes"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= 1):
                raise ToolConfigError(f"{key}.{name} must be an int >= 1, got {value!r}")
        if not self.cpu_s > 0:
            raise ToolConfigError(f"{key}.cpu_s must be > 0, got {self.cpu_s!r}")
        if self.isolation not in _ISOLATION_CHOICES:
            raise ToolConfigError(
                f"{key}.isolation must be one of {', '.join(_ISOLATION_CHOICES)}, got {self.isolation!r}"
            )

    @classmethod
    def from_config(cls, section: Any) -> "SandboxLimits":
        return cls(
            enable=bool(section.enable),
            workers=section.workers,
            memory_mb=section.memory_mb,
            cpu_s=float(section.cpu_s),
            network=bool(section.network),
            max_processes=section.max_processes,
            isolation=section.isolation,
        )


class SandboxFailure(Exception):
    """A call that did not return: `status` is "timeout" or "error"; the message is for the model."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class FunctionReference:
    """Where a worker finds a function or class: its module (when importable by name), file and qualified name."""

    module: str
    file: str
    qualname: str

    @classmethod
    def of(cls, obj: Callable[..., Any]) -> Optional["FunctionReference"]:
        """The reference, or None for an object a fresh process cannot look up by name."""
        qualname = getattr(obj, "__qualname__", "")
        try:
            file = inspect.getsourcefile(obj)
        except TypeError:
            return None
        if not file or "<" in qualname or not Path(file).is_file():
            return None
        return cls(getattr(obj, "__module__", "") or "", str(Path(file).resolve()), qualname)


@dataclass(frozen=True)
class WorkerSpec:
    """What one pool's workers load: a function, or a `BaseTool` class with its config and schema."""

    kind: str  # "function" or "tool"
    reference: FunctionReference
    """For a function sent by value: its module and file, loaded first so that what it names there resolves."""
    tool_state: bytes = b""
    env: tuple = ()
    by_value: bytes = b""
    """The function, cloudpickled, when the worker cannot import it by file and name."""

    @classmethod
    def of_function(cls, fn: Callable[..., Any], name: str = "") -> "WorkerSpec":
        """`name`: the tool's, for the message when `fn` cannot be sent (else its qualified name)."""
        reference = FunctionReference.of(fn)
        # By value too: a script's own functions (loading the script by file in the worker would run
        # it again) and bound methods (found by name, the method would lose its object).
        if reference is not None and reference.module != "__main__" and not inspect.ismethod(fn):
            return cls("function", reference, env=_FUNCTION_ENV.get(reference, ()))
        try:
            cached = _BY_VALUE.get(fn)
        except TypeError:  # not weakly referenceable: pickled again each time
            cached = None
        if cached is None:
            cached = cls("function", _home_of(fn), env=_env_of(fn), by_value=_pickled(fn, name))
            try:
                _BY_VALUE[fn] = cached
            except TypeError:
                pass
        return cached

    @classmethod
    def of_tool(cls, tool: Any) -> "WorkerSpec":
        reference = FunctionReference.of(type(tool))
        if reference is None:
            raise ToolConfigError(
                f"{type(tool).__qualname__} declares runs_code but is not defined at module level "
                "of a file, so a sandbox worker cannot import it; move it to module level"
            )
        state = pickle.dumps((tool.config, tool.tool_schema.model_dump()))
        return cls("tool", reference, state, tuple(tool.config.get("sandbox_env") or ()))


_FUNCTION_ENV: dict[FunctionReference, tuple] = {}
_BY_VALUE_ENV: "WeakKeyDictionary[Any, tuple]" = WeakKeyDictionary()
_BY_VALUE: "WeakKeyDictionary[Any, WorkerSpec]" = WeakKeyDictionary()


def pass_environment(fn: Callable[..., Any], names: tuple) -> None:
    """Let the workers of function `fn` see these of the driver's environment variables."""
    reference = FunctionReference.of(fn)
    if reference is not None and reference.module != "__main__" and not inspect.ismethod(fn):
        _FUNCTION_ENV[reference] = tuple(names)
        return
    try:
        _BY_VALUE_ENV[fn] = tuple(names)
    except TypeError:
        pass  # not weakly referenceable: its workers see no extra variable


def check_function(name: str, fn: Callable[..., Any]) -> None:
    """Raise ToolConfigError (one line) when function tool `name` cannot be sent to a sandbox worker."""
    WorkerSpec.of_function(fn, name)  # pickles a function the worker cannot import, caching the result


def _env_of(fn: Callable[..., Any]) -> tuple:
    try:
        return _BY_VALUE_ENV.get(fn, ())
    except TypeError:
        return ()


def _home_of(fn: Callable[..., Any]) -> FunctionReference:
    """The module and file `fn` was defined in (empty when unknown): the worker loads them before
    unpickling, since cloudpickle names that module's functions and classes by reference."""
    module = getattr(fn, "__module__", None) or getattr(type(fn), "__module__", "") or ""
    code = getattr(fn, "__code__", None)
    file = getattr(code, "co_filename", "") or getattr(sys.modules.get(module), "__file__", "") or ""
    file = str(Path(file).resolve()) if file and Path(file).is_file() else ""
    return FunctionReference(module if file else "", file, getattr(fn, "__qualname__", "") or "")


def _pickled(fn: Callable[..., Any], name: str) -> bytes:
    try:
        return cloudpickle.dumps(fn)
    except Exception as error:  # cloudpickle raises TypeError, PicklingError, RecursionError, ...
        described = name or getattr(fn, "__qualname__", None) or repr(fn)
        raise ToolConfigError(
            f"function tool {described!r} cannot be sent to a sandbox worker: cloudpickle cannot copy it "
            f"({error}); let it close over plain values only (no lock, socket or open file), or define it at "
            "module level of an importable file"
        ) from None


class _Worker:
    """One isolated process tree bound to one tool; used by one call at a time."""

    def __init__(self, spec: WorkerSpec, limits: SandboxLimits):
        self.tmp_dir = tempfile.mkdtemp(prefix="rlbridge-sandbox-")
        self.process = subprocess.Popen(
            [sys.executable, str(_WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=self._environment(spec),
            cwd=self.tmp_dir,
            start_new_session=True,
        )
        reference = spec.reference
        self._send(
            {
                "kind": spec.kind,
                "module": reference.module,
                "file": reference.file,
                "qualname": reference.qualname,
                "by_value": spec.by_value,
                "tool_state": spec.tool_state,
                "tmp_dir": self.tmp_dir,
                "memory_mb": limits.memory_mb,
                "cpu_s": limits.cpu_s,
                "max_processes": limits.max_processes,
                "network": limits.network,
                "isolation": limits.isolation,
            }
        )
        answer = self._receive(_START_TIMEOUT_S)
        if answer[0] != "ready":
            self.kill()
            raise SandboxFailure("error", f"could not start: {answer[1]}")
        self.isolation, self.coverage = answer[1], answer[2]

    def _environment(self, spec: WorkerSpec) -> dict:
        env = {name: os.environ[name] for name in _ENVIRONMENT if name in os.environ}
        env.setdefault("LANG", "C.UTF-8")
        env.update(
            HOME=self.tmp_dir,
            TMPDIR=self.tmp_dir,
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        )
        env.update({name: os.environ[name] for name in spec.env if name in os.environ})
        return env

    def call(self, message: dict, timeout_s: float) -> Any:
        """The call's value, or SandboxFailure; kills this worker when the call hit a limit or left processes."""
        self._send(message)
        kind, detail, retire = self._receive(timeout_s)
        if retire:
            self.kill()
        if kind == "ok":
            return detail
        raise SandboxFailure("error", detail)

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the whole tree: in namespaces mode its PID 1 (the kernel ends the rest), otherwise
        every descendant found under the worker, a child subreaper, so none escaped by `setsid`."""
        if self.alive():
            isolation.kill_tree(self.process.pid)
        self.process.wait()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def _send(self, message: Any) -> None:
        payload = pickle.dumps(message)
        try:
            self.process.stdin.write(_HEADER.pack(len(payload)) + payload)
            self.process.stdin.flush()
        except BrokenPipeError:
            raise SandboxFailure("error", self._death()) from None

    def _receive(self, timeout_s: float) -> tuple:
        out = self.process.stdout
        ready, _, _ = select.select([out], [], [], timeout_s)
        if not ready:
            self.kill()
            raise SandboxFailure("timeout", f"did not answer within {timeout_s:g} s and was stopped")
        header = out.read(_HEADER.size)
        if len(header) < _HEADER.size:
            raise SandboxFailure("error", self._death())
        return loads(out.read(_HEADER.unpack(header)[0]))

    def _death(self) -> str:
        code = self.process.wait()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)
        return f"stopped (its worker exited with code {code})"


class ToolSandbox:
    """The worker pools of one process (one per tool), shared by every session."""

    def __init__(self, limits: SandboxLimits):
        self.limits = limits
        self._lock = threading.Lock()
        self._idle: dict[WorkerSpec, list[_Worker]] = {}
        self._slots: dict[WorkerSpec, threading.BoundedSemaphore] = {}
        self._warned: set[str] = set()

    async def call(self, fn: Callable[..., Any], arguments: dict, timeout_s: float) -> Any:
        """`fn(**arguments)` in a worker; raises SandboxFailure when it does not return a value, and
        ToolConfigError when `fn` cannot be sent there (`check_function`)."""
        spec = WorkerSpec.of_function(fn)
        return await self._run(spec, {"kind": "function", "arguments": arguments}, timeout_s)

    async def execute_tool(self, tool: Any, instance_id: str, arguments: dict, kwargs: dict) -> Any:
        """`tool.execute(instance_id, arguments, **kwargs)` in a worker, on a copy of the tool built there
        from its config and schema; raises SandboxFailure when it does not return."""
        timeout_s = float(tool.config.get("timeout_s") or FALLBACK_CALL_TIMEOUT_S)
        message = {"kind": "tool", "instance_id": instance_id, "arguments": arguments, "kwargs": kwargs}
        return await self._run(WorkerSpec.of_tool(tool), message, timeout_s)

    def close(self) -> None:
        with self._lock:
            workers = [w for pool in self._idle.values() for w in pool]
            self._idle.clear()
        for worker in workers:
            worker.kill()

    async def _run(self, spec: WorkerSpec, message: dict, timeout_s: float) -> Any:
        handle = _CallHandle()
        try:
            return await asyncio.to_thread(self._call_blocking, spec, message, timeout_s, handle)
        except asyncio.CancelledError:  # the session's timeout: the call must not run on unseen
            handle.cancel()
            raise

    def _call_blocking(self, spec: WorkerSpec, message: dict, timeout_s: float, handle: "_CallHandle") -> Any:
        with self._slot(spec):
            worker = self._take(spec)
            try:
                handle.attach(worker)
                return worker.call(message, timeout_s)
            finally:
                self._give_back(spec, worker)

    def _slot(self, spec: WorkerSpec) -> threading.BoundedSemaphore:
        with self._lock:
            return self._slots.setdefault(spec, threading.BoundedSemaphore(self.limits.workers))

    def _take(self, spec: WorkerSpec) -> _Worker:
        with self._lock:
            pool = self._idle.setdefault(spec, [])
            worker = pool.pop() if pool else None
        if worker is None:
            worker = _Worker(spec, self.limits)
            self._warn_once("isolation", f"tool sandbox: {worker.coverage}")
        return worker

    def _give_back(self, spec: WorkerSpec, worker: _Worker) -> None:
        if not worker.alive():
            worker.kill()  # reaps it
            return
        with self._lock:
            self._idle[spec].append(worker)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message)


class _CallHandle:
    """The worker of one call in flight, so that a cancelled call kills it. A call cancelled while
    its worker was still starting never runs; the worker, unused, joins the pool for the next call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._worker: Optional[_Worker] = None
        self._cancelled = False

    def attach(self, worker: _Worker) -> None:
        with self._lock:
            if self._cancelled:
                raise SandboxFailure("timeout", "was cancelled before it started")
            self._worker = worker

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            if self._worker is not None:
                self._worker.kill()


_SANDBOXES: dict[SandboxLimits, ToolSandbox] = {}
_SANDBOXES_LOCK = threading.Lock()
_CONFIGURED: list[Optional[SandboxLimits]] = []


def sandbox_for(limits: SandboxLimits) -> Optional[ToolSandbox]:
    """This process's sandbox for `limits` (one pool set serves every loop), or None when disabled.
    The latest limits asked for are also those of `BaseTool`s that run code (`active_sandbox`)."""
    with _SANDBOXES_LOCK:
        _CONFIGURED[:] = [limits]
        if not limits.enable:
            return None
        if limits not in _SANDBOXES:
            _SANDBOXES[limits] = ToolSandbox(limits)
        return _SANDBOXES[limits]


def check_isolation(limits: SandboxLimits) -> None:
    """When the run names an isolation mode (not "auto"), start one worker in it before anything
    else starts: a mode this machine refuses is one `ToolConfigError` line, not an error in every
    tool call of the run."""
    if not limits.enable or limits.isolation == "auto":
        return
    # The worker loads the isolation module before anything else, so a function of it costs no import.
    reference = FunctionReference.of(isolation.isolated)
    assert reference is not None  # a module-level function
    try:
        worker = _Worker(WorkerSpec("function", reference), limits)
    except SandboxFailure as failure:
        raise ToolConfigError(
            f"actor_rollout_ref.rollout.multi_turn.tool_sandbox.isolation={limits.isolation!r}: the "
            f"sandbox {failure}; set it to auto (the strongest mode this machine allows) or to a "
            f"mode the kernel allows here"
        ) from None
    worker.kill()


def active_sandbox() -> Optional[ToolSandbox]:
    """The sandbox of the run's configured limits (the defaults when none were configured), None when
    the run disabled it or when this process is itself isolated already (a sandbox worker)."""
    if isolation.isolated():
        return None
    return sandbox_for(_CONFIGURED[0] if _CONFIGURED else SandboxLimits())
