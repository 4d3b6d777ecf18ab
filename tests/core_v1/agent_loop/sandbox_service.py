"""A stand-in Sandbox Fusion service on 127.0.0.1 for tests: `POST /run_code` runs the code in a
Python subprocess under the request's `run_timeout`, with the request's `stdin`, and answers in the
service's JSON shape. Used by the tool's tests and the code scorer's (tests/core_v1/reward)."""

from __future__ import annotations

import subprocess
import sys
import time

from tests.json_service import JsonService


class SandboxService(JsonService):
    """`mode` picks the answer: "run" (run the code), "sandbox-error", or `JsonService`'s modes."""

    def __init__(self):
        super().__init__("/run_code", mode="run")

    def reply(self, payload: dict) -> dict:
        if self.mode == "sandbox-error":
            return {
                "status": "SandboxError",
                "message": "no runner is free",
                "compile_result": None,
                "run_result": None,
            }
        return run_python(payload["code"], payload["run_timeout"], payload.get("stdin"))


def run_python(code: str, run_timeout: float, stdin: str | None = None) -> dict:
    """The service's answer to running `code` with Python, `stdin` as its standard input."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], input=stdin or "", capture_output=True, text=True, timeout=run_timeout
        )
        run = {"status": "Finished", "return_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        run = {"status": "TimeLimitExceeded", "return_code": None, "stdout": partial, "stderr": ""}
    run["execution_time"] = time.perf_counter() - started
    ok = run["status"] == "Finished" and run["return_code"] == 0
    return {
        "status": "Success" if ok else "Failed",
        "message": "",
        "compile_result": None,
        "run_result": run,
        "executor_pod_name": None,
        "files": {},
    }
