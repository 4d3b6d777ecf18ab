"""The transfer store as a Ray actor, behind a client with the same method names as TransferStore.

The actor is an async actor holding one `TransferStore`: every call runs on its event loop and
a `wait_for` becomes an `await_rows` there, so a long wait never blocks the puts that will end
it. `RayTransferStore` is the client: sync methods block on `ray.get`, `a*` methods await the
ObjectRef. The client is picklable (it holds only the actor handle), so one store can be handed
to agent-loop workers and the trainer alike. Errors raised in the actor come back as the
original exception (e.g. `DuplicateKeyError`), not wrapped in `RayTaskError`.

Paths given to `save` / `load` are read and written by the actor, on the node where it runs.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import ray
from ray.exceptions import RayTaskError
from tensordict import TensorDict

from core_v1.transfer_store.store import PartitionStats, TagFilter, TransferStore, refuse_to_block_event_loop

# Methods the actor forwards to its TransferStore ("wait_for" is served by await_rows instead).
_FORWARDED = frozenset({"put", "get", "list", "update_tags", "consume", "evict", "clear", "stats", "partitions",
                        "check_accounting", "save", "load"})


class _TransferStoreActor:
    """Ray actor body; an async actor, so waits and writes interleave on one event loop."""

    def __init__(self) -> None:
        self._store = TransferStore()

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if method not in _FORWARDED:
            raise AttributeError(f"the transfer-store actor has no method {method!r}")
        return getattr(self._store, method)(*args, **kwargs)

    async def wait_for(self, partition: str, predicate: Callable, timeout: float | None = None) -> Any:
        return await self._store.await_rows(partition, predicate, timeout)


class RayTransferStore:
    """Client of a transfer-store Ray actor; same contract as TransferStore (see the package docstring).

    Make one with `make_transfer_store("ray", ...)` or `RayTransferStore.create(...)`, or attach to
    a named store from another process with `RayTransferStore.connect(name)`. From asyncio code use
    the `a*` methods and `await_rows`: the sync ones block the calling thread on `ray.get`.
    """

    def __init__(self, actor: ray.actor.ActorHandle):
        self._actor = actor

    @classmethod
    def create(cls, name: str | None = None, namespace: str | None = None, get_if_exists: bool = False,
               num_cpus: float = 0, max_concurrency: int = 1000) -> RayTransferStore:
        """Start the actor (Ray must be initialised). `num_cpus=0` keeps it from taking a CPU slot."""
        if not ray.is_initialized():
            raise RuntimeError("the ray transfer store needs Ray running: call ray.init() first, "
                               "or use make_transfer_store(backend='local') in one process")
        options: dict[str, Any] = {"num_cpus": num_cpus, "max_concurrency": max_concurrency}
        if name is not None:
            options.update(name=name, namespace=namespace, get_if_exists=get_if_exists)
        return cls(ray.remote(_TransferStoreActor).options(**options).remote())

    @classmethod
    def connect(cls, name: str, namespace: str | None = None) -> RayTransferStore:
        """Attach to a named store started elsewhere in the cluster."""
        try:
            return cls(ray.get_actor(name, namespace=namespace))
        except ValueError:
            raise LookupError(f"no transfer-store actor named {name!r} in namespace {namespace!r}; start it with "
                              f"make_transfer_store('ray', name={name!r})") from None

    # ----------------------------------------------------------------- sync

    def put(self, partition: str, rows: Mapping[str, Mapping[str, Any]],
            tags: Mapping[str, Mapping[str, Any]] | None = None, *, overwrite: bool = False) -> None:
        return self._call("put", partition, rows, tags, overwrite=overwrite)

    def get(self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None) -> TensorDict:
        return self._call("get", partition, _listed(keys), fields)

    def list(self, partition: str, where: TagFilter | None = None) -> dict[str, dict[str, Any]]:
        return self._call("list", partition, where)

    def update_tags(self, partition: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        return self._call("update_tags", partition, updates)

    def consume(self, partition: str, keys: Iterable[str]) -> None:
        return self._call("consume", partition, _listed(keys))

    def evict(self, partition: str, keys: Iterable[str], reason: str) -> None:
        return self._call("evict", partition, _listed(keys), reason)

    def clear(self, partition: str, reason: str = "cleared") -> int:
        return self._call("clear", partition, reason)

    def stats(self, partition: str) -> PartitionStats:
        return self._call("stats", partition)

    def partitions(self) -> list[str]:
        return self._call("partitions")

    def check_accounting(self, partition: str | None = None, *, require_drained: bool = False) -> None:
        return self._call("check_accounting", partition, require_drained=require_drained)

    def wait_for(self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any],
                 timeout: float | None = None) -> Any:
        """As TransferStore.wait_for; the predicate is pickled to the actor and runs there, so it must be
        a lambda/closure or a function of a module the actor's process can import."""
        refuse_to_block_event_loop("wait_for")
        return _unwrapped_get(self._actor.wait_for.remote(partition, predicate, timeout))

    def save(self, path: str) -> None:
        return self._call("save", str(path))

    def load(self, path: str) -> None:
        return self._call("load", str(path))

    # ----------------------------------------------------------------- async

    async def aput(self, partition: str, rows: Mapping[str, Mapping[str, Any]],
                   tags: Mapping[str, Mapping[str, Any]] | None = None, *, overwrite: bool = False) -> None:
        return await self._acall("put", partition, rows, tags, overwrite=overwrite)

    async def aget(self, partition: str, keys: Sequence[str], fields: Sequence[str] | None = None) -> TensorDict:
        return await self._acall("get", partition, _listed(keys), fields)

    async def alist(self, partition: str, where: TagFilter | None = None) -> dict[str, dict[str, Any]]:
        return await self._acall("list", partition, where)

    async def aupdate_tags(self, partition: str, updates: Mapping[str, Mapping[str, Any]]) -> None:
        return await self._acall("update_tags", partition, updates)

    async def aconsume(self, partition: str, keys: Iterable[str]) -> None:
        return await self._acall("consume", partition, _listed(keys))

    async def aevict(self, partition: str, keys: Iterable[str], reason: str) -> None:
        return await self._acall("evict", partition, _listed(keys), reason)

    async def aclear(self, partition: str, reason: str = "cleared") -> int:
        return await self._acall("clear", partition, reason)

    async def astats(self, partition: str) -> PartitionStats:
        return await self._acall("stats", partition)

    async def await_rows(self, partition: str, predicate: Callable[[dict[str, dict[str, Any]]], Any],
                         timeout: float | None = None) -> Any:
        return await _unwrapped_await(self._actor.wait_for.remote(partition, predicate, timeout))

    # ----------------------------------------------------------------- plumbing

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return _unwrapped_get(self._actor.call.remote(method, *args, **kwargs))

    async def _acall(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return await _unwrapped_await(self._actor.call.remote(method, *args, **kwargs))

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
