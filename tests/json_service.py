"""A JSON-over-HTTP service on 127.0.0.1 (`http.server` in a thread) for tests of rlbridge's
clients of real services (the search tool's retrieval service, Sandbox Fusion).

It records each request, counts requests in flight (and the peak, for rate-limit tests) and
answers by `mode`: an HTTP status code, "not-json", "slow" (no answer for 2 s), or whatever the
subclass's `reply` does with the others. `delay_s` is waited before each answer."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class JsonService:
    def __init__(self, path: str, mode: str = "ok"):
        self.mode: str | int = mode
        self.delay_s = 0.0
        self.requests: list[Any] = []
        self.in_flight = self.peak = 0
        self._lock = threading.Lock()
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with service._lock:
                    service.requests.append(service.recorded(payload, self.headers))
                    service.in_flight += 1
                    service.peak = max(service.peak, service.in_flight)
                try:
                    status, body = service.answer(payload)
                finally:
                    # Out of the count before the reply goes out: a client that waits for this reply
                    # may send its next request first (peak 2 under rate_limit 1 failed CI).
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
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{path}"
        # A short poll: `close` waits for the serving loop's next poll, 0.5 s by default, in every test.
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()

    def recorded(self, payload: Any, headers: Any) -> Any:
        """What `requests` keeps of one request."""
        return payload

    def answer(self, payload: Any) -> tuple[int, bytes]:
        time.sleep(2.0 if self.mode == "slow" else self.delay_s)
        if isinstance(self.mode, int):
            return self.mode, b"{}"
        if self.mode == "not-json":
            return 200, b"<html>busy</html>"
        return 200, json.dumps(self.reply(payload)).encode()

    def reply(self, payload: Any) -> Any:
        """The JSON answer in the other modes."""
        raise NotImplementedError

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
