"""Tools that try to escape the sandbox, one per escape of issue 28's table (module level: the
sandbox's workers import them by name). Each returns what it managed; the tests judge."""

from __future__ import annotations

import ctypes
import os
import resource
import socket
import struct
import subprocess
import sys
import tempfile
import time

BOMB_CEILING = 400  # a bomb the sandbox does not cap stops here, so the test cannot take the machine down
CHUNK = 320 * 1024 * 1024  # above the tests' 256 MiB limit: refused at once, nothing touched


def tcp_from_child(port: int) -> int:
    code = "import socket; s = socket.create_connection(('127.0.0.1', %d), timeout=2); s.sendall(b'leak')" % port
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode


def udp_sendmsg(port: int) -> str:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.sendmsg([b"leak"], [], 0, ("127.0.0.1", port))
    return "sent"


def unix_socket(path: str) -> str:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as unix:
        unix.connect(path)
        unix.sendall(b"leak")
    return "sent"


def read_environment(name: str, secret: str) -> dict:
    """The variable as this process sees it, and every /proc/*/environ that holds the secret."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                if secret.encode() in environ.read():
                    found.append(pid)
        except OSError:
            pass
    return {"os.environ": os.environ.get(name), "proc": found}


def raise_cpu_limit_then_spin() -> str:
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass
    end = time.process_time() + 4.0
    while time.process_time() < end:
        pass
    return "spun 4 s of CPU"


def fork_bomb() -> dict:
    """Every process forks until a fork fails or BOMB_CEILING processes exist; returns how many
    there were (one byte appended per process: appends are atomic, shared counters are not)."""
    tally, failures = (os.path.join(tempfile.gettempdir(), name) for name in ("tally", "failures"))
    open(tally, "wb").close()
    if os.fork() == 0:
        _bomb(tally, failures)
    deadline = time.monotonic() + 25.0  # far beyond what even a loaded machine needs to reach the cap
    while time.monotonic() < deadline and not os.path.exists(failures) and os.path.getsize(tally) < BOMB_CEILING:
        time.sleep(0.05)
    time.sleep(0.2)
    return {"processes": os.path.getsize(tally), "fork_failed": os.path.exists(failures)}


def _bomb(tally: str, failures: str) -> None:
    """Fork two children (each of which does the same), then sleep: a tree that grows until a fork
    fails, light on a shared machine (no process spins)."""
    _append(tally)
    for _ in range(2):
        if os.path.exists(failures) or os.path.getsize(tally) >= BOMB_CEILING:
            break
        try:
            child = os.fork()
        except OSError:
            _append(failures)
            break
        if child == 0:
            _bomb(tally, failures)
    time.sleep(60)
    os._exit(0)


def _append(path: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(descriptor, b"x")
    os.close(descriptor)


def orphan_in_new_session(tag: str) -> str:
    """A grandchild in a new session whose parent exits (a daemon), then hang past the timeout."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(30)", tag])
        os._exit(0)
    while True:
        time.sleep(1)


def allocate_across_processes(processes: int = 8, gib_each: float = 1.25) -> int:
    """How many of `processes` children got `gib_each` GiB each (touched, 320 MiB at a time)."""
    children = []
    for _ in range(processes):
        child = os.fork()
        if child == 0:
            hoard = []
            try:
                for _ in range(int(gib_each * 1024**3) // CHUNK):
                    hoard.append(bytearray(CHUNK))
            except MemoryError:
                os._exit(1)
            os._exit(0)
        children.append(child)
    return sum(os.waitpid(child, 0)[1] == 0 for child in children)


def write_outside(path: str) -> str:
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
    except OSError as error:
        return f"refused: {error}"
    return "written"


def ctypes_connect(port: int) -> str:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    if fd < 0:
        return f"socket refused: {os.strerror(ctypes.get_errno())}"
    address = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(port), socket.inet_aton("127.0.0.1"))
    if libc.connect(fd, address, len(address)) != 0:
        return f"connect refused: {os.strerror(ctypes.get_errno())}"
    os.write(fd, b"leak")
    return "connected"
