"""The worker process of `core_v1.agent_loop.tools.sandbox` (see there): one tool, many calls.

Protocol on stdin/stdout: length-prefixed pickles. First the setup message (what to load, the
limits, the temp dir, the isolation mode asked for), answered with ("ready", mode, coverage line)
or ("failed", reason); then one message per call, answered with (kind, detail, retire): kind
"ok" (detail: the value), "error" (a text for the model) or "limit" (the call hit a limit or
died); `retire` says this worker must be replaced (after a limit, or when the call left
processes behind, which take a while to free their PIDs). The tool's own prints go to stderr, so they cannot corrupt the
protocol. Values cross it as plain data only (`plain`: containers, numbers, strings, bytes,
`ToolResponse`; anything else as its `str`), and every reader refuses any other class (`loads`):
unpickling what sandboxed code wrote must not run code in the reader.

The worker enters its isolation (`core_v1.utils.isolation.enter`), imports the tool (or, for a function
sent by value, loads the module it was defined in and unpickles it with cloudpickle: the setup
message comes from the driver, which is trusted), then serves each call in
a child forked for it: the child sets the call's limits (CPU soft = hard, address space, process
count), locks them, runs the call and sends its pickled answer over a pipe. Afterwards the worker
kills whatever the call left running and empties the temp dir, so no call sees another's debris.

Run as a script (`python .../_sandbox_worker.py`), not with `-m`: `-m` would import the
`core_v1.agent_loop.tools` package first, and with it torch, whose threads make the kernel refuse
`unshare` of a user namespace. So this file imports the standard library only until the
isolation is in place; `core_v1/utils/isolation.py` is loaded by path and registered under its
module name, so later imports of it (the sandbox's, `BaseTool`'s) share its state.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import io
import os
import pickle
import select
import signal
import struct
import sys
from typing import Any, BinaryIO

_HEADER = struct.Struct("!I")
_ISOLATION_MODULE = "core_v1.utils.isolation"
_ISOLATION_FILE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "utils", "isolation.py"
)


def _load_isolation() -> Any:
    if _ISOLATION_MODULE in sys.modules:
        return sys.modules[_ISOLATION_MODULE]
    spec = importlib.util.spec_from_file_location(_ISOLATION_MODULE, _ISOLATION_FILE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_ISOLATION_MODULE] = module
    spec.loader.exec_module(module)
    return module


isolation = _load_isolation()


def main() -> None:
    setup = pickle.loads(_read_exact(0, _HEADER.unpack(_read_exact(0, _HEADER.size))[0]))
    try:
        mode = isolation.enter(
            setup["isolation"], network=setup["network"], tmp_dir=setup["tmp_dir"], tmp_mb=setup["memory_mb"]
        )
    except (OSError, ValueError) as refusal:
        _write_fd(1, ("failed", f"isolation {setup['isolation']!r} is not available here: {refusal}"))
        return
    protocol_in = os.fdopen(os.dup(0), "rb")
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a tool's print() lands on stderr
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.chdir(setup["tmp_dir"])
    try:
        target = _load_target(setup)
    except Exception as error:
        _write(protocol_out, ("failed", f"{type(error).__name__}: {error}"))
        return
    _write(protocol_out, ("ready", mode, isolation.coverage(mode, setup["network"])))
    while True:
        try:
            message = _read(protocol_in)
        except EOFError:
            return
        _write(protocol_out, _serve(target, message, setup, (protocol_in, protocol_out)))


def _load_target(setup: dict) -> Any:
    """The function, or for a `BaseTool` subclass a tool object built from its config and schema."""
    if setup["by_value"]:
        return _unpickled_function(setup)
    found = _load(setup["module"], setup["file"], setup["qualname"])
    if setup["kind"] == "function":
        return found
    config, schema = pickle.loads(setup["tool_state"])
    return found(config=config, tool_schema=schema)


def _unpickled_function(setup: dict) -> Any:
    """A function sent by value. cloudpickle names the module-level functions and classes it uses
    by module name; when that name does not import here (a file loaded by path, a test module), its
    module is loaded by file under that name and the function unpickled again. Not beforehand: a
    closure that names nothing of its module need not pay for that module's imports."""
    import cloudpickle  # after isolation: its imports must not start threads before `unshare`

    try:
        return cloudpickle.loads(setup["by_value"])
    except ImportError:
        module, file = setup["module"], setup["file"]
        if not module or module == "__main__" or module in sys.modules or not os.path.isfile(file):
            raise
    sys.modules[module] = _import_by_name(module, file) or _import_by_path(file)
    return cloudpickle.loads(setup["by_value"])


