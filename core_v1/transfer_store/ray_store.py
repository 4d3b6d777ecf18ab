"""The transfer store across processes: keys, tags, counters and waits in one Ray actor; the row
payloads in Ray's shared-memory object store.

Why this shape. The first version sent every payload through the actor's method calls: each
tensor was pickled into the call, unpickled in the actor, cloned, stacked, pickled back and
unpickled by the reader, and one 64 x 1 MB batch put + get ran at 0.27 GB/s (0.11 of a plain
copy in the same run; `benchmarks/transfer_store.py`). Sharding the actor would split that cost
over several processes but keep every pickling copy. Here the bytes never pass through the actor:

- `put`: the client checks the rows, turns each CPU tensor into a flat uint8 numpy view of its
  bytes (`_TensorBytes`, no copy) and `ray.put`s the whole batch of rows as one object; Ray
  writes numpy buffers into shared memory out of band, so that is one memory copy and no
  pickling of the bytes. The actor receives the keys, the tags and the object's ref (inside a
  list: a top-level ref argument would be resolved to its value) and keeps the ref as the payload
  of each row of the batch.
- `get`: the actor checks that the keys are live and returns their batches' refs; the client
  `ray.get`s them, which on the same host maps the shared memory without a copy (read-only numpy
  buffers, viewed as tensors without copying them), and assembles the TensorDict as the
  in-process store does. That assembly (stacking, or nesting jagged rows) copies every byte
  once, so a returned batch is writable and never aliases the read-only shared memory.
  A reader on another node pulls the objects over the network first.

So a round trip copies the bytes twice, as the in-process store does (clone on put, stack on
get), plus two small actor calls. Measured with the benchmark (64 x 1 MB, same run): see its
docstring.

Lifetime. A batch object stays in the object store while any of its rows is live: the actor holds
its ref until the last of those rows is consumed, evicted or overwritten, and Ray frees it then.
The process that `put` a batch owns its object (Ray's ownership model; ray.put's `_owner` option
was removed in Ray 2.56), so a writer must outlive its live rows. The writers here are the driver
and the agent-loop worker actors, which live for the run; a get of rows whose owner died raises
StoreStateError naming them (evict them).

Tensors are stored and returned on the CPU (a CUDA tensor is copied to the host on put). Python
objects are pickled with the batch (the client first checks that plain pickle takes them, so
`save` can write them). `save` / `load` run in the actor, on the node where it runs: `save`
reads the payloads back from the object store and writes the same file format as the in-process
store; `load` puts the loaded rows back into the object store, owned by the actor.

The client is picklable (it holds only the actor handle), so one store is handed to agent-loop
workers and the trainer alike. Errors raised in the actor come back as the original exception
(e.g. `DuplicateKeyError`), not wrapped in `RayTaskError`.
"""

from __future__ import annotations

import asyncio
import warnings
from typing import Any, Callable, Iterable, Literal, Mapping, NamedTuple, Sequence

import numpy as np
import ray
import torch
from ray.exceptions import ObjectLostError, RayTaskError
from tensordict import TensorDict

from core_v1.transfer_store.errors import StoreStateError
from core_v1.transfer_store.schema import parse_key
from core_v1.transfer_store.store import (PartitionStats, TagFilter, TransferStore, _key_list, _prepare_rows,
                                          _preview, assemble_batch, check_fields, check_rows_mapping,
                                          pickled_objects, read_state, refuse_to_block_event_loop, write_state)

# Metadata methods the actor serves from its TransferStore as they are.
_FORWARDED = frozenset({"list", "consume", "evict", "stats", "check_accounting"})

# Tensors viewed on the object store's read-only buffers are copied into the batch before anyone
# can write to them; torch's warning about non-writable numpy arrays does not apply.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable", category=UserWarning,
                        module=__name__)


class _TensorBytes(NamedTuple):
    """A CPU tensor as the flat bytes Ray stores out of band, with what rebuilds the tensor."""

    data: np.ndarray  # uint8, one dimension
    dtype: torch.dtype
    shape: tuple[int, ...]


