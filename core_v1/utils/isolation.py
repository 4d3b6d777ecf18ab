"""Process isolation for code we did not write: the tool sandbox's workers and the local code scorer.

Standard library only: the tool sandbox's worker (`core_v1/agent_loop/tools/_sandbox_worker.py`)
and the code scorer's runner (`core_v1/reward/scorers/_code_runner.py`, under `python -I`) load
this file by path before anything else, since a process with threads cannot enter a user
namespace. Three modes, strongest first; `enter("auto", ...)` takes the first the kernel allows.

- **namespaces**: new user, network, mount and PID namespaces. The caller's process stays outside
  and waits; a first child is PID 1 of the new PID namespace (when it exits, the kernel kills every
  process left in it, new sessions included) and mounts a fresh /proc, caps the namespace's PIDs
  (`kernel.pid_max`, per PID namespace since Linux 6.14; the kernel's floor is 301), makes every
  mount read-only, and mounts a private tmpfs on the temp dir and on /dev/shm. A second child
  runs the payload under the seccomp filter below. The network namespace has only a loopback that
  is down; the filter refuses `socket()` itself, so Unix sockets on the filesystem are out of
  reach too.
- **seccomp**: no namespaces (the kernel or a container refused them, or the run chose this mode:
  `tool_sandbox.isolation`). The seccomp filter alone; the process becomes a child subreaper, so a
  descendant that starts a new session stays in its tree and `kill_tree` finds it.
- **audit-hook**: no seccomp either (refused, or chosen). A Python audit hook refuses socket
  creation and raising a limit; native code (ctypes, a subprocess) bypasses it.

The seccomp filter (every mode that has one; inherited by every child, across exec) refuses
`socket()` of every family unless the network is allowed, io_uring (which can open sockets
itself), ptrace and cross-process memory access, and every mount, namespace and root change (so
the read-only mounts stay read-only). `limit_call` adds a second filter that refuses any change of
a resource limit, so a CPU or memory limit set as soft = hard cannot be raised even by root.

Not covered, as no cgroup is used (not built: the machine this was written on has its memory
controller on cgroup v1, so cgroup v2 limits could not be exercised): memory is limited per process
(`RLIMIT_AS`), so a tree of N processes may use N times the limit; the process count is capped by
the PID namespace's `pid_max` (namespaces mode) or by `RLIMIT_NPROC`, which the kernel does not
apply to root (seccomp and audit-hook modes run by root have no process cap, only the wall-clock
kill of the whole tree).
"""

from __future__ import annotations

import ctypes
import errno
import math
import os
import platform
import resource
import shutil
import signal
import struct
import sys
import time
from typing import Any, Callable, Optional

MODES = ("namespaces", "seccomp", "audit-hook")

_CLONE_NEWNS, _CLONE_NEWUSER, _CLONE_NEWPID, _CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
_AT_FDCWD, _AT_RECURSIVE, _MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
_PR_SET_PDEATHSIG, _PR_SET_SECCOMP, _PR_SET_CHILD_SUBREAPER, _PR_SET_NO_NEW_PRIVS = 1, 22, 36, 38
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_LD_ABS, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06
_PID_MAX_FLOOR = 301  # the kernel refuses a smaller kernel.pid_max

# (audit arch, syscall numbers) per machine; the new mount API numbers are the same on both.
_ARCHES = {
    "x86_64": (
        0xC000003E,
        {
            "socket": 41,
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "mount": 165,
            "umount2": 166,
            "pivot_root": 155,
            "chroot": 161,
            "unshare": 272,
            "setns": 308,
            "setrlimit": 160,
            "prlimit64": 302,
        },
    ),
    "aarch64": (
        0xC00000B7,
        {
            "socket": 198,
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "mount": 40,
            "umount2": 39,
            "pivot_root": 41,
            "chroot": 51,
            "unshare": 97,
            "setns": 268,
            "setrlimit": 164,
            "prlimit64": 261,
        },
    ),
}
_COMMON = {
    "io_uring_setup": 425,
    "io_uring_enter": 426,
    "io_uring_register": 427,
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "fspick": 433,
    "mount_setattr": 442,
}
_LOCKED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "unshare",
    "setns",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
)

_libc = ctypes.CDLL(None, use_errno=True)
_entered = {"mode": None, "pid_namespace": False, "pid_cap": False, "limits_locked": False}


class IsolationUnavailable(OSError):
    """The requested mode cannot be entered on this kernel (the message says which step failed)."""


