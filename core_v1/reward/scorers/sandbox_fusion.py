"""verl's Sandbox Fusion code scorer: the model's program run against test cases in a Sandbox Fusion service.

`compute_score(sandbox_fusion_url, concurrent_semaphore, memory_limit_mb, completion, test_cases,
continuous=False, timeout=10) -> (score, [metadata per case])` is verl's
`verl.utils.reward_score.sandbox_fusion.compute_score`; `default_compute_score` calls it for
`codecontests`, `apps`, `codeforces` and `taco` rows when `reward.sandbox_fusion.url` is set
(`continuous=True`, the run's `max_concurrent` and `memory_limit_mb`), as verl's does.

verl's rules, kept:

- the code is the text after the last ```` ```python ```` up to the next ```` ``` ````, else the
  first ```` ``` ```` block (less a first line that is a language name); a completion without a
  block scores `(0.0, [{"error": ...}])`;
- `test_cases` (JSON text or a dict) holds `inputs` and `outputs`, or `assert_case` (code appended to
  the program, one case each); with `fn_name` the program is wrapped so that the case's input lines
  are the JSON arguments of `fn_name` (a global, or a method of `Solution()`) and its result is
  printed (JSON for containers, None and bools; `str` otherwise; a call that raises prints nothing);
- every case is one `run_code` request (stdin = the input, `compile_timeout` = `run_timeout` =
  `timeout`, `memory_limit_MB` = `memory_limit_mb`), the cases in parallel threads, each inside
  `concurrent_semaphore` when one is given; a case passes when the service says `Success`, the run
  `Finished`, and its stdout equals the expected output, trailing newlines aside (or nothing is
  expected);
- per case verl's result code: True, False (wrong answer), -1 (service or sandbox error), -2
  (runtime error), -3 (timeout), -4 (does not compile; every later case is marked -4 too), and its
  metadata dict (`status`, `stdout`, `stderr`, `api_request_error`, ...);
- the score is the fraction of the first 10 cases that pass with `continuous`, of all cases
  without; it is never an exception: a failure is 0.0 with the reason in the metadata.

The request itself, with verl's retries of 504 answers, is the Sandbox Fusion tool's
(`core_v1.agent_loop.tools.sandbox_fusion.request_run`): one client for the tool and the scorer.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10  # verl's: seconds to compile and to run, each
CONTINUOUS_CASES = 10  # verl's: how many cases a continuous score looks at
MAX_THREADS = 32

FN_WRAPPER = """
{prelude}
# === User's Original Code START ===
{generation}
# === User's Original Code END ===

def _rlbridge_call():
    raw = sys.stdin.read()
    args = [json.loads(line) for line in raw.split("\\n")] if raw.strip() else []
    if {fn_name!r} in globals():
        target = globals()[{fn_name!r}]
    elif "Solution" in globals():
        target = getattr(globals()["Solution"](), {fn_name!r})
    else:
        raise NameError("function or method {fn_name} not found")
    return target(*args)

if __name__ == "__main__":
    try:
        result = _rlbridge_call()
    except Exception:  # as verl's wrapper: the traceback on stderr, nothing printed, exit code 0
        import traceback
        sys.stderr.write(traceback.format_exc())
    else:
        print(json.dumps(result) if isinstance(result, (dict, list, tuple, bool)) or result is None else str(result))