class _TransferStoreActor:
    """Ray actor body; an async actor, so waits and writes interleave on one event loop."""

    def __init__(self) -> None:
        self._store = TransferStore()  # its row payloads are ObjectRefs of batches, not field dicts

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method not in _FORWARDED:
            raise AttributeError(f"the transfer-store actor has no method {method!r}")
        return getattr(self._store, method)(*args, **kwargs)

    async def put(self, partition: str, keys: list[str], batch: list[ray.ObjectRef],
                  tags: Mapping[str, Mapping[str, Any]] | None, overwrite: bool) -> None:
        """Rows `keys`, whose fields are in the object `batch[0]` (a `{key: fields}` dict)."""
        [ref] = batch
        self._store._insert(partition, _prepare_rows(dict.fromkeys(keys, ref), tags, _as_is), overwrite)

    async def batch_refs(self, partition: str, keys: list[str]) -> tuple[list[ray.ObjectRef], list[int]]:
        """The distinct batch objects holding rows `keys`, and for each key the index of its batch."""
        refs = self._store._payloads(partition, keys)
        distinct = list(dict.fromkeys(refs))
        position = {ref: index for index, ref in enumerate(distinct)}
        return distinct, [position[ref] for ref in refs]

    async def wait_for(self, partition: str, predicate: Callable, timeout: float | None = None) -> Any:
        return await self._store.await_rows(partition, predicate, timeout)

    async def save(self, path: str) -> None:
        state = self._store._state()
        rows = [row for saved in state["partitions"].values() for row in saved["rows"].values()]
        refs = list(dict.fromkeys(row["fields"] for row in rows))
        batches = dict(zip(refs, await asyncio.gather(*refs)))
        for saved in state["partitions"].values():
            for key, row in saved["rows"].items():
                row["fields"] = _decoded(batches[row["fields"]][key])
        write_state(state, path)

    async def load(self, path: str) -> None:
        state = read_state(path)
        for saved in state["partitions"].values():
            if saved["rows"]:
                ref = ray.put({key: _encoded(key, row["fields"]) for key, row in saved["rows"].items()})
                for row in saved["rows"].values():
                    row["fields"] = ref
        self._store._restore(state, path)


class RayTransferStore:
    """Client of a transfer-store Ray actor; same contract as TransferStore (see the package docstring).

    Make one with `make_transfer_store("ray")`. In asyncio code use `aput`: the sync methods block
    the calling thread on `ray.get` (and `wait_for` refuses to run on an event loop's thread).
    """

    def __init__(self, actor: ray.actor.ActorHandle):
        self._actor = actor

    @classmethod
    def create(cls, num_cpus: float = 0, max_concurrency: int = 1000) -> RayTransferStore:
        """Start the actor (Ray must be initialised). `num_cpus=0` keeps it from taking a CPU slot."""
        if not ray.is_initialized():
            raise RuntimeError("the ray transfer store needs Ray running: call ray.init() first, "
                               "or use make_transfer_store(backend='local') in one process")
        actor = ray.remote(_TransferStoreActor).options(num_cpus=num_cpus, max_concurrency=max_concurrency)
        return cls(actor.remote())

    # ----------------------------------------------------------------- writes

    def put(self, partition: str, rows: Mapping[str, Mapping[str, Any]],
            tags: Mapping[str, Mapping[str, Any]] | None = None, *, overwrite: bool = False) -> None:
        keys, batch = _stage(rows)
        _unwrapped_get(self._actor.put.remote(partition, keys, [batch], tags, overwrite))

    async def aput(self, partition: str, rows: Mapping[str, Mapping[str, Any]],
                   tags: Mapping[str, Mapping[str, Any]] | None = None, *, overwrite: bool = False) -> None:
        """`put` for asyncio producers; the copy into the object store runs on the calling thread."""
        keys, batch = _stage(rows)
        await _unwrapped_await(self._actor.put.remote(partition, keys, [batch], tags, overwrite))

    def consume(self, partition: str, keys: Iterable[str]) -> None:
        return self._call("consume", partition, _listed(keys))

    def evict(self, partition: str, keys: Iterable[str], reason: str) -> None:
        return self._call("evict", partition, _listed(keys), reason)

    # ----------------------------------------------------------------- reads

    def get(self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None) -> TensorDict:
        keys = _key_list(keys)
        refs, positions = _unwrapped_get(self._actor.batch_refs.remote(partition, keys))
        try:
            batches = ray.get(refs)
        except ObjectLostError as error:
            raise StoreStateError(f"rows {_preview(keys)} of partition {partition!r} are lost from Ray's object "
                                  f"store ({type(error).__name__}): the process that put them exited while they "
                                  f"were live; evict them") from None
        rows = [_decoded(batches[position][key]) for position, key in zip(positions, keys)]
        return assemble_batch(partition, keys, rows, fields)

    def list(self, partition: str, where: TagFilter | None = None) -> dict[str, dict[str, Any]]:
        return self._call("list", partition, where)

    def stats(self, partition: str) -> PartitionStats:
        return self._call("stats", partition)

    def check_accounting(self, partition: str | None = None, *, require_drained: bool = False) -> None:
        return self._call("check_accounting", partition, require_drained=require_drained)

    def wait_for(self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any],
                 timeout: float | None = None) -> Any:
        """As TransferStore.wait_for; the predicate is pickled to the actor and runs there, so it must be
        a lambda/closure or a function of a module the actor's process can import."""
        refuse_to_block_event_loop("wait_for")
        return _unwrapped_get(self._actor.wait_for.remote(partition, predicate, timeout))

    # ----------------------------------------------------------------- persistence

    def save(self, path: str) -> None:
        return _unwrapped_get(self._actor.save.remote(str(path)))

    def load(self, path: str) -> None:
        return _unwrapped_get(self._actor.load.remote(str(path)))

    # ----------------------------------------------------------------- plumbing

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _unwrapped_get(self._actor.call.remote(method, *args, **kwargs))

    def __repr__(self) -> str:
        return f"RayTransferStore(actor={self._actor!r})"


