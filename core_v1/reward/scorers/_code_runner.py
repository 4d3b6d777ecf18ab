"""The child process of `core_v1.reward.scorers.prime_code` (see there): one program, its test cases.

Run as a script (`python -I _code_runner.py`: standard library only, so it starts in tens of
milliseconds). It reads one JSON request on stdin, `{"code", "cases": [{"index", "input"}],
"fn_name", "timeout_s", "memory_mb", "keep_going", "tmp_dir", "isolation"}`, then

1. enters the strongest isolation the kernel allows (`core_v1/utils/isolation.py`, loaded by path,
   as the tool sandbox does: no network, the filesystem read-only but for `tmp_dir`, a process
   tree the parent can kill whole), and sets its limits once, locked: CPU time (soft = hard) for
   all its cases together, address space at what it uses plus `memory_mb`, a process count;
2. turns off what verl's `reliability_guard` turns off (process, file-system and kill calls);
3. says `{"ready": true, "isolation": mode, "coverage": line}`, then runs the cases in order, each
   under `signal.alarm(timeout_s)`, and writes one JSON line per case to its original stdout (the
   program's own prints are captured or land in /dev/null): `{"index", "output", "shown"}` (the
   program's stdout, or the called function's value as a base64 pickle of plain data, and its
   display) or `{"index", "result", "metadata"}` with verl's -1 (runtime error or time limit) or
   -2 (does not compile, or `fn_name` is not found).

The expected outputs never enter this process: the parent compares (`stdout_matches`,
`call_matches`). The program runs in this process, so it could read anything here and write
anything to the answer stream; what it could forge is only its own output.

Without `keep_going` it stops at the first case that fails to run; the parent stops it at the first
wrong answer, as verl's `run_test` stops.
Comparison rules are verl's `prime_code.testing_util.run_test` ones that can pass (`stdout_matches`,
`call_matches`).
"""

from __future__ import annotations

import base64
import builtins
import io
import json
import math
import os
import pickle
import signal
import sys
import traceback
from pathlib import Path
from typing import Any, Optional

# verl's prelude: the program may use these names without importing them.
PRELUDE = "\n".join(
    [
        f"from {m} import *"
        for m in (
            "string",
            "re",
            "datetime",
            "collections",
            "heapq",
            "bisect",
            "copy",
            "math",
            "random",
            "statistics",
            "itertools",
            "functools",
            "operator",
            "io",
            "sys",
            "json",
            "builtins",
            "typing",
        )
    ]
    + [
        f"import {m}"
        for m in (
            "string",
            "re",
            "datetime",
            "collections",
            "heapq",
            "bisect",
            "copy",
            "math",
            "random",
            "statistics",
            "itertools",
            "functools",
            "operator",
            "io",
            "sys",
            "json",
        )
    ]
    + ["sys.setrecursionlimit(6*10**5)", ""]
)


MAX_PROCESSES = 16  # the program may not fork (the guard), but a child of native code counts here


class CaseTimeout(Exception):
    pass


