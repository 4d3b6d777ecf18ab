"""Transfer-store benchmark: what a waiting `sample` costs per put, and throughput side by side with
the real TransferQueue package, in one invocation. Every figure is read against a baseline
measured in the same run (the machines it runs on are shared and their speed drifts).

1. Wake cost. One put that completes a prompt group, timed from the put's start until a thread
   blocked in `store.wait_for` on the replay buffers' predicate returns. The partition holds
   576 or 17,408 live rows (groups of 16 sessions plus their group row; the batch needs 8
   complete groups, 7 are, the put completes the 8th). Predicates: `oldest_complete_groups`
   (the sync `sample`) and `plan_sample` (the async one), each as the replay buffers pass it
   (a `functools.partial`, answered from the store's group index), and as a plain callable
   around the same function (the store then re-runs it over every row's tags: the cost before
   the index). Both backends: the in-process store, and the Ray store (the wait runs in its
   actor). Printed: the median of `--wake-repeats` puts, and the ratio 17,408 / 576 rows.

2. A small put's fixed cost (Ray store, 36 KB agent rows): one 1-row put; 16 one-row `aput`s
   started in one event-loop turn (they travel as one put); one 16-row put, the baseline.

3. Against TransferQueue (`pip install rlbridge[bench]`: transferqueue 0.1.11, its KV interface
   `kv_batch_put` / `kv_batch_get` / `kv_clear`, its default SimpleStorage backend, started by
   `tq.init()` with its default config). Both stores run in the same Ray runtime, alternated run
   by run (`--runs`, 3 by default); each run's figure and the median over runs are printed, and
   the ratio of the medians.
   - `1 MB rows`: 64 rows of one 1 MB float32 field, put in one call and read back as one
     batch, `--repeats` round trips per run (median). TransferQueue is handed the rows already
     stacked in a TensorDict (its interface's input), untimed; ours takes `{key: {field: row}}`.
   - `agent`: 1,024 trajectory rows of 2,048 prompt+response token ids (int64), a 2,048 attention
     mask (int64) and 1,024 log-probs (float32), 36 KB a row; 64 writers put 16 rows each, from
     `--writer-actors` Ray actors (16 concurrent writers each by default: an agent-loop worker's
     sessions finishing), then the trainer (this process) reads all 1,024 as one batch. Timed
     from the writers' start to the batch in hand; GB/s of row bytes.

Run: python benchmarks/transfer_store.py [--runs 3] [--repeats 5] [--wake-repeats 7]
     [--writer-actors 4] [--one-mb-rows 64] [--agent-rows 1024] [--wake-rows 576 17408]
     [--parts wake,put,transferqueue]

Measured 2026-12-05 on the shared 2-core development machine (load average 20-120 from other
jobs during the runs: absolute figures swing several-fold, the same-run ratios less), two runs of
`python benchmarks/transfer_store.py` with the defaults (the first before part 2 existed):
- wake cost, 576 -> 17,408 live rows, indexed: in-process 0.30-0.39 ms at both sizes (17,408 /
  576 = 0.93-1.15x); Ray store 3.7-7.0 ms (0.62-1.27x), its actor call included. The same
  predicates re-run over every row (the store before the index): in-process 1.7-2.1 ms -> 157-192
  ms (75-110x), Ray 5.9-7.0 -> 124-188 ms (18-30x).
- small put: one 1-row put 2.0 ms (a no-op actor call alone takes 1.5); 16 one-row aputs in one
  turn 7.6 ms, 1.18x one 16-row put and 4.3x faster than 16 puts one by one.
- against TransferQueue, medians of 3: 64 x 1 MB put + get 1.01 / 0.97 GB/s against 0.066 /
  0.048 (15.4x / 20.4x); the agent workload 0.178 / 0.120 GB/s against 0.039 / 0.034 (4.6x /
  3.5x).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import threading
import time
import uuid
from typing import Any, Callable

import torch

PARTITION = "bench"
SESSIONS = 16  # per prompt group
BATCH_GROUPS = 8  # complete groups the waiting sample needs
AGENT_WRITERS, ONE_MB_FLOATS = 64, 250_000


# --------------------------------------------------------------------- 1. wake cost


class Scan:
    """A wait predicate without an indexed form: the store re-runs it over every row's tags."""

    def __init__(self, predicate: Callable):
        self.predicate = predicate

    def __call__(self, tags: dict) -> Any:
        return self.predicate(tags)