def make_transfer_store(backend: Literal["local", "ray"] = "local", **ray_options: Any) -> TransferStore | RayTransferStore:
    """A transfer store: in-process (`"local"`) or a Ray actor (`"ray"`, options as RayTransferStore.create)."""
    if backend == "local":
        if ray_options:
            raise TypeError(f"options {sorted(ray_options)} only apply to backend='ray'")
        return TransferStore()
    if backend == "ray":
        return RayTransferStore.create(**ray_options)
    raise ValueError(f"unknown transfer-store backend {backend!r}; use 'local' (one process) or 'ray'")


# --------------------------------------------------------------------- payloads


def _stage(rows: Mapping[str, Mapping[str, Any]]) -> tuple[list[str], ray.ObjectRef]:
    """Check `rows` and put their payloads into the object store as one object; return its keys and ref."""
    check_rows_mapping(rows)
    for key in rows:
        parse_key(key)  # fail before copying any bytes
    return list(rows), ray.put({key: _encoded(key, fields) for key, fields in rows.items()})


def _encoded(key: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    check_fields(key, fields)
    pickled_objects(key, {name: value for name, value in fields.items() if not isinstance(value, torch.Tensor)})
    return {name: _tensor_bytes(value) if isinstance(value, torch.Tensor) else value for name, value in fields.items()}


def _tensor_bytes(tensor: torch.Tensor) -> _TensorBytes | torch.Tensor:
    tensor = tensor.detach()
    if tensor.layout is not torch.strided or tensor.is_nested:
        return tensor.cpu()  # sparse or nested: Ray pickles it whole (slow but correct)
    flat = tensor.cpu().contiguous().reshape(-1)
    return _TensorBytes(flat.view(torch.uint8).numpy(), tensor.dtype, tuple(tensor.shape))


def _decoded(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {name: _tensor(value) if isinstance(value, _TensorBytes) else value for name, value in fields.items()}


def _tensor(stored: _TensorBytes) -> torch.Tensor:
    """A read-only view of the stored bytes (zero-copy): copy it before writing to it."""
    return torch.from_numpy(stored.data).view(stored.dtype).reshape(stored.shape)


def _as_is(key: str, payload: Any) -> Any:
    return payload


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