def main() -> None:
    request = json.loads(sys.stdin.read())
    try:
        isolation = _load_isolation()
        mode = isolation.enter(
            request["isolation"], network=False, tmp_dir=request["tmp_dir"], tmp_mb=request["memory_mb"]
        )
    except (OSError, ValueError) as refusal:
        reason = f"isolation {request['isolation']!r} is not available here: {refusal}"
        print(json.dumps({"ready": False, "error": reason}), flush=True)
        return
    answers = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.chdir(request["tmp_dir"])
    whole_run_s = request["timeout_s"] * (len(request["cases"]) + 1) + 1  # +1 case: compiling, calling fn_name
    isolation.limit_call(cpu_s=whole_run_s, memory_mb=request["memory_mb"], max_processes=MAX_PROCESSES)
    _reliability_guard()
    answers.write(json.dumps({"ready": True, "isolation": mode, "coverage": isolation.coverage(mode, False)}) + "\n")
    answers.flush()  # the cases' clocks start now
    signal.signal(signal.SIGALRM, _on_alarm)
    sys.setrecursionlimit(6 * 10**5)
    target, failure = None, None
    try:
        program = compile(PRELUDE + request["code"], "<solution>", "exec")
    except BaseException as error:  # SyntaxError, or a compile that runs out of memory
        failure = _error(error)
    if failure is None and request.get("fn_name"):
        target, failure = _callable(program, request["fn_name"], request["code"])
    if failure is not None:  # verl's -2: every case judged on its own gets it; a first run stops at once
        for case in request["cases"] if request["keep_going"] else request["cases"][:1]:
            _write_line(answers, {"index": case["index"], "result": -2, "metadata": failure})
        return
    for case in request["cases"]:
        answer = _run_case(program, target, case, request["timeout_s"])
        _write_line(answers, {"index": case["index"], **answer})
        if "result" in answer and not request["keep_going"]:
            return


def _load_isolation() -> Any:
    from importlib.util import module_from_spec, spec_from_file_location

    if "rlbridge_isolation" not in sys.modules:
        spec = spec_from_file_location(
            "rlbridge_isolation", Path(__file__).resolve().parents[2] / "utils" / "isolation.py"
        )
        sys.modules["rlbridge_isolation"] = module_from_spec(spec)
        spec.loader.exec_module(sys.modules["rlbridge_isolation"])
    return sys.modules["rlbridge_isolation"]


def _reliability_guard() -> None:
    for name in (
        "kill",
        "system",
        "putenv",
        "remove",
        "removedirs",
        "rmdir",
        "fchdir",
        "setuid",
        "fork",
        "forkpty",
        "killpg",
        "rename",
        "renames",
        "truncate",
        "replace",
        "unlink",
        "fchmod",
        "fchown",
        "chmod",
        "chown",
        "chroot",
        "lchown",
        "chdir",
    ):
        if hasattr(os, name):
            setattr(os, name, None)
    for module in ("subprocess", "ctypes", "resource", "psutil", "joblib", "tkinter", "ipdb"):
        sys.modules[module] = None


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout("time limit exceeded")


def _callable(program: Any, fn_name: str, code: str) -> tuple[Any, Optional[dict]]:
    """verl's call-based target: `fn_name` of the program's module, or of `Solution()` when the
    code defines `class Solution`."""
    namespace = {"__name__": "tmp_sol"}
    try:
        with _limits(10):
            exec(program, namespace)
        owner = namespace["Solution"]() if "class Solution" in code else None
        return (getattr(owner, fn_name) if owner is not None else namespace[fn_name]), None
    except BaseException as error:
        return None, _error(error)


def _run_case(program: Any, target: Any, case: dict, timeout_s: float) -> dict:
    """The case's output (`output`, `shown`), or its failure (`result` -1, `metadata`)."""
    try:
        if target is not None:
            arguments = [json.loads(line) for line in str(case["input"]).split("\n")]
            if arguments and isinstance(arguments[0], dict):
                arguments = _int_keys(arguments)
            with _limits(timeout_s):
                output = _load_isolation().plain(target(*arguments))
            shown = truncate(json.dumps(output, default=str), 200)
            return {"output": base64.b64encode(pickle.dumps(output)).decode(), "shown": shown}
        with _limits(timeout_s):
            output = _run_program(program, case["input"])
        return {"output": output, "shown": truncate(output, 200)}
    except BaseException as error:  # the program's own exceptions, MemoryError, our CaseTimeout
        return {"result": -1, "metadata": _error(error)}


class _limits:
    """The case's wall-clock alarm (the CPU limit is the whole run's, set once and locked)."""

    def __init__(self, timeout_s: float):
        self.timeout_s = max(1, math.ceil(timeout_s))

    def __enter__(self) -> None:
        signal.alarm(self.timeout_s)

    def __exit__(self, *exc: Any) -> None:
        signal.alarm(0)


