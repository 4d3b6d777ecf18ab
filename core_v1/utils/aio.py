"""A private asyncio event loop on a daemon thread, so synchronous code (the trainer) can drive
async components (the rollout client, the store's async API) without owning a loop itself."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Awaitable, Callable, Optional


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


async def run_in_daemon_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a fresh daemon thread, awaited without blocking the loop.

    Not `asyncio.to_thread`: its pool threads are joined at interpreter exit, so one call that never
    returns (a hung reward function) would hang the process's exit after its caller timed out.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():  # the awaiting side may have been cancelled by a timeout
            outcome()

    def work() -> None:
        try:
            result = fn(*args, **kwargs)
            outcome = lambda: future.set_result(result)  # noqa: E731
        except BaseException as error:  # handed to the awaiting side, which decides
            # Bound as a default: Python unbinds `error` when the except block ends.
            outcome = lambda error=error: future.set_exception(error)  # noqa: E731
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop closed while this call ran: nobody waits any more
            pass

    threading.Thread(target=work, name=f"rlbridge-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return await future