"""
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
        "import string, re, datetime, collections, heapq, bisect, copy, math, random, statistics",
        "import itertools, functools, operator, io, sys, json",
    ]
)

_SEMAPHORES: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_SEMAPHORES_LOCK = threading.Lock()


def semaphore_for(url: str, max_concurrent: int) -> threading.BoundedSemaphore:
    """This process's limit on requests in flight to `url` (`reward.sandbox_fusion.max_concurrent`),
    shared by every sample it scores. Per process, as verl's was per reward manager: each agent-loop
    worker (V1) or the trainer (V0) has its own."""
    with _SEMAPHORES_LOCK:
        return _SEMAPHORES.setdefault((url, max_concurrent), threading.BoundedSemaphore(max_concurrent))


def extract_code(completion: str) -> Optional[str]:
    """verl's code extraction; None when the completion has no code block."""
    if "```python" in completion:
        return completion.split("```python")[-1].split("```")[0]
    if "```" not in completion:
        return None
    solution = completion.split("```")[1]
    if "\n" in solution:
        first_line, rest = solution.split("\n", 1)
        if first_line.strip().isalpha():
            solution = rest
    return solution


def compute_score(
    sandbox_fusion_url: str,
    concurrent_semaphore: Any,
    memory_limit_mb: Optional[int],
    completion: str,
    test_cases: Any,
    continuous: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
) -> tuple[float, list[dict]]:
    """`(score in [0, 1], metadata per case)` (see the module docstring); never raises."""
    solution = extract_code(completion)
    if solution is None:
        return 0.0, [{"error": "Invalid completion (missing code block)"}]
    try:
        cases = json.loads(test_cases) if not isinstance(test_cases, dict) else dict(test_cases)
    except (TypeError, json.JSONDecodeError):
        return 0.0, [{"error": "Invalid test_cases JSON format"}]
    if isinstance(cases, dict) and isinstance(cases.get("assert_case"), list):
        cases.setdefault("inputs", ["" for _ in cases["assert_case"]])
        cases.setdefault("outputs", [None for _ in cases["assert_case"]])
    elif not isinstance(cases, dict) or "inputs" not in cases or "outputs" not in cases:
        return 0.0, [{"error": "Invalid test_cases structure (missing inputs/outputs)"}]
    try:
        results, metadata = check_correctness(
            sandbox_fusion_url,
            cases,
            solution,
            timeout=timeout,
            memory_limit_mb=memory_limit_mb or 1024,
            concurrent_semaphore=concurrent_semaphore,
        )
    except Exception as error:  # a bug here must not fail the sample: verl scores it 0.0 too
        logger.exception("sandbox fusion scorer failed")
        return 0.0, [{"error": f"Unhandled exception: {error}"}]
    considered = results[:CONTINUOUS_CASES] if continuous else results
    score = sum(r is True for r in considered) / len(considered) if considered else 0.0
    return float(score), metadata


def check_correctness(
    sandbox_fusion_url: str,
    in_outs: dict,
    generation: str,
    timeout: float = DEFAULT_TIMEOUT,
    memory_limit_mb: int = 1024,
    language: str = "python",
    concurrent_semaphore: Any = None,
) -> tuple[list[Any], list[dict]]:
    """verl's `(results, metadata)` for every case of `in_outs`, in order (see the module docstring)."""
    from core_v1.agent_loop.tools.sandbox_fusion import SandboxFusionConfig  # the tool's client (lazy: a heavy import)

    inputs, outputs = in_outs.get("inputs"), in_outs.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        return [-1], [{"error": "Invalid input/output data"}]
    count = len(inputs)
    if count == 0:
        return [], []
    asserts = in_outs.get("assert_case", [""] * count)
    if len(outputs) != count or len(asserts) != count:
        return [-1] * count, [{"error": "Input/output count mismatch", "case_index": i} for i in range(count)]
    config = SandboxFusionConfig(
        sandbox_fusion_url=sandbox_fusion_url, memory_limit_mb=int(memory_limit_mb), default_timeout=float(timeout)
    )
    fn_name = in_outs.get("fn_name")
    with ThreadPoolExecutor(min(count, MAX_THREADS), thread_name_prefix="sandbox-fusion-score") as pool:
        answers = list(
            pool.map(
                lambda i: _run_case(
                    config,
                    i,
                    inputs[i],
                    outputs[i],
                    generation + "\n\n" + asserts[i],
                    timeout,
                    language,
                    concurrent_semaphore,
                    fn_name,
                ),
                range(count),
            )
        )
    results, metadata = [r for r, _ in answers], [m for _, m in answers]
    first_compile_error = next((i for i, r in enumerate(results) if r == -4), None)
    if first_compile_error is not None:
        for i in range(first_compile_error + 1, count):
            results[i] = -4
            metadata[i]["status"] = "compile_error_skipped"
    return results, metadata


