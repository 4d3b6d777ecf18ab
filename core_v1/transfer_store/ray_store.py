"""The transfer store across processes: keys, tags, counters and waits in one Ray actor; the row
payloads in Ray's shared-memory object store.

Why this shape. The first version sent every payload through the actor's method calls: each
tensor was pickled into the call, unpickled in the actor, cloned, stacked, pickled back and
unpickled by the reader; a 64 x 1 MB batch put + get ran at 0.27 GB/s (0.11 of a plain copy in
the same run, `benchmarks/transfer_store.py`). Sharding the actor would spread that work over
processes but keep every pickling copy. Here the bytes never pass through the actor:

- `put`: the client checks the rows and `ray.put`s them as one object (`StoredBatch`). A tensor field
  that every row of the put holds with one dtype and one shape after the first dimension is one
  *column*: the rows' bytes concatenated (through a reused staging buffer: page-faulting a fresh
  one costs more than the copy), with the row offsets. Other tensors are flat byte views of
  themselves (`TensorBytes`); Ray writes numpy buffers into shared memory out of band, without
  pickling the bytes. The actor receives the keys, the tags and the object's ref (inside a list:
  a top-level ref argument would be resolved to its value) and keeps the ref as the payload of
  each row of the put. A put with less than 100 kB of tensor data (an agent loop's trajectory)
  skips the object store: its batch travels pickled inside the actor call, which costs less
  than an object-store round trip, and the actor keeps those bytes. The `aput`s one process
  starts in one event-loop turn to one partition travel as one put (`coalescing`): one
  object-store write and one actor call instead of one each, each caller still getting its own
  outcome.
- Segments. A row's payload in the actor is a tuple of *segments*, each one stored object (or
  pickled batch) and the row's field names in it: a put's tensors and its Python objects are
  two, and each `add_fields` appends one (its fields travel through the object store as a put's
  do; with `overwrite=True` a later segment's field shadows an earlier one's, and a segment wholly
  shadowed is dropped and freed). A get fetches only the segments that hold the fields it asks
  for: reading the handle's scalars fetches no tensor, a rank reading `old_log_probs` fetches
  none of the trajectory.
- `get`: the actor checks that the keys are live and returns their objects' refs (or the small
  batches' bytes); the client `ray.get`s them, which on the same host maps the shared memory
  without a copy. When the keys are consecutive rows of one put, in put order, and every tensor
  field asked for is a column, the batch's tensors are views of those columns: stacked or jagged
  as usual, no copy at all. For a put that went through the object store these are read-only
  views of shared memory (every reader on the host sees the same bytes): do not write to them
  in place; `pad_jagged` and indexing copy. When the keys are a few such runs (a batch read
  back from many puts, in put order), each column is the runs' slices concatenated: one copy,
  no per-row work. Any other get assembles the batch row by row as the in-process store does,
  copying every byte once. Either copy is private. A reader on another node pulls the objects
  over the network first.

- Writes without waiting. `add_columns`, `move` and `consume` with `wait=False` stage their
  payload as usual and queue the actor call in the client, per thread; the thread's next call to
  the store carries the queue ahead of itself in one actor call (`after`), which does the writes
  in order and then the call, so that call sees them and a failed write raises there. (Sent on its
  own, a write could land after a later read: an async actor runs its calls in any order.) A
  one-rank step so saves a round trip per write, its kept batch's version check being the next
  call anyway; `flush` sends the queue at once, as a rank in its own process does before it returns.

So the round trip the trainer makes (rows put by many agent loops, read as one batch) copies each
byte twice, as the in-process store does (clone on put, batch on get), plus two small actor
calls; a batch put and read back whole (the benchmark; a rank's outputs) copies it once or twice
on put and not on get. Measured on one H200 machine (2026-12-01, the benchmark of then, which
compared the two backends and a plain copy): 64 x 1 MB put + get at 2.1-2.4 GB/s, 2.2-2.7 times the in-process store and 1.2-1.5 times a plain copy into a
fresh buffer; read back in another order (the copying path), about 1.0 GB/s, as in-process.

Lifetime. An object stays in the object store while any of its rows is live: the actor holds its
ref until the last of those rows is consumed, evicted or overwritten, and Ray frees it then (a
view still held by a reader keeps the object mapped until it is dropped). The process that puts
an object owns it (Ray's ownership model; ray.put's `_owner` option was removed in Ray 2.56), so
a writer must outlive its live rows. The writers here are the driver, the agent-loop worker
actors and the rank actors, which live for the run; a get of rows whose owner died raises
StoreStateError naming them (evict them). Rows of small puts live in the actor and outlive their
writer.

Tensors are stored and returned on the CPU (a CUDA tensor is copied to the host on put). Python
objects are pickled with the batch (the client first checks that plain pickle takes them, so
`save` can write them) and come back as new objects. `save` / `load` run in the calling process, on
its node, and write and read the in-process store's file format: `save` takes the actor's rows (tags,
counters, segments) in one call and reads their fields back from the object store; `load` puts the
rows back as a put does (the loading process owns them, as a writer owns its rows: the trainer's
driver, on resume) and hands the actor their segments. So no call of the store's own opens a
batch in the actor's process, which never imports torch (a user's predicate or filter that needs
torch brings it there).

Modules: this one is the client (its calls, and the batches it builds from fetched segments); the
actor is `actor`, serving a `ledger.Ledger` (keys, tags, counters, waits), neither importing torch;
the client's write side, rows to stored batches, is `staging`; the stored records and reading rows
back out of them are `payloads`.

The client is picklable (it holds only the actor handle), so one store is handed to agent-loop
workers and the trainer alike. Errors raised in the actor come back as the original exception
(e.g. `DuplicateKeyError`), not wrapped in `RayTaskError`.
"""