def _serve(target: Any, message: dict, setup: dict, protocol: tuple) -> tuple:
    """One call in a child of its own: (kind, detail, retire)."""
    readable, writable = os.pipe()
    try:
        child = os.fork()
    except OSError as error:
        return "limit", f"could not start: {error}", True
    if child == 0:
        try:
            for descriptor in (readable, *(stream.fileno() for stream in protocol)):
                os.close(descriptor)  # the call talks to this worker only, never to the driver
            _write_fd(writable, _in_call_child(target, message, setup))
        finally:
            os._exit(0)  # never back into the worker's loop
    os.close(writable)
    answer, status, usage = _collect(child, readable)
    os.close(readable)
    left_behind = isolation.kill_others()
    isolation.empty_dir(setup["tmp_dir"])
    kind, detail = answer if answer is not None else ("limit", _death(status, usage, setup["cpu_s"]))
    return kind, detail, kind == "limit" or left_behind


def _in_call_child(target: Any, message: dict, setup: dict) -> tuple:
    try:
        isolation.limit_call(cpu_s=setup["cpu_s"], memory_mb=setup["memory_mb"], max_processes=setup["max_processes"])
        return "ok", plain(_run(target, message))
    except MemoryError:
        return "limit", f"ran out of its memory limit ({setup['memory_mb']} MiB)"
    except BaseException as error:  # the tool's own failure is the model's to read
        return "error", f"failed: {error or type(error).__name__}"


def _run(target: Any, message: dict) -> Any:
    if message["kind"] == "function":
        value = target(**message["arguments"])
    else:  # isolated already, so the tool's sandboxed `execute` runs its own code here
        value = target.execute(message["instance_id"], message["arguments"], **message["kwargs"])
    return asyncio.run(value) if inspect.iscoroutine(value) else value


def _collect(child: int, readable: int) -> tuple:
    """(answer or None, wait status, rusage): reads while the child runs, so a large answer cannot
    block it, and stops at the child's exit rather than at EOF (its own children may hold the pipe)."""
    received = b""
    while True:
        ready, _, _ = select.select([readable], [], [], 0.05)
        if ready:
            chunk = os.read(readable, 1 << 20)
            received += chunk
            answer = _complete(received)
            if answer is not None:
                _, status, usage = os.wait4(child, 0)
                return answer, status, usage
        pid, status, usage = os.wait4(child, os.WNOHANG)
        if pid == child:
            while select.select([readable], [], [], 0)[0]:
                chunk = os.read(readable, 1 << 20)
                if not chunk:
                    break
                received += chunk
            return _complete(received), status, usage


def _complete(received: bytes) -> Any:
    if len(received) < _HEADER.size:
        return None
    length = _HEADER.unpack(received[: _HEADER.size])[0]
    body = received[_HEADER.size :]
    if len(body) < length:
        return None
    try:
        return loads(body[:length])
    except Exception as error:  # a call that forges its answer has hit a limit of its own making
        return "limit", f"answered with something other than plain data ({error})"


def _death(status: int, usage: Any, cpu_s: float) -> str:
    used = usage.ru_utime + usage.ru_stime
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        # rusage samples CPU time by ticks, the limit counts it exactly: 0.95 s is seen for a 1 s limit
        if sig in (signal.SIGKILL, signal.SIGXCPU) and used >= 0.8 * isolation.whole_seconds(cpu_s):
            return f"used more CPU time than its limit ({cpu_s:g} s) and was stopped"
        return f"was killed by signal {signal.Signals(sig).name}"
    return f"exited with code {os.WEXITSTATUS(status)} without answering"


def _load(module_name: str, file: str, qualname: str) -> Any:
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


def _read_exact(fd: int, size: int) -> bytes:
    """Unbuffered, so nothing meant for the payload process is read ahead before isolation forks."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _read(stream: BinaryIO) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    return pickle.loads(stream.read(_HEADER.unpack(header)[0]))  # from the driver: trusted


_ALLOWED_CLASSES = {("core_v1.agent_loop.tools.schemas", "ToolResponse")}


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_CLASSES:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"a sandboxed process sent {module}.{name}; only plain data may cross")


def loads(data: bytes) -> Any:
    """What a sandboxed process sent, refusing every class but `ToolResponse`."""
    return _PlainUnpickler(io.BytesIO(data)).load()


def plain(value: Any) -> Any:
    """`value` as plain data (`isolation.plain`), a `ToolResponse` rebuilt from its plain parts."""
    return isolation.plain(value, _rebuilt_tool_response)


def _rebuilt_tool_response(value: Any) -> Any:
    kind = type(value)
    if (kind.__module__, kind.__name__) not in _ALLOWED_CLASSES:
        return None
    return kind(
        text=None if value.text is None else str(value.text),
        image=None if value.image is None else [f"<{type(value.image).__name__}>"],
        video=None if value.video is None else [f"<{type(value.video).__name__}>"],
    )


def _write(stream: BinaryIO, message: Any) -> None:
    payload = pickle.dumps(message)
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def _write_fd(fd: int, message: Any) -> None:
    payload = pickle.dumps(message)
    data = _HEADER.pack(len(payload)) + payload
    while data:
        data = data[os.write(fd, data) :]


if __name__ == "__main__":
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]  # this folder's modules must not shadow top-level ones
    main()