def _run_case(
    config: Any,
    index: int,
    stdin_data: Any,
    expected: Any,
    generation: str,
    timeout: float,
    language: str,
    semaphore: Any,
    fn_name: Optional[str],
) -> tuple[Any, dict]:
    from core_v1.agent_loop.tools.sandbox_fusion import SUPPORTED_LANGUAGES, request_run

    code = generation
    if fn_name and language == "python":
        code = FN_WRAPPER.format(prelude=PRELUDE, generation=generation, fn_name=fn_name)
    stdin = None if stdin_data is None else str(stdin_data)
    metadata = {
        "case_index": index,
        "input": stdin,
        "expected_output": str(expected) if expected else None,
        "api_request_error": None,
        "api_response": None,
        "status": "unknown",
        "stdout": None,
        "stderr": None,
        "exit_code": None,
        "duration": None,
        "compile_duration": None,
        "compile_stderr": None,
        "api_status": None,
        "compile_status": None,
        "run_status": None,
    }
    if language not in SUPPORTED_LANGUAGES:
        reply, error = None, f"Unsupported language: {language}"
    elif semaphore is not None:
        with semaphore:
            reply, error = request_run(config, code, timeout, language, stdin)
    else:
        reply, error = request_run(config, code, timeout, language, stdin)
    if error is not None:
        metadata.update(status="api_error", api_request_error=f"API Call Failed: {error}")
        return -1, metadata
    return _judge(reply, expected, metadata)


def _judge(reply: dict, expected: Any, metadata: dict) -> tuple[Any, dict]:
    """verl's reading of one `run_code` answer: the result code, and the metadata filled in."""
    compiled, run = reply.get("compile_result") or {}, reply.get("run_result") or {}
    metadata.update(api_response=reply, api_status=reply.get("status"))
    if compiled:
        metadata.update(
            compile_status=compiled.get("status"),
            compile_duration=compiled.get("execution_time"),
            compile_stderr=compiled.get("stderr"),
        )
    if run:
        metadata.update(
            run_status=run.get("status"),
            stdout=run.get("stdout"),
            stderr=run.get("stderr"),
            exit_code=run.get("return_code"),
            duration=run.get("execution_time"),
        )
    status, run_status = reply.get("status"), run.get("status")
    if status == "Success":
        if run and run_status == "Finished":
            passed = expected is None or str(run.get("stdout") or "").rstrip("\n") == str(expected).rstrip("\n")
            metadata["status"] = "success" if passed else "wrong_answer"
            return passed, metadata
        metadata["status"] = "unexpected_success_state"
        return -1, metadata
    if status != "Failed":
        metadata["status"] = f"unknown_api_status_{status}"
        return -1, metadata
    compile_status = compiled.get("status")
    if compiled and (
        compile_status in ("Error", "TimeLimitExceeded")
        or (compile_status == "Finished" and compiled.get("return_code") != 0)
    ):
        metadata["status"] = "compile_timeout" if compile_status == "TimeLimitExceeded" else "compile_error"
        return -4, metadata
    if not run:
        metadata["status"] = "unknown_failure_state"
        return -1, metadata
    if run_status == "TimeLimitExceeded":
        metadata["status"] = "timeout"
        return -3, metadata
    if run_status == "Error" or (run_status == "Finished" and run.get("return_code") != 0):
        metadata["status"] = "runtime_error"
        return -2, metadata
    metadata["status"] = "unknown_failure"
    return -1, metadata