from __future__ import annotations

import itertools
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Mapping, Sequence

import ray
import torch
from ray.exceptions import ObjectLostError, RayTaskError

from core_v1.transfer_store import traffic
from core_v1.transfer_store.coalescing import TurnCoalescer
from core_v1.transfer_store.errors import StoreStateError
from core_v1.transfer_store.actor import _TransferStoreActor
from core_v1.transfer_store.ledger import PartitionStats, TagFilter, _key_list, _preview, refuse_to_block_event_loop
from core_v1.transfer_store.payloads import (
    Column,
    StoredBatch,
    TensorBytes,
    batch_of,
    gathered_batch,
    gathered_objects,
    merged_row,
)
from core_v1.transfer_store.staging import column_batch, stage
from core_v1.transfer_store.store import TransferStore, assemble_batch, object_columns, read_state, write_state

if TYPE_CHECKING:
    from tensordict import TensorDict


class RayTransferStore:
    """Client of a transfer-store Ray actor; same contract as TransferStore (see the package docstring).

    Make one with `make_transfer_store("ray")`. In asyncio code use `aput`: the sync methods block
    the calling thread on `ray.get` (and `wait_for` refuses to run on an event loop's thread).
    """

    def __init__(self, actor: ray.actor.ActorHandle):
        self._actor = actor
        self._turns = TurnCoalescer(self._aput_now)  # per process: a pickled client gets its own
        self._queued = threading.local()  # per thread: the writes made with wait=False, not yet sent

    def __reduce__(self):
        return RayTransferStore, (self._actor,)

    @classmethod
    def create(cls, num_cpus: float = 0, max_concurrency: int = 1000) -> RayTransferStore:
        """Start the actor (Ray must be initialised). `num_cpus=0` keeps it from taking a CPU slot."""
        if not ray.is_initialized():
            raise RuntimeError(
                "the ray transfer store needs Ray running: call ray.init() first, "
                "or use make_transfer_store(backend='local') in one process"
            )
        actor = ray.remote(_TransferStoreActor).options(num_cpus=num_cpus, max_concurrency=max_concurrency)
        return cls(actor.remote())

    # ----------------------------------------------------------------- writes

    def put(
        self,
        partition: str,
        rows: Mapping[str, Mapping[str, Any]],
        tags: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        overwrite: bool = False,
    ) -> None:
        staged = stage(rows)
        _unwrapped_get(self._remote("put", partition, staged.keys, staged.names, staged.stored, tags, overwrite))
        traffic.count_put(staged.tensor_bytes)

    async def aput(
        self,
        partition: str,
        rows: Mapping[str, Mapping[str, Any]],
        tags: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        overwrite: bool = False,
    ) -> None:
        """`put` for asyncio producers; the copy into the object store runs on the calling thread. The
        aputs of one event-loop turn to one partition travel as one put (`coalescing`); each still
        succeeds or fails on its own."""
        await self._turns.put(partition, rows, tags, overwrite)

    async def _aput_now(
        self,
        partition: str,
        rows: Mapping[str, Mapping[str, Any]],
        tags: Mapping[str, Mapping[str, Any]] | None,
        overwrite: bool,
    ) -> None:
        staged = stage(rows)
        await _unwrapped_await(
            self._remote("put", partition, staged.keys, staged.names, staged.stored, tags, overwrite)
        )
        traffic.count_put(staged.tensor_bytes)

    def add_fields(
        self, partition: str, rows: Mapping[str, Mapping[str, Any]], *, overwrite: bool = False
    ) -> list[tuple[int, int]]:
        """As TransferStore.add_fields; the new fields go through the object store as a put's do."""
        staged = stage(rows)
        versions = _unwrapped_get(
            self._remote("add_fields", partition, staged.keys, staged.names, staged.stored, overwrite)
        )
        traffic.count_put(staged.tensor_bytes)
        return versions

    async def aadd_fields(
        self, partition: str, rows: Mapping[str, Mapping[str, Any]], *, overwrite: bool = False
    ) -> list[tuple[int, int]]:
        """`add_fields` for asyncio code; the copy into the object store runs on the calling thread."""
        staged = stage(rows)
        versions = await _unwrapped_await(
            self._remote("add_fields", partition, staged.keys, staged.names, staged.stored, overwrite)
        )
        traffic.count_put(staged.tensor_bytes)
        return versions

    def add_columns(
        self,
        partition: str,
        keys: Sequence[str],
        lengths: Sequence[int],
        columns: Mapping[str, torch.Tensor],
        *,
        overwrite: bool = False,
        wait: bool = True,
    ) -> list[tuple[int, int]] | None:
        """As TransferStore.add_columns; each column's rows are cut out of the padded tensor in one
        masked copy and stored as one column, with no per-row tensor (see `column_batch`). With
        `wait=False` the write is queued and returns None: it travels with this thread's next call
        to the store (`_remote`), which raises its error if it fails."""
        staged = column_batch(_key_list(keys), lengths, columns)
        traffic.count_put(staged.tensor_bytes)
        args = (partition, staged.keys, staged.names, staged.stored, overwrite)
        return self._write("add_fields", args, wait)

    def consume(self, partition: str, keys: Iterable[str], *, wait: bool = True) -> None:
        """As TransferStore.consume; `wait=False` queues it as `add_columns` does."""
        self._write("call", ("consume", partition, _listed(keys)), wait)

    def evict(self, partition: str, keys: Iterable[str], reason: str) -> None:
        return self._call("evict", partition, _listed(keys), reason)

    def move(self, source: str, target: str, keys: Iterable[str], *, wait: bool = True) -> None:
        """As TransferStore.move: the actor moves the rows' payload handles, no bytes travel;
        `wait=False` queues it as `add_columns` does."""
        self._write("call", ("move", source, target, _listed(keys)), wait)

    # ----------------------------------------------------------------- reads

    def get(self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None) -> TensorDict:
        keys = _key_list(keys)
        fields = [fields] if isinstance(fields, str) else fields
        payloads, picks = _unwrapped_get(
            self._remote("payloads", partition, keys, None if fields is None else list(fields))
        )
        return self._batch(partition, keys, fields, payloads, picks)

    def get_versioned(
        self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None
    ) -> tuple[TensorDict, list[tuple[int, int]]]:
        """As TransferStore.get_versioned: the payloads and the versions come in one actor call."""
        keys = _key_list(keys)
        fields = [fields] if isinstance(fields, str) else fields
        wanted = None if fields is None else list(fields)
        (payloads, picks), versions = _unwrapped_get(self._remote("payloads_and_versions", partition, keys, wanted))
        return self._batch(partition, keys, fields, payloads, picks), versions

    def _batch(
        self, partition: str, keys: list[str], fields: Sequence[str] | None, payloads: list, picks: list
    ) -> TensorDict:
        """Rows `keys` built from the segments' `payloads` the actor named (`picks[i]`: row i's)."""
        batches = self._fetched_batches(partition, keys, payloads)
        batch = _batch_from_runs(partition, batches, keys, picks, fields)
        if batch is None:
            batch = gathered_batch(batches, keys, picks, fields)
        if batch is None:
            rows = [merged_row(batches, key, pick) for key, pick in zip(keys, picks)]
            batch = assemble_batch(partition, keys, rows, fields)
        traffic.count_got(traffic.batch_tensor_bytes(batch))
        return batch

    def get_objects(self, partition: str, keys: Sequence[str], fields: Sequence[str]) -> dict[str, list]:
        """As TransferStore.get_objects: only the segments holding `fields` are fetched (a put's objects
        and tensors are separate segments, so no tensor bytes travel for an object field)."""
        keys = _key_list(keys)
        payloads, picks = _unwrapped_get(self._remote("payloads", partition, keys, list(fields)))
        batches = self._fetched_batches(partition, keys, payloads)
        gathered = gathered_objects(batches, keys, picks, fields)
        if gathered is not None:
            return _unshared(gathered)
        rows = [merged_row(batches, key, pick) for key, pick in zip(keys, picks)]
        return object_columns(partition, keys, rows, fields)

    def _fetched_batches(self, partition: str, keys: Sequence[str], payloads: list) -> list[StoredBatch]:
        refs = [payload for payload in payloads if isinstance(payload, ray.ObjectRef)]
        try:
            fetched = dict(zip(refs, ray.get(refs)))
        except ObjectLostError as error:
            raise StoreStateError(
                f"rows {_preview(keys)} of partition {partition!r} are lost from Ray's object "
                f"store ({type(error).__name__}): the process that put them exited while they "
                f"were live; evict them"
            ) from None
        return [batch_of(payload, fetched) for payload in payloads]

    def list(self, partition: str, where: TagFilter | None = None) -> dict[str, dict[str, Any]]:
        return self._call("list", partition, where)

    def row_versions(self, partition: str, keys: Sequence[str]) -> list[tuple[int, int]]:
        """As TransferStore.row_versions: one small actor call, no payload fetched."""
        return self._call("row_versions", partition, _listed(keys))

    def stats(self, partition: str) -> PartitionStats:
        return self._call("stats", partition)

    def check_accounting(self, partition: str | None = None, *, require_drained: bool = False) -> None:
        return self._call("check_accounting", partition, require_drained=require_drained)

    def wait_for(
        self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any], timeout: float | None = None
    ) -> Any:
        """As TransferStore.wait_for; the predicate is pickled to the actor and runs there, so it must be
        a lambda/closure or a function of a module the actor's process can import."""
        refuse_to_block_event_loop("wait_for")
        return _unwrapped_get(self._remote("wait_for", partition, predicate, timeout))

    # ----------------------------------------------------------------- persistence

    def save(self, path: str) -> None:
        """Write the in-process store's save file here: the actor hands over its rows' tags, counters
        and segments in one call, and this process reads the rows' fields back from the segments."""
        state = _unwrapped_get(self._remote("state"))
        for partition, saved in state["partitions"].items():
            rows = saved["rows"]
            payloads = list(dict.fromkeys(payload for row in rows.values() for _, payload in row["fields"]))
            batches = dict(zip(payloads, self._fetched_batches(partition, list(rows), payloads)))
            for key, row in rows.items():
                fields = merged_row([batches[payload] for _, payload in row["fields"]], key, range(len(row["fields"])))
                row["fields"] = {
                    name: value.clone() if isinstance(value, torch.Tensor) else value for name, value in fields.items()
                }
        write_state(state, path)

    def load(self, path: str) -> None:
        """Restore a save file into this store, which must not have been used yet. The rows are put into
        the object store from this process, which owns them as a writer does (see the module docstring)."""
        state = read_state(path)
        staged = {}
        for partition, saved in state["partitions"].items():
            if saved["rows"]:
                rows = stage({key: row["fields"] for key, row in saved["rows"].items()})
                staged[partition] = (rows.names, rows.stored)
            for row in saved["rows"].values():
                row["fields"] = None  # travel staged, not pickled into the call
        _unwrapped_get(self._remote("restore", state, staged, str(path)))

    # ----------------------------------------------------------------- plumbing

    def flush(self) -> None:
        """Send this thread's queued writes (`wait=False`) now and wait for them; raises the first
        one's error. A training rank in its own process calls it before it returns: the driver's
        next call may be another process's read of what it wrote."""
        writes = self._take_queued()
        if writes:
            _unwrapped_get(self._actor.after.remote(writes, None, (), {}))

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _unwrapped_get(self._remote("call", method, *args, **kwargs))

    def _write(self, method: str, args: tuple, wait: bool) -> Any:
        """The actor's write `method(*args)`: now (its reply), or queued for this thread's next call."""
        if wait:
            return _unwrapped_get(self._remote(method, *args))
        queued = getattr(self._queued, "writes", None)
        if queued is None:
            queued = self._queued.writes = []
        queued.append((method, args))
        return None

    def _take_queued(self) -> list[tuple[str, tuple]]:
        writes = getattr(self._queued, "writes", None) or []
        self._queued.writes = []
        return writes

    def _remote(self, method: str, *args: Any, **kwargs: Any) -> ray.ObjectRef:
        """Call the actor's `method`, with this thread's queued writes ahead of it in the same call:
        the actor runs an async actor's calls in any order, so a write sent on its own could land
        after a later read; carried by the next call, it is done first and costs no round trip."""
        writes = self._take_queued()
        if writes:
            return self._actor.after.remote(writes, method, args, kwargs)
        return getattr(self._actor, method).remote(*args, **kwargs)

    def __repr__(self) -> str:
        return f"RayTransferStore(actor={self._actor!r})"

    def shutdown(self) -> None:
        """Stop the actor and drop every row (a run's start-up that fails, or its end, calls it)."""
        ray.kill(self._actor)


