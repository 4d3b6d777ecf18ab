"""A private asyncio event loop on a daemon thread, so synchronous code (the trainer) can drive
async components (the rollout client, the store's async API) without owning a loop itself."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Optional


class BackgroundLoop:
    def __init__(self, name: str = "rlbridge-loop"):
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Awaitable[Any], timeout: Optional[float] = None) -> Any:
        """Run `coro` on the loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def submit(self, coro: Awaitable[Any]) -> "asyncio.Future":
        """Schedule `coro` and return at once (a concurrent.futures.Future)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()