def plain(value: Any, rebuild: Optional[Callable[[Any], Any]] = None, depth: int = 0) -> Any:
    """`value` as plain data, so the process outside can unpickle what isolated code returned without
    running any of it: exact built-in types kept (a subclass could pickle as anything), containers
    walked, a value `rebuild` knows as what it returns (when not None), numpy-style scalars as their
    `.item()`, anything else as its `str`."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str, bytes):
        return value
    if depth > 100:
        return str(value)
    if kind in (list, tuple, set, frozenset):
        return kind(plain(item, rebuild, depth + 1) for item in value)
    if kind is dict:
        return {plain(key, rebuild, depth + 1): plain(item, rebuild, depth + 1) for key, item in value.items()}
    rebuilt = rebuild(value) if rebuild is not None else None
    if rebuilt is not None:
        return rebuilt
    item = getattr(value, "item", None)
    if callable(item):
        try:
            scalar = item()
        except Exception:
            scalar = None
        if type(scalar) in (bool, int, float):
            return scalar
    return str(value)


def coverage(mode: str, network: bool) -> str:
    """What `mode` does and what it leaves uncovered, in one line (for the start-up message)."""
    if mode == "namespaces":
        does = (
            "network allowed (network=true)"
            if network
            else "no network (network namespace, socket() refused by seccomp)"
        )
        cap = (
            "capped by the PID namespace's pid_max (at least 300)"
            if _entered["pid_cap"]
            else "capped by RLIMIT_NPROC for non-root users only (this kernel has no per-namespace pid_max)"
        )
        return (
            f"isolation 'namespaces': {does}; user/mount/PID namespaces, read-only filesystem but a private "
            "tmpfs temp dir, the whole process tree killed at the timeout, limits locked by seccomp; not "
            f"covered: memory is per process (RLIMIT_AS; no cgroups), the process count is {cap}"
        )
    if mode == "seccomp":
        does = "network allowed (network=true)" if network else "no network (socket() refused by seccomp)"
        return (
            f"isolation 'seccomp' (without namespaces): {does}; the process tree tracked and killed "
            "at the timeout, limits locked by seccomp; not covered: the filesystem outside the temp dir is "
            "writable as far as the user's permissions go, /proc shows the user's other processes (and the "
            "environment they were started with), memory is per process (RLIMIT_AS), the process count is "
            "capped by RLIMIT_NPROC only for non-root users"
        )
    does = "network allowed (network=true)" if network else "sockets refused by a Python audit hook"
    return (
        f"isolation 'audit-hook' (without namespaces or seccomp): {does}; native code (ctypes, "
        "a subprocess) bypasses it, and may raise its limits; not covered: the filesystem, /proc, memory "
        "beyond each process, the process count for root"
    )


def enter(requested: str, *, network: bool, tmp_dir: str, tmp_mb: int) -> str:
    """Move the calling process into the strongest mode allowed (`requested="auto"`) or into
    `requested`; returns the mode entered. In namespaces mode this returns in a grandchild: the
    caller's own process waits for it and exits with its status, never returning."""
    order = MODES if requested == "auto" else (requested,)
    if requested != "auto" and requested not in MODES:
        raise ValueError(f"unknown isolation mode {requested!r}; known: auto, {', '.join(MODES)}")
    failures = []
    for mode in order:
        try:
            _ENTER[mode](network=network, tmp_dir=tmp_dir, tmp_mb=tmp_mb)
        except IsolationUnavailable as refusal:
            failures.append(f"{mode}: {refusal}")
            continue
        _entered["mode"] = mode
        return mode
    raise IsolationUnavailable("; ".join(failures))


def _enter_namespaces(*, network: bool, tmp_dir: str, tmp_mb: int) -> None:
    _seccomp_program([])  # fail here, before any fork, when seccomp is missing
    uid, gid = os.getuid(), os.getgid()
    flags = _CLONE_NEWUSER | _CLONE_NEWNS | _CLONE_NEWPID | (0 if network else _CLONE_NEWNET)
    if _libc.unshare(flags) != 0:
        raise IsolationUnavailable(f"unshare: {os.strerror(ctypes.get_errno())}")
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")
    _become_child_or_wait()  # now PID 1 of the new namespace
    _mount_private_root(tmp_dir, tmp_mb)
    _become_child_or_wait()  # the payload must not be PID 1: signals and orphans work normally
    _entered["pid_namespace"] = True
    install_filter(_base_rules(network))