def make_transfer_store(
    backend: Literal["local", "ray"] = "local", **ray_options: Any
) -> TransferStore | RayTransferStore:
    """A transfer store: in-process (`"local"`) or a Ray actor (`"ray"`, options as RayTransferStore.create)."""
    if backend == "local":
        if ray_options:
            raise TypeError(f"options {sorted(ray_options)} only apply to backend='ray'")
        return TransferStore()
    if backend == "ray":
        return RayTransferStore.create(**ray_options)
    raise ValueError(f"unknown transfer-store backend {backend!r}; use 'local' (one process) or 'ray'")


def _unshared(columns: dict[str, list]) -> dict[str, list]:
    """Object columns just unpickled from the store's payloads, each value private to this reader
    already, except where one object stands in several rows (pickle keeps the aliasing of a put's
    rows): those repeats are copied, so no two rows share a mutable value. Copying every value, as
    the in-process store must, cost ~2.5 ms of the handle's 256-row read."""
    from core_v1.transfer_store.batching import copied_object  # with tensordict: not in the actor

    seen: set[int] = set()
    unshared = {}
    for name, values in columns.items():
        column = []
        for value in values:
            if id(value) in seen:
                value = copied_object(value)
            else:
                seen.add(id(value))
            column.append(value)
        unshared[name] = column
    return unshared