def _run_program(program: Any, stdin_text: Any) -> str:
    """The program's stdout when run as `__main__` with `stdin_text` as its standard input
    (`input()`, `sys.stdin.*`, `sys.stdin.buffer`, `open(0)`); `exit()` ends it normally."""
    text = "\n".join(stdin_text) if isinstance(stdin_text, list) else str(stdin_text)
    stdin = io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
    stdout = io.StringIO()
    real_open = builtins.open

    def open_(file: Any, *args: Any, **kwargs: Any) -> Any:
        if file == 0 or file == "/dev/stdin":
            return io.TextIOWrapper(io.BytesIO(text.encode()), encoding="utf-8")
        return real_open(file, *args, **kwargs)

    saved = sys.stdin, sys.stdout
    sys.stdin, sys.stdout, builtins.open = stdin, stdout, open_
    try:
        exec(program, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit:
        pass
    finally:
        sys.stdin, sys.stdout = saved
        builtins.open = real_open
    return stdout.getvalue()


def stdout_matches(stdout: str, expected: Any) -> bool:
    """verl's stdin/stdout rules, those that can pass: the whole text equal after stripping it (or
    each of its lines); the lines equal to the expected non-empty stripped lines (empty output lines
    dropped); or, when not all lines are integers, the lines equal as floats (numpy's allclose)."""
    expected = "\n".join(expected) if isinstance(expected, list) else str(expected)
    lines = stdout.splitlines()
    if (
        "\n".join(lines).strip() == expected.strip()
        or "\n".join(line.strip() for line in lines).strip() == expected.strip()
    ):
        return True
    wanted = [line.strip() for line in expected.split("\n") if line]
    if lines == [expected] or lines == wanted:
        return True
    lines = [line for line in lines if line]
    if lines == wanted:
        return True
    if len(lines) != len(wanted) or all(_int_like(a) and _int_like(b) for a, b in zip(lines, wanted)):
        return False
    try:
        return all(abs(a - b) <= 1e-8 + 1e-5 * abs(b) for a, b in zip(map(float, lines), map(float, wanted)))
    except ValueError:
        return False


def call_matches(output: Any, expected: Any) -> bool:
    """verl's call-based rules: equal to the expected JSON value (a tuple as a list), or to its
    first item when that value is a non-empty list (verl's data wraps single answers in a list)."""
    if isinstance(expected, dict):
        expected = _int_keys([expected])
    elif isinstance(expected, list) and expected and isinstance(expected[0], dict):
        expected = _int_keys(expected[:1])
    if isinstance(output, tuple):
        output = list(output)
    if output == expected or (isinstance(expected, list) and expected and output == expected[0]):
        return True
    try:
        return isinstance(output[0], tuple) and [list(x) for x in output] == expected[0]
    except Exception:
        return False


def _int_keys(values: list) -> list:
    """verl undoes JSON's string keys of a dict argument or answer (when they are all integers)."""
    try:
        return [{int(k): v for k, v in values[0].items()}]
    except (ValueError, TypeError):
        return values


def _int_like(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and value.isdigit())


def _error(error: BaseException) -> dict:
    if isinstance(error, MemoryError):
        return {"error": "MemoryError: the program ran out of its memory limit"}
    if isinstance(error, CaseTimeout):
        return {"error": "the program did not finish within its time limit"}
    tail = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:])
    return {"error": repr(error), "traceback": truncate(tail, 1000)}


def truncate(text: str, length: int = 300) -> str:
    return text if len(text) <= length else text[: length // 2] + "...(truncated) ..." + text[-length // 2 :]


def _write_line(stream: Any, answer: dict) -> None:
    stream.write(json.dumps(answer) + "\n")
    stream.flush()


if __name__ == "__main__":
    main()