def wake_predicates() -> dict[str, Callable]:
    from core_v1.transfer_store.groups import oldest_complete_groups, plan_sample

    sync = functools.partial(oldest_complete_groups, batch_size=BATCH_GROUPS)
    plan = functools.partial(
        plan_sample, need=BATCH_GROUPS, batch_size=BATCH_GROUPS, global_steps=1, threshold=4, strategy="drop"
    )
    return {"sync sample": sync, "async sample": plan}


def fill_partition(store: Any, partition: str, live_rows: int) -> tuple[str, dict]:
    """`live_rows` rows: 7 complete groups, the target group missing one session, and incomplete
    groups (15 of 16 sessions in, the last partly) for the rest. Returns the missing row's key and tags."""
    from core_v1.transfer_store import trajectory_key

    tags: dict[str, dict] = {}

    def group(order: int, sessions: int) -> str:
        uid = uuid.uuid4().hex
        tags[uid] = {"status": "running", "n": SESSIONS, "global_steps": 0, "order": order}
        for session in range(sessions):
            tags[trajectory_key(uid, session)] = {"status": "finished", "global_steps": 0, "response_len": 512}
        return uid

    for order in range(BATCH_GROUPS - 1):
        group(order, SESSIONS)
    target = group(BATCH_GROUPS - 1, SESSIONS - 1)
    order = BATCH_GROUPS
    while len(tags) < live_rows:
        group(order, min(SESSIONS - 1, live_rows - len(tags) - 1))
        order += 1
    keys = list(tags)
    for start in range(0, len(keys), 2048):
        chunk = keys[start : start + 2048]
        store.put(partition, {key: {} for key in chunk}, {key: tags[key] for key in chunk})
    missing = trajectory_key(target, SESSIONS - 1)
    return missing, {"status": "finished", "global_steps": 0, "response_len": 512}


def wake_seconds(store: Any, live_rows: int, predicate: Callable, repeats: int, settle: float) -> list[float]:
    """Seconds from the start of the completing put to the waiter's return, `repeats` times."""
    partition = f"wake-{uuid.uuid4().hex[:8]}"
    missing, missing_tags = fill_partition(store, partition, live_rows)
    seconds = []
    for _ in range(repeats):
        woke: list[float] = []
        waiter = threading.Thread(
            target=lambda: (store.wait_for(partition, predicate, timeout=120), woke.append(time.perf_counter()))
        )
        waiter.start()
        time.sleep(settle)  # the waiter has evaluated once and sleeps
        start = time.perf_counter()
        store.put(partition, {missing: {}}, {missing: missing_tags})
        waiter.join()
        seconds.append(woke[0] - start)
        store.consume(partition, [missing])
    store.consume(partition, list(store.list(partition)))
    return seconds


def report_wake(stores: dict[str, Any], repeats: int, sizes: tuple[int, int]) -> None:
    print(f"\n1. wake cost: one put completing the 8th group while a sample waits (median of {repeats}, ms)")
    print(f"   {'backend':<10} {'predicate':<13} {'form':<8} {sizes[0]:>9,} {sizes[1]:>9,} {'ratio':>7}  (live rows)")
    for backend, store in stores.items():
        for name, predicate in wake_predicates().items():
            for form, used in (("indexed", predicate), ("scan", Scan(predicate))):
                settle = 0.05 if form == "indexed" else 0.5
                small, large = (
                    statistics.median(wake_seconds(store, rows, used, repeats, settle)) * 1e3 for rows in sizes
                )
                print(f"   {backend:<10} {name:<13} {form:<8} {small:9.3f} {large:9.3f} {large / small:7.2f}x")


# --------------------------------------------------------------------- 2. a small put's fixed cost