def _batch_from_runs(
    partition: str,
    batches: Sequence[StoredBatch],
    keys: Sequence[str],
    picks: Sequence[Sequence[int]],
    fields: Sequence[str] | None,
) -> TensorDict | None:
    """The batch of `keys` built column by column, when they are runs of consecutive rows of puts, in
    put order, and every tensor field asked for is a column where it comes from: one run (a batch
    read back as it was put) is views of the stored columns, no copy; a few runs (a batch read back
    from many puts) are each column's slices concatenated, one copy and no per-row work. Else None
    (the caller copies row by row, which also names a missing field)."""
    runs = _runs(batches, keys, picks)
    if runs is None or len(runs) * 8 > len(keys) > 8:
        return None  # mostly lone rows: the row-by-row path costs the same
    wanted = (
        list(fields)
        if fields is not None
        else list(
            dict.fromkeys(
                name
                for sources, count in runs
                for batch, first in sources
                for row in batch.names[first : first + count]
                for name in row
            )
        )
    )
    plan: dict[str, list[tuple[StoredBatch, int, int]]] = {}  # field -> (batch, first row, count) per run
    for name in wanted:
        parts = []
        for sources, count in runs:
            source = _field_source(sources, name, count)
            if source is None:
                return None
            parts.append((*source, count))
        if len({name in batch.columns for batch, _, _ in parts}) > 1:
            return None  # a column in some puts, not in others
        plan[name] = parts
    objects = [name for name, parts in plan.items() if name not in parts[0][0].columns]
    rows = [{} for _ in keys]
    for name in objects:
        position = 0
        for batch, first, count in plan[name]:
            for i in range(count):
                rows[position + i][name] = batch.other[first + i][name]
            position += count
    if any(isinstance(value, (TensorBytes, torch.Tensor)) for row in rows for value in row.values()):
        return None
    from tensordict import TensorDict  # imported where batches are built (see store.py)

    assembled = assemble_batch(partition, keys, rows, objects)
    out = TensorDict({}, batch_size=[len(keys)])
    for name in wanted:
        if name in objects:
            out[name] = assembled.get(name)
            continue
        parts = [(batch.columns[name], first, count) for batch, first, count in plan[name]]
        column = _column_run(*parts[0]) if len(parts) == 1 else _joined_column(parts)
        if column is None:
            return None
        out[name] = column
    return out