def _enter_seccomp(*, network: bool, tmp_dir: str, tmp_mb: int) -> None:
    install_filter(_base_rules(network))
    _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _enter_audit_hook(*, network: bool, tmp_dir: str, tmp_mb: int) -> None:
    if hasattr(_libc, "prctl"):  # Linux; elsewhere the tree is found through its process group only
        _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sys.addaudithook(_refuse_network if not network else _refuse_limit_changes)


_ENTER = {"namespaces": _enter_namespaces, "seccomp": _enter_seccomp, "audit-hook": _enter_audit_hook}


def _become_child_or_wait() -> None:
    """Fork; the parent waits for the child and leaves with its status, the child returns. The
    child dies with its parent, so killing the outermost process takes the namespace down."""
    parent = os.getpid()
    child = os.fork()
    if child == 0:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() not in (parent, 0):  # 0: the parent is outside our new PID namespace
            os._exit(1)  # the parent died before the death signal was armed
        return
    os.close(0)
    os.close(1)  # the protocol belongs to the payload; EOF must follow its death
    while True:  # as PID 1 it also inherits every orphan of the namespace: reap them, or pids run out
        pid, status = os.wait()
        if pid == child:
            break
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _mount_private_root(tmp_dir: str, tmp_mb: int) -> None:
    _mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)  # hides the driver's processes
    try:
        _write("/proc/sys/kernel/pid_max", str(_PID_MAX_FLOOR))
        _entered["pid_cap"] = True
    except IsolationUnavailable:
        pass  # pid_max is per PID namespace from Linux 6.14 on; RLIMIT_NPROC is left
    attr = struct.pack("QQQQ", _MOUNT_ATTR_RDONLY, 0, 0, 0)
    if _libc.syscall(_COMMON["mount_setattr"], _AT_FDCWD, b"/", _AT_RECURSIVE, attr, len(attr)) != 0:
        raise IsolationUnavailable(f"mount_setattr read-only: {os.strerror(ctypes.get_errno())}")
    options = f"size={tmp_mb}m,mode=700"
    _mount("tmpfs", tmp_dir, "tmpfs", _MS_NOSUID | _MS_NODEV, options)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={tmp_mb}m,mode=1777")


def _mount(source, target, fstype, flags, options) -> None:
    if _libc.mount(_bytes(source), _bytes(target), _bytes(fstype), flags, _bytes(options)) != 0:
        raise IsolationUnavailable(f"mount {target}: {os.strerror(ctypes.get_errno())}")


def _bytes(value):
    return value.encode() if isinstance(value, str) else value


def _write(path: str, text: str) -> None:
    try:
        with open(path, "w") as handle:
            handle.write(text)
    except OSError as error:
        raise IsolationUnavailable(f"{path}: {error.strerror}") from None


# --- seccomp ----------------------------------------------------------------------------------


def _base_rules(network: bool) -> list:
    rules = [(name, errno.EPERM) for name in _LOCKED]
    return rules if network else [("socket", errno.EACCES)] + rules


def install_filter(rules: list, *, lock_limits: bool = False) -> None:
    """Refuse each `(syscall name, errno)` of `rules` (and, with `lock_limits`, every change of a
    resource limit) in this process and all its future children."""
    program = _seccomp_program(rules, lock_limits)
    if _libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise IsolationUnavailable(f"no_new_privs: {os.strerror(ctypes.get_errno())}")
    blob = ctypes.create_string_buffer(program)
    fprog = struct.pack("HxxxxxxP", len(program) // 8, ctypes.addressof(blob))
    if _libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0) != 0:
        raise IsolationUnavailable(f"seccomp: {os.strerror(ctypes.get_errno())}")


def _seccomp_program(rules: list, lock_limits: bool = False) -> bytes:
    machine = platform.machine()
    if machine not in _ARCHES or not sys.platform.startswith("linux"):
        raise IsolationUnavailable(f"no seccomp filter for {sys.platform}/{machine}")
    arch, numbers = _ARCHES[machine]
    numbers = {**numbers, **_COMMON}
    deny_eperm = _RET_ERRNO | errno.EPERM
    code = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _RET_KILL_PROCESS), (_LD_ABS, 0, 0, 0)]
    if machine == "x86_64":  # x32 syscall numbers would bypass the table
        code += [(_JGE, 0, 1, 0x40000000), (_RET, 0, 0, deny_eperm)]
    for name, error in rules:
        code += [(_JEQ, 0, 1, numbers[name]), (_RET, 0, 0, _RET_ERRNO | error)]
    if lock_limits:
        new_limit = 16 + 8 * 2  # seccomp_data.args[2] of prlimit64: the new limit, NULL for a read
        code += [
            (_JEQ, 0, 1, numbers["setrlimit"]),
            (_RET, 0, 0, deny_eperm),
            (_JEQ, 0, 5, numbers["prlimit64"]),
            (_LD_ABS, 0, 0, new_limit),
            (_JEQ, 0, 2, 0),
            (_LD_ABS, 0, 0, new_limit + 4),
            (_JEQ, 1, 0, 0),
            (_RET, 0, 0, deny_eperm),
        ]
    code.append((_RET, 0, 0, _RET_ALLOW))
    return b"".join(struct.pack("HBBI", *instruction) for instruction in code)