def agent_rows(count: int, generator: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """`count` rows of the agent workload's shape (36 KB each) under fresh keys."""
    from core_v1.transfer_store import trajectory_key

    uid = uuid.uuid4().hex
    return {
        trajectory_key(uid, session): {
            "input_ids": torch.randint(0, 150_000, (2048,), generator=generator),
            "attention_mask": torch.ones(2048, dtype=torch.long),
            "response_logprobs": -torch.rand(1024, generator=generator),
        }
        for session in range(count)
    }


def put_cost(store: Any, repeats: int) -> None:
    """Median ms of: one 1-row put; 16 one-row aputs started in one event-loop turn; one 16-row put."""
    import asyncio

    generator = torch.Generator().manual_seed(1)

    def timed_ms(action: Callable[[list[dict]], Any], rows_per_call: list[int]) -> float:
        seconds = []
        for _ in range(repeats):
            batches = [agent_rows(count, generator) for count in rows_per_call]
            start = time.perf_counter()
            action(batches)
            seconds.append(time.perf_counter() - start)
            store.consume(PARTITION, [key for rows in batches for key in rows])
        return statistics.median(seconds) * 1e3

    async def together(batches: list[dict]) -> None:
        await asyncio.gather(*(store.aput(PARTITION, rows) for rows in batches))

    one = timed_ms(lambda batches: store.put(PARTITION, batches[0]), [1])
    turn = timed_ms(lambda batches: asyncio.run(together(batches)), [1] * 16)
    batch = timed_ms(lambda batches: store.put(PARTITION, batches[0]), [16])
    print(f"\n2. a small put's fixed cost, Ray store (36 KB rows; median of {repeats}, ms)")
    print(
        f"   one 1-row put {one:.2f}; 16 one-row aputs in one turn {turn:.2f} ({turn / batch:.2f}x one 16-row put, "
        f"{16 * one / turn:.1f}x faster than 16 puts one by one); one 16-row put {batch:.2f}"
    )


# --------------------------------------------------------------------- 3. against TransferQueue


def one_mb_rows(count: int) -> dict[str, dict[str, torch.Tensor]]:
    from core_v1.transfer_store import trajectory_key

    uid = uuid.uuid4().hex
    generator = torch.Generator().manual_seed(0)
    return {
        trajectory_key(uid, row): {"response_logprobs": torch.randn(ONE_MB_FLOATS, generator=generator)}
        for row in range(count)
    }


def flat_values(field: torch.Tensor) -> torch.Tensor:
    """A batch field's entries (TransferQueue returns even equal-length rows as a jagged tensor)."""
    return field.values() if field.is_nested else field.reshape(-1)


def check_rows(field: torch.Tensor, rows: int, per_row: int) -> None:
    if field.shape[0] != rows or flat_values(field).numel() != rows * per_row:
        raise SystemExit(f"error: a batch came back with shape {tuple(field.shape)}, not {rows} rows of {per_row}")


def median_round_trip(round_trip: Callable[[], Any], clear: Callable[[], None], repeats: int) -> float:
    round_trip()  # warm-up: first-use costs (connections, buffers) are not what is compared
    clear()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        round_trip()
        seconds.append(time.perf_counter() - start)
        clear()
    return statistics.median(seconds)


def ours_one_mb(store: Any, rows: dict, repeats: int) -> float:
    keys = list(rows)

    def round_trip() -> None:
        store.put(PARTITION, rows)
        check_rows(store.get(PARTITION, keys)["response_logprobs"], len(keys), ONE_MB_FLOATS)

    return median_round_trip(round_trip, lambda: store.consume(PARTITION, keys), repeats)


def tq_one_mb(tq: Any, rows: dict, repeats: int) -> float:
    from tensordict import TensorDict

    keys = list(rows)
    fields = TensorDict(
        {"response_logprobs": torch.stack([row["response_logprobs"] for row in rows.values()])}, batch_size=[len(keys)]
    )

    def round_trip() -> None:
        tq.kv_batch_put(keys=keys, partition_id=PARTITION, fields=fields)
        check_rows(tq.kv_batch_get(keys=keys, partition_id=PARTITION)["response_logprobs"], len(keys), ONE_MB_FLOATS)

    return median_round_trip(round_trip, lambda: tq.kv_clear(keys=keys, partition_id=PARTITION), repeats)


class AgentWriters:
    """Ray actor body: `writers` concurrent writers of `rows_per_writer` trajectory rows each."""

    def __init__(self, store: Any, writers: int, rows_per_writer: int, seed: int, use_tq: bool):
        self.store = store
        generator = torch.Generator().manual_seed(seed)
        self.rows = [list(agent_rows(rows_per_writer, generator).values()) for _ in range(writers)]
        self.tq = None
        if use_tq:
            import transfer_queue

            transfer_queue.init()  # attaches to the driver's controller and storage
            self.tq = transfer_queue

    def checksum(self) -> int:
        return int(sum(row["input_ids"].sum() for writer in self.rows for row in writer))

    async def write(self, keys: list[list[str]], use_tq: bool) -> None:
        import asyncio

        puts = [
            self._put_tq(writer_keys, rows) if use_tq else self._put_ours(writer_keys, rows)
            for writer_keys, rows in zip(keys, self.rows)
        ]
        await asyncio.gather(*puts)

    async def _put_ours(self, keys: list[str], rows: list[dict]) -> None:
        await self.store.aput(PARTITION, dict(zip(keys, rows)))

    async def _put_tq(self, keys: list[str], rows: list[dict]) -> None:
        from tensordict import TensorDict

        fields = TensorDict(
            {name: torch.stack([row[name] for row in rows]) for name in rows[0]}, batch_size=[len(rows)]
        )
        await self.tq.async_kv_batch_put(keys=keys, partition_id=PARTITION, fields=fields)


def agent_keys(actors: int, writers: int, rows_per_writer: int) -> list[list[list[str]]]:
    from core_v1.transfer_store import trajectory_key

    return [
        [
            [trajectory_key(uid, session) for session in range(rows_per_writer)]
            for uid in (uuid.uuid4().hex for _ in range(writers))
        ]
        for _ in range(actors)
    ]


def agent_round(actors: list, store: Any, tq: Any, use_tq: bool, checksum: int, rows_total: int) -> tuple[float, float]:
    """(seconds to write, seconds to write and read) of one agent-workload round; the batch is checked."""
    import ray

    writers = AGENT_WRITERS // len(actors)
    keys = agent_keys(len(actors), writers, rows_total // AGENT_WRITERS)
    flat = [key for actor_keys in keys for writer_keys in actor_keys for key in writer_keys]
    start = time.perf_counter()
    ray.get([actor.write.remote(actor_keys, use_tq) for actor, actor_keys in zip(actors, keys)])
    written = time.perf_counter()
    batch = tq.kv_batch_get(keys=flat, partition_id=PARTITION) if use_tq else store.get(PARTITION, flat)
    done = time.perf_counter()
    check_rows(batch["input_ids"], rows_total, 2048)
    if int(flat_values(batch["input_ids"]).sum()) != checksum:
        raise SystemExit(
            f"error: the {'TransferQueue' if use_tq else 'transfer store'} batch differs from the rows put"
        )
    del batch
    if use_tq:
        tq.kv_clear(keys=flat, partition_id=PARTITION)
    else:
        store.consume(PARTITION, flat)
    return written - start, done - start


def report_side_by_side(name: str, nbytes: int, ours: list[float], theirs: list[float], need: float) -> None:
    def rates(seconds: list[float]) -> list[float]:
        return [nbytes / s / 1e9 for s in seconds]

    ours_rate, their_rate = statistics.median(rates(ours)), statistics.median(rates(theirs))
    print(
        f"   {name}: transfer store {ours_rate:.3f} GB/s (runs {', '.join(f'{r:.3f}' for r in rates(ours))}); "
        f"TransferQueue {their_rate:.3f} GB/s (runs {', '.join(f'{r:.3f}' for r in rates(theirs))}); "
        f"ratio {ours_rate / their_rate:.2f}x (target >= {need:g}x)"
    )


def compare_with_transferqueue(
    store: Any, runs: int, repeats: int, writer_actors: int, one_mb_count: int, agent_rows: int
) -> None:
    import ray
    import transfer_queue as tq

    tq.init()
    rows = one_mb_rows(one_mb_count)
    one_mb_bytes = sum(row["response_logprobs"].nbytes for row in rows.values())
    print(
        f"\n3. side by side with transferqueue {_version('transferqueue')} (SimpleStorage), "
        f"alternated, {runs} runs each"
    )
    ours, theirs = [], []
    for run in range(runs):
        ours.append(ours_one_mb(store, rows, repeats))
        theirs.append(tq_one_mb(tq, rows, repeats))
        print(f"   run {run + 1}: 1 MB rows  ours {ours[-1] * 1e3:.1f} ms  TransferQueue {theirs[-1] * 1e3:.1f} ms")
    writers = AGENT_WRITERS // writer_actors
    actor_cls = ray.remote(AgentWriters).options(num_cpus=0, max_concurrency=writers)
    actors = [
        actor_cls.remote(store, writers, agent_rows // AGENT_WRITERS, seed, True) for seed in range(writer_actors)
    ]
    checksum = sum(ray.get([actor.checksum.remote() for actor in actors]))
    agent_bytes = agent_rows * (2048 * 8 * 2 + 1024 * 4)
    agent_round(actors, store, tq, False, checksum, agent_rows)  # warm-up of both
    agent_round(actors, store, tq, True, checksum, agent_rows)
    agent_ours, agent_theirs = [], []
    for run in range(runs):
        write, total = agent_round(actors, store, tq, False, checksum, agent_rows)
        agent_ours.append(total)
        their_write, their_total = agent_round(actors, store, tq, True, checksum, agent_rows)
        agent_theirs.append(their_total)
        print(
            f"   run {run + 1}: agent      ours {total * 1e3:.1f} ms (writes {write * 1e3:.1f})  "
            f"TransferQueue {their_total * 1e3:.1f} ms (writes {their_write * 1e3:.1f})"
        )
    print(f"   medians of {runs} (GB/s of row bytes):")
    report_side_by_side(f"1 MB rows ({one_mb_count} x 1 MB put + get)", one_mb_bytes, ours, theirs, 5)
    report_side_by_side(
        f"agent ({agent_rows} x 36 KB rows, {AGENT_WRITERS} writers x {agent_rows // AGENT_WRITERS} "
        f"from {writer_actors} "
        f"actors, one read)",
        agent_bytes,
        agent_ours,
        agent_theirs,
        3,
    )
    for actor in actors:
        ray.kill(actor)
    tq.close()


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


# --------------------------------------------------------------------- main


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="alternated runs of each store against TransferQueue")
    parser.add_argument("--repeats", type=int, default=5, help="round trips per 1 MB-rows run (median)")
    parser.add_argument("--wake-repeats", type=int, default=7)
    parser.add_argument("--writer-actors", type=int, default=4, help="Ray actors the 64 agent writers run in")
    parser.add_argument(
        "--parts", default="wake,put,transferqueue", help="comma-separated parts to run: wake, put, transferqueue"
    )
    parser.add_argument(
        "--wake-rows",
        type=int,
        nargs=2,
        default=(576, 17_408),
        metavar=("SMALL", "LARGE"),
        help="live rows of the wake-cost part",
    )
    parser.add_argument("--one-mb-rows", type=int, default=64, help="rows of the 1 MB-rows comparison")
    parser.add_argument("--agent-rows", type=int, default=1024, help="rows of the agent workload (a multiple of 64)")
    args = parser.parse_args()
    if min(args.runs, args.repeats, args.wake_repeats, args.writer_actors) < 1:
        parser.error("--runs, --repeats, --wake-repeats and --writer-actors must be positive")
    if args.one_mb_rows < 1 or args.agent_rows < AGENT_WRITERS or args.agent_rows % AGENT_WRITERS:
        parser.error(f"--one-mb-rows must be positive and --agent-rows a positive multiple of {AGENT_WRITERS}")
    if AGENT_WRITERS % args.writer_actors:
        parser.error(f"--writer-actors must divide {AGENT_WRITERS}")
    args.parts = set(args.parts.split(","))
    if args.parts - {"wake", "put", "transferqueue"} or min(args.wake_rows) < 200:
        parser.error("--parts names wake, put, transferqueue; --wake-rows are at least 200")
    if "transferqueue" in args.parts:
        try:
            import transfer_queue  # noqa: F401
        except ImportError:
            parser.error(
                "the comparison needs the transferqueue package: pip install 'rlbridge[bench]' "
                "(or pass --parts wake,put)"
            )
    return args


def main() -> None:
    args = parse_args()
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    from core_v1.transfer_store import make_transfer_store

    torch.set_num_threads(1)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Scan and AgentWriters travel by value
    try:
        store = make_transfer_store("ray")
        if "wake" in args.parts:
            report_wake(
                {"in-process": make_transfer_store("local"), "ray": store}, args.wake_repeats, tuple(args.wake_rows)
            )
        if "put" in args.parts:
            put_cost(store, args.wake_repeats * 3)
        if "transferqueue" in args.parts:
            compare_with_transferqueue(
                store, args.runs, args.repeats, args.writer_actors, args.one_mb_rows, args.agent_rows
            )
        store.check_accounting(require_drained=True)
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
