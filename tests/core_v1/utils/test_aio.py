"""`run_in_daemon_thread`: calls run off the event loop on reused daemon threads, and a call that
never returns neither blocks later calls nor the threads that serve them."""

from __future__ import annotations

import asyncio
import threading

from core_v1.utils import aio
from core_v1.utils.aio import _DaemonThreads, run_in_daemon_thread


def test_sequential_calls_reuse_one_thread_and_results_and_errors_come_back(monkeypatch):
    # A pool of its own: idle threads that earlier tests of this process left would take turns.
    monkeypatch.setattr(aio, "_DAEMON_POOL", _DaemonThreads())

    async def main():
        names = [await run_in_daemon_thread(lambda: threading.current_thread().ident) for _ in range(20)]
        try:
            await run_in_daemon_thread(lambda: 1 / 0)
        except ZeroDivisionError:
            raised = True
        return names, raised

    names, raised = asyncio.run(main())
    assert raised
    assert len(set(names)) == 1
    assert threading.current_thread().ident not in names


def test_a_hung_call_times_out_and_later_calls_still_run():
    release = threading.Event()

    async def main():
        try:
            await asyncio.wait_for(run_in_daemon_thread(release.wait), timeout=0.05)
        except asyncio.TimeoutError:
            pass
        return await asyncio.gather(*(run_in_daemon_thread(lambda i=i: i * i) for i in range(8)))

    try:
        assert asyncio.run(main()) == [i * i for i in range(8)]
    finally:
        release.set()


def test_idle_threads_exit_after_the_keep_alive():
    pool = _DaemonThreads(keep_alive_s=0.05, name="test-keep-alive")
    done = threading.Event()
    pool.run(lambda: done.set)
    assert done.wait(2)
    before = {t for t in threading.enumerate() if t.name == "test-keep-alive"}
    for _ in range(100):
        if not any(t.is_alive() for t in before):
            break
        threading.Event().wait(0.02)
    assert before and not any(t.is_alive() for t in before)
    assert pool._idle == 0


def test_requests_of_one_turn_share_a_call_and_each_gets_its_answer():
    from core_v1.utils.aio import TurnBatcher, settle

    calls = []

    async def call(requests, futures):
        calls.append(list(requests))
        await asyncio.sleep(0)
        for request, future in zip(requests, futures):
            if request == "unanswered":
                continue
            settle(future, ValueError(request) if request == "bad" else request * 2)

    async def main():
        batcher = TurnBatcher(call)
        first = await asyncio.gather(
            *(batcher.submit(r) for r in ("a", "b", "bad", "unanswered")), return_exceptions=True
        )
        second = await batcher.submit("c")  # a later turn: a call of its own
        return first, second

    (a, b, bad, unanswered), second = asyncio.run(main())
    assert (a, b, second) == ("aa", "bb", "cc")
    assert isinstance(bad, ValueError) and isinstance(unanswered, RuntimeError)
    assert calls == [["a", "b", "bad", "unanswered"], ["c"]]


def test_a_call_that_raises_fails_each_of_its_requests_with_a_copy():
    from core_v1.utils.aio import TurnBatcher

    async def call(requests, futures):
        raise KeyError("replica gone")

    async def main():
        batcher = TurnBatcher(call)
        return await asyncio.gather(*(batcher.submit(i) for i in range(3)), return_exceptions=True)

    errors = asyncio.run(main())
    assert all(isinstance(e, KeyError) and e.args == ("replica gone",) for e in errors)
    assert len({id(e) for e in errors}) == 3


def test_close_cancels_what_still_runs_and_lets_it_unwind():
    loop, started, unwound = aio.BackgroundLoop("test-close"), threading.Event(), threading.Event()

    async def watch_forever():  # as a replica supervisor's watch waits on a call that never returns
        started.set()
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            unwound.set()

    loop.submit(watch_forever())
    assert started.wait(5)
    loop.close()
    assert unwound.is_set() and loop.loop.is_closed()
