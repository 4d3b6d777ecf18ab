"""verl's `prime_code` scorer: the model's Python program run locally against a problem's test cases.

`compute_score(completion, test_cases, continuous=False)` is what `default_compute_score` uses for
`codecontests`, `apps`, `codeforces` and `taco` rows when no Sandbox Fusion service is configured
(`reward.sandbox_fusion.url`), as verl's does. `test_cases` is a JSON string (or dict) of
`{"inputs": [...], "outputs": [...]}`: stdin/stdout cases, or with `"fn_name"` call-based cases
whose input lines are the JSON arguments and whose output is the JSON result.

verl's rules, kept:

- the code is the text after the last ```` ```python ```` up to the next ```` ``` ```` (a bare
  program is used as it is);
- all cases run first (5 s each), stopping at the first one that does not pass; when all pass the
  result is `(True, metadata)`;
- otherwise, with `continuous`, each of the first 10 cases is judged on its own (10 s each) and the
  score is the fraction of those that pass: `(fraction, [metadata per case])`, each metadata with
  `test_case: {input, output, res}`;
- outputs compare as verl's `run_test` compares them (`_code_runner.stdout_matches`, `call_matches`),
  here, in the scoring process: the expected outputs never reach the program's process, whose
  memory and answer stream the program can read and write.

Where it runs. Each program runs in a fresh child process (`_code_runner.py`) isolated as the tool
sandbox's workers are (`core_v1/utils/isolation.py`: the strongest mode the kernel allows, said
once in the log with what it does not cover): no network, the filesystem read-only but for a
private temp dir, an environment of `PATH`, `LANG`, `HOME`, `TMPDIR` and `OMP_NUM_THREADS`, its
address space capped at what it uses plus `memory_limit_mb`, a CPU limit for all its cases (soft =
hard, locked) and a per-case alarm; the parent kills its whole process tree when a case does not
answer within its time plus a second. A fresh process per program, not the tool sandbox's pooled
workers: one model's program could leave state (patched built-ins, threads, globals) that changes
the next one's score.

Departures from verl: a solution that fails without `continuous` scores `(False, metadata)` (verl
raises UnboundLocalError there); the time limit is per case (verl also stops the whole first run
after 6 s, so many quick cases could fail a correct program); cases that passed the first run are
not run again; memory is limited (verl's prime_code sets no limit); `exit()` ends a program as
Python's does (verl unbinds it); `open()` of another file than stdin opens it (verl's mock gives
every `open` the input).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from core_v1.reward.scorers._code_runner import truncate, call_matches, stdout_matches
from core_v1.utils import isolation

logger = logging.getLogger(__name__)

RUNNER = Path(__file__).with_name("_code_runner.py")
FIRST_RUN_TIMEOUT_S = 5.0  # verl's: all cases, stop at the first failure
CASE_TIMEOUT_S = 10.0  # verl's: each of the first cases on its own
CONTINUOUS_CASES = 10  # verl's: how many cases a continuous score looks at
START_ALLOWANCE_S = 10.0  # interpreter start-up and isolation, before the first case's clock
_LOGGED: set = set()


def compute_score(
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    *,
    memory_limit_mb: int = 1024,
    first_run_timeout_s: float = FIRST_RUN_TIMEOUT_S,
    case_timeout_s: float = CASE_TIMEOUT_S,
    isolation_mode: str = "auto",
) -> tuple[Any, Any]:
    """`(True | fraction | False, metadata)`; never raises for a bad program or bad test cases.
    `isolation_mode`: "auto" (the strongest the kernel allows) or one of `isolation.MODES`."""
    code = completion.split("```python")[-1].split("```")[0]
    try:
        cases = json.loads(test_cases) if not isinstance(test_cases, dict) else test_cases
        inputs, outputs = cases["inputs"], cases["outputs"]
        if len(inputs) != len(outputs) or not inputs:
            raise ValueError(f"{len(inputs)} inputs, {len(outputs)} outputs")
    except (TypeError, KeyError, ValueError) as error:
        return False, {"error": f"invalid test cases (a JSON object of inputs and outputs): {error}"}
    fn_name = cases.get("fn_name")
    first = run_cases(
        code,
        inputs,
        outputs,
        fn_name,
        range(len(inputs)),
        first_run_timeout_s,
        memory_limit_mb,
        keep_going=False,
        isolation_mode=isolation_mode,
    )
    if len(first) == len(inputs) and all(result is True for result, _ in first.values()):
        return True, first[0][1]
    if not continuous:
        return False, next((meta for result, meta in first.values() if result is not True), {})
    considered = range(min(len(inputs), CONTINUOUS_CASES))
    again = [i for i in considered if first.get(i, (None,))[0] is not True]
    judged = {
        **first,
        **run_cases(
            code,
            inputs,
            outputs,
            fn_name,
            again,
            case_timeout_s,
            memory_limit_mb,
            keep_going=True,
            isolation_mode=isolation_mode,
        ),
    }
    metadata = [
        {**judged[i][1], "test_case": {"input": str(inputs[i]), "output": str(outputs[i]), "res": str([judged[i][0]])}}
        for i in considered
    ]
    return sum(judged[i][0] is True for i in considered) / len(considered), metadata


def run_cases(
    code: str,
    inputs: list,
    outputs: list,
    fn_name: Any,
    indices: Any,
    timeout_s: float,
    memory_limit_mb: int,
    keep_going: bool,
    isolation_mode: str = "auto",
) -> dict[int, tuple[Any, dict]]:
    """`{case index: (verl's result, metadata)}` for the cases run: all of `indices` with
    `keep_going`, else up to and including the first that does not pass. A child that dies or
    hangs fails its current case (-1); with `keep_going` a new child takes the next one."""
    pending = list(indices)
    judged: dict[int, tuple[Any, dict]] = {}
    while pending:
        request = {
            "code": code,
            "fn_name": fn_name,
            "timeout_s": timeout_s,
            "memory_mb": memory_limit_mb,
            "keep_going": keep_going,
            "isolation": isolation_mode,
            "cases": [{"index": i, "input": inputs[i]} for i in pending],
        }  # expected outputs stay here
        for index, answer in _child_answers(request, timeout_s + 1.0):
            result, metadata = judged[index] = _judge(answer, inputs[index], outputs[index], fn_name)
            pending.remove(index)
            if result is not True and not keep_going:
                return judged
    return judged


def _judge(answer: dict, case_input: Any, expected: Any, fn_name: Any) -> tuple[Any, dict]:
    """verl's result for one case from what the program did: -1 / -2 as the child said, else
    True or False by comparing its output with the expected one here."""
    shown = {"inputs": truncate(str(case_input)), "expected": truncate(str(expected), 200)}
    if "result" in answer:  # only a failure is the child's to report: a pass it sends is forged
        failure = answer["result"] if type(answer["result"]) is int and answer["result"] in (-1, -2) else -1
        metadata = answer.get("metadata") if isinstance(answer.get("metadata"), dict) else {}
        return failure, metadata if failure == -2 else {**shown, **metadata}
    try:
        if fn_name:
            output = _plain_loads(base64.b64decode(answer["output"]))
            passed = call_matches(output, json.loads(expected))
        else:
            passed = stdout_matches(answer["output"], expected)
    except Exception as error:  # test data that is not JSON, or an answer line the program forged
        return -1, {**shown, "error": repr(error)}
    return (
        (True, {})
        if passed
        else (False, {**shown, "output": str(answer.get("shown")), "error_message": "Wrong Answer"})
    )


class _PlainUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"the program's value refers to {module}.{name}; only plain data may cross")


def _plain_loads(data: bytes) -> Any:
    return _PlainUnpickler(io.BytesIO(data)).load()


def _child_answers(request: dict, case_limit_s: float):
    """Yield `(index, answer)` per case from one child, in order; a case it does not answer in
    time (or in order), or dies on, is yielded as -1 and ends this child."""
    tmp_dir = tempfile.mkdtemp(prefix="rlbridge-code-")
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "HOME": tmp_dir,
        "TMPDIR": tmp_dir,
    }
    child = subprocess.Popen(
        [sys.executable, "-I", str(RUNNER)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_dir,
        start_new_session=True,
    )
    try:
        try:
            child.stdin.write(json.dumps({**request, "tmp_dir": tmp_dir}).encode())
            child.stdin.close()
        except BrokenPipeError:
            pass
        started = _line(child, START_ALLOWANCE_S)
        if not isinstance(started, dict) or not started.get("ready"):
            reason = started.get("error") if isinstance(started, dict) else f"the program's process {started}"
            yield request["cases"][0]["index"], {"result": -1, "metadata": {"error": reason}}
            return
        _log_once(started["coverage"])
        for case in request["cases"]:
            answer = _line(child, case_limit_s)
            if not isinstance(answer, dict) or answer.get("index") != case["index"]:
                why = answer if isinstance(answer, str) else "answered out of turn"
                yield case["index"], {"result": -1, "metadata": {"error": f"the program {why}"}}
                return
            yield case["index"], answer
    finally:
        _kill(child)
        child.stdout.close()
        shutil.rmtree(tmp_dir, ignore_errors=True)


def _log_once(coverage: str) -> None:
    if coverage not in _LOGGED:
        _LOGGED.add(coverage)
        logger.warning("prime_code scorer: %s", coverage)


def _line(child: subprocess.Popen, wait_s: float) -> dict | str:
    """The child's next JSON line, or why there is none (it hung and was killed, or it died)."""
    ready, _, _ = select.select([child.stdout], [], [], wait_s)
    if not ready:
        _kill(child)
        return f"did not answer within {wait_s:g} s and was stopped"
    line = child.stdout.readline()
    if not line:
        return _death(child)
    try:
        return json.loads(line)
    except ValueError:
        return "wrote something other than an answer where its answer belongs"


def _death(child: subprocess.Popen) -> str:
    try:
        code = child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        return "stopped answering"
    if code > 128:  # namespaces mode: the outer process passes the program's signal on as 128 + n
        code = -(code - 128)
    if code in (-signal.SIGXCPU, -signal.SIGKILL):  # a CPU limit set soft = hard ends in SIGKILL
        return f"was killed by signal {signal.Signals(-code).name} (its CPU or memory limit, most likely)"
    if code < 0:
        return f"was killed by signal {signal.Signals(-code).name}"
    return f"exited with code {code}"


def _kill(child: subprocess.Popen) -> None:
    if child.poll() is None:
        isolation.kill_tree(child.pid)  # the program's own children go too, new sessions included
    child.wait()
