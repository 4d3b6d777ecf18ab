"""A stand-in Sandbox Fusion service on 127.0.0.1 for tests: `POST /run_code` runs the code in a
Python subprocess under the request's `run_timeout`, with the request's `stdin`, and answers in the
service's JSON shape. Used by the tool's tests and the code scorer's (tests/core_v1/reward)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class SandboxService:
    """`mode` picks the answer: "run" (run the code), an HTTP status code, "sandbox-error",
    "not-json", "slow" (no answer for 2 s). `delay_s` is waited before each answer."""

    def __init__(self):
        self.mode: str | int = "run"
        self.delay_s = 0.0
        self.requests: list[dict] = []
        self.in_flight = self.peak = 0
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with service._lock:
                    service.requests.append(payload)
                    service.in_flight += 1
                    service.peak = max(service.peak, service.in_flight)
                try:
                    status, body = service.answer(payload)
                finally:
                    # Out of the count before the reply goes out: the client may send its next request at once.
                    with service._lock:
                        service.in_flight -= 1
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run_code"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def answer(self, payload: dict) -> tuple[int, bytes]:
        time.sleep(self.delay_s if self.mode != "slow" else 2.0)
        if isinstance(self.mode, int):
            return self.mode, b"{}"
        if self.mode == "not-json":
            return 200, b"<html>busy</html>"
        if self.mode == "sandbox-error":
            return 200, json.dumps({"status": "SandboxError", "message": "no runner is free",
                                    "compile_result": None, "run_result": None}).encode()
        return 200, json.dumps(run_python(payload["code"], payload["run_timeout"], payload.get("stdin"))).encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def run_python(code: str, run_timeout: float, stdin: str | None = None) -> dict:
    """The service's answer to running `code` with Python, `stdin` as its standard input."""
    started = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, "-c", code], input=stdin or "", capture_output=True, text=True,
                              timeout=run_timeout)
        run = {"status": "Finished", "return_code": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
    except subprocess.TimeoutExpired as expired:
        partial = expired.stdout.decode() if isinstance(expired.stdout, bytes) else (expired.stdout or "")
        run = {"status": "TimeLimitExceeded", "return_code": None, "stdout": partial, "stderr": ""}
    run["execution_time"] = time.perf_counter() - started
    ok = run["status"] == "Finished" and run["return_code"] == 0
    return {"status": "Success" if ok else "Failed", "message": "", "compile_result": None, "run_result": run,
            "executor_pod_name": None, "files": {}}