def _runs(
    batches: Sequence[StoredBatch], keys: Sequence[str], picks: Sequence[Sequence[int]]
) -> list[tuple[list[tuple[StoredBatch, int]], int]] | None:
    """`keys` as maximal runs: ([(segment batch, first row) per segment, oldest first], row count),
    a run's keys having the same segments and being consecutive rows of each. None for no keys."""
    if not keys:
        return None
    runs: list[tuple[list[tuple[StoredBatch, int]], int]] = []
    previous_pick = None
    for key, pick in zip(keys, picks):
        positions = [batches[index].position[key] for index in pick]
        if (
            runs
            and pick == previous_pick
            and all(position == first + runs[-1][1] for position, (_, first) in zip(positions, runs[-1][0]))
        ):
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append(([(batches[index], position) for index, position in zip(pick, positions)], 1))
        previous_pick = pick
    return runs


def _field_source(runs: Sequence[tuple[StoredBatch, int]], name: str, count: int) -> tuple[StoredBatch, int] | None:
    """The newest segment run holding field `name` in all `count` rows; None if one holds it in some only."""
    for batch, first in reversed(runs):
        present = [name in batch.names[first + i] for i in range(count)]
        if all(present):
            return batch, first
        if any(present):
            return None
    return None


def _joined_column(runs: Sequence[tuple[Column, int, int]]) -> torch.Tensor | None:
    """Rows of several column runs in one new tensor: stacked if all are equally long, else jagged;
    None if the runs' dtypes or trailing shapes differ."""
    if len({(column.dtype, column.trailing) for column, _, _ in runs}) > 1:
        return None
    pieces, lengths = [], []
    for column, first, count in runs:
        offsets = column.offsets[first : first + count + 1]
        pieces.append(column.values()[offsets[0] : offsets[-1]])
        lengths.extend(b - a for a, b in zip(offsets, offsets[1:]))
    values = torch.cat(pieces)
    if len(set(lengths)) == 1:
        return values.reshape(len(lengths), lengths[0], *runs[0][0].trailing)
    offsets = torch.tensor([0, *itertools.accumulate(lengths)])
    return torch.nested.nested_tensor_from_jagged(values, offsets)


def _column_run(column: Column, first: int, count: int) -> torch.Tensor:
    """Rows first..first+count-1 of a column: stacked if they are equally long, else jagged; no copy."""
    offsets = column.offsets[first : first + count + 1]
    values = column.values()[offsets[0] : offsets[-1]]
    lengths = {b - a for a, b in zip(offsets, offsets[1:])}
    if len(lengths) == 1:
        return values.reshape(count, lengths.pop(), *column.trailing)
    return torch.nested.nested_tensor_from_jagged(values, torch.tensor(offsets) - offsets[0])


def _listed(keys: Iterable[str]) -> Any:
    # Materialise generators here (they cannot be shipped); a lone string goes through so the
    # store can reject it with its usual message.
    return keys if isinstance(keys, str) else list(keys)


def _unwrapped_get(ref: ray.ObjectRef) -> Any:
    try:
        return ray.get(ref)
    except RayTaskError as error:
        raise _cause(error) from None


async def _unwrapped_await(ref: ray.ObjectRef) -> Any:
    try:
        return await ref
    except RayTaskError as error:
        raise _cause(error) from None


def _cause(error: RayTaskError) -> BaseException:
    # The actor's own exception, so callers catch DuplicateKeyError etc. and see a one-line message.
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error