# --- per-call limits ----------------------------------------------------------------------------


def limit_call(*, cpu_s: float, memory_mb: int, max_processes: int) -> None:
    """This process's limits for one call, soft = hard, and locked (seccomp, or the audit hook)."""
    cpu = whole_seconds(cpu_s)
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
    address_space = _in_use_bytes() + memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
    processes = max_processes + (0 if _entered["pid_namespace"] else _processes_of_this_user())
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    if _entered["mode"] in ("namespaces", "seccomp"):
        install_filter([], lock_limits=True)
    else:
        _entered["limits_locked"] = True


def whole_seconds(cpu_s: float) -> int:
    """RLIMIT_CPU counts whole seconds: the budget rounded up."""
    return max(1, math.ceil(cpu_s))


def isolated() -> bool:
    """Whether this process has entered a mode (code it runs needs no further sandbox)."""
    return _entered["mode"] is not None


def _in_use_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _processes_of_this_user() -> int:
    """RLIMIT_NPROC outside a user namespace counts every process of the user, not only ours."""
    uid = os.getuid()
    return sum(1 for pid in _pids() if _owner(pid) == uid)


def _owner(pid: int):
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _refuse_network(event: str, args: tuple) -> None:
    if event in (
        "socket.__new__",
        "socket.connect",
        "socket.bind",
        "socket.sendto",
        "socket.sendmsg",
        "socket.getaddrinfo",
        "socket.gethostbyname",
    ):
        raise OSError(errno.EACCES, "network access is disabled in the sandbox")
    _refuse_limit_changes(event, args)


def _refuse_limit_changes(event: str, args: tuple) -> None:
    changes = event == "resource.setrlimit" or (event == "resource.prlimit" and args[2] is not None)
    if changes and _entered["limits_locked"]:
        raise PermissionError(errno.EPERM, "resource limits are locked in the sandbox")


# --- process trees ------------------------------------------------------------------------------


def kill_others() -> bool:
    """Kill every process this one started (a call's leftovers: daemons, new sessions); returns
    whether there were any."""
    if _entered["pid_namespace"] and os.getpid() == 2 and os.getppid() == 1:  # never kill(-1) on a host
        others = [pid for pid in _pids() if pid not in (1, 2) and _parent_and_state(pid)[1] not in (None, "Z")]
        if others:
            _signal(-1, signal.SIGKILL)  # in our own PID namespace: everything but PID 1 and ourselves
    else:
        others = descendants(os.getpid())
        kill_tree(os.getpid(), include_root=False)
    _reap()
    return bool(others)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.01)  # a killed child not yet reaped by the kernel


def kill_tree(root: int, include_root: bool = True) -> None:
    """SIGKILL `root` and every live descendant, children before parents' last chance to fork:
    scan, kill, rescan until none is left (a process forked between two scans is in the next)."""
    for _ in range(1000):
        live = descendants(root)
        if not live:
            break
        for pid in live:
            _signal(pid, signal.SIGKILL)
    if include_root:
        _signal(root, signal.SIGKILL)
        try:
            os.killpg(root, signal.SIGKILL)  # roots are started in a session of their own
        except (ProcessLookupError, PermissionError):
            pass


def descendants(root: int) -> list:
    """Live (not zombie) descendants of `root`, from /proc."""
    children: dict = {}
    for pid in _pids():
        parent, state = _parent_and_state(pid)
        if parent is not None and state != "Z":
            children.setdefault(parent, []).append(pid)
    found, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def _pids() -> list:
    if not os.path.isdir("/proc"):
        return []
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _parent_and_state(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None, None
    return int(fields[1]), fields[0]


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def empty_dir(path: str) -> None:
    """Remove what a call left in the temp dir, keeping the dir (a mount point in namespaces mode)."""
    for name in os.listdir(path):
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.unlink(target)
            except OSError:
                pass
