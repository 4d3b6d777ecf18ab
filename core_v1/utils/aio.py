"""A private asyncio event loop on a daemon thread, so synchronous code (the trainer) can drive
async components (the rollout client, the store's async API) without owning a loop itself."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import queue
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
        """Cancel what still runs on the loop and let it unwind, then stop the loop: a task still
        pending when its loop closes is reported as destroyed (a replica watch, a waiting call)."""
        if self.loop.is_running():
            try:
                asyncio.run_coroutine_threadsafe(_cancel_other_tasks(), self.loop).result(timeout=5)
            except (concurrent.futures.TimeoutError, RuntimeError):
                pass  # a task that will not unwind in time is left as it is: the loop stops anyway
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


async def _cancel_other_tasks() -> None:
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_in_daemon_thread(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` on a daemon thread, awaited without blocking the loop.

    Not `asyncio.to_thread`: its pool threads are joined at interpreter exit, so one call that never
    returns (a hung reward function) would hang the process's exit after its caller timed out.
    """
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():  # the awaiting side may have been cancelled by a timeout
            outcome()

    def work() -> Callable[[], None]:
        try:
            result = fn(*args, **kwargs)
            outcome = lambda: future.set_result(result)  # noqa: E731
        except BaseException as error:  # handed to the awaiting side, which decides
            # Bound as a default: Python unbinds `error` when the except block ends.
            outcome = lambda error=error: future.set_exception(error)  # noqa: E731
        return lambda: deliver(outcome)

    def deliver(outcome: Callable[[], None]) -> None:
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop closed while this call ran: nobody waits any more
            pass

    _DAEMON_POOL.run(work)
    return await future


class _DaemonThreads:
    """Daemon threads kept for reuse: starting a thread per call cost a reward-scoring worker more
    than the scoring (one call per sample). A thread that is stuck in a hung call is simply never
    idle again, and the next call starts another; idle threads exit after `keep_alive_s`."""

    def __init__(self, keep_alive_s: float = 30.0, name: str = "rlbridge-call"):
        self._jobs: "queue.SimpleQueue[Callable[[], Callable[[], None]]]" = queue.SimpleQueue()
        self._name = name
        self._idle = 0
        self._lock = threading.Lock()
        self._keep_alive_s = keep_alive_s

    def run(self, job: Callable[[], Callable[[], None]]) -> None:
        """Run `job` on an idle thread (or a new one); what it returns is called once the thread
        counts as idle again, so that a caller woken by it finds the thread free."""
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # this job is that thread's
        self._jobs.put(job)
        if start:
            threading.Thread(target=self._serve, name=self._name, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                job = self._jobs.get(timeout=self._keep_alive_s)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:
                        self._idle -= 1
                        return
                continue  # a job was promised to this thread and is on its way
            then = job()
            with self._lock:
                self._idle += 1
            then()


def _new_pool() -> None:
    global _DAEMON_POOL
    _DAEMON_POOL = _DaemonThreads()


_new_pool()
# A forked child has none of the parent's threads, so it must not count on the parent's idle ones.
os.register_at_fork(after_in_child=_new_pool)


class TurnBatcher:
    """Gathers the requests made in one event-loop turn and hands them to one `call(requests,
    futures)`: many coroutines each awaiting their own answer, one round trip for all of them (an
    engine step finishes many sessions at once, and a step submits its sessions together).

    `call` answers each future (in any order, as results come); those it leaves unanswered get its
    error, a copy each (type, message and frames), or, if it returned, an error saying so. Requests
    made while a call runs form the next call. Each call runs in its own task, so a caller that is
    cancelled leaves the other callers' answers alone.
    """

    def __init__(self, call: Callable[[list[Any], list["asyncio.Future"]], Awaitable[None]]):
        self._call = call
        self._pending: list[tuple[Any, asyncio.Future]] = []
        self._calls: set[asyncio.Task] = set()

    async def submit(self, request: Any) -> Any:
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._start)  # after every request of this turn has joined
        future = loop.create_future()
        self._pending.append((request, future))
        return await future

    def _start(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.get_running_loop().create_task(self._run(batch))
        self._calls.add(task)  # keep a reference: the loop holds tasks only weakly
        task.add_done_callback(self._calls.discard)

    async def _run(self, batch: list[tuple[Any, "asyncio.Future"]]) -> None:
        futures = [future for _, future in batch]
        try:
            await self._call([request for request, _ in batch], futures)
        except asyncio.CancelledError:  # the loop is going away, and its callers with it
            for future in futures:
                future.cancel()
            raise
        except Exception as error:  # noqa: BLE001 - every caller gets it; nobody may wait forever
            for future in futures:
                settle(future, copy_of(error))
        for future in futures:
            settle(future, RuntimeError("a batched call returned without answering this request"))


def settle(future: "asyncio.Future", outcome: Any) -> None:
    """Answer `future` with `outcome` (an exception is raised to its awaiter), unless it is answered
    already or its awaiter gave up."""
    if future.done():
        return
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


def copy_of(error: Exception) -> Exception:
    """A fresh exception like `error` (type, message, frames), for one of several awaiters."""
    try:
        copy = type(error)(*error.args)
    except Exception:  # noqa: BLE001 - an exception class whose constructor wants other arguments
        copy = RuntimeError(f"{type(error).__name__}: {error}")
    return copy.with_traceback(error.__traceback__)
