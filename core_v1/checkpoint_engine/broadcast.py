"""`nccl` (GPU) and `gloo` (CPU): weight sync by broadcast over a torch.distributed process group.

The trainer process is rank 0; each rollout replica joins as rank 1..N. The group is built on
the first sync: the trainer opens a TCP store on a free port (the OS picks it; `master_port`
pins it), tells every replica to join (`LLMServer.join_weight_group`), and each replica takes
its rank from an atomic counter in that store. This works wherever the replicas run -- Ray
actors on this or other nodes, or servers in this process -- because nothing but the store
address travels, and it does not touch the default process group that FSDP training may use.

A sync sends the weights in buckets of at most `update_weights_bucket_megabytes`: the layout
of every bucket (names, dtypes, shapes, byte offsets) goes to the replicas with the
`receive_weights` call, then each bucket travels as one flat byte tensor, so the sender holds
one extra bucket at a time. A replica stages what it receives and loads all of it in one engine
command, so no token is ever sampled from half-updated weights and the version tag is exact.
`gloo` moves CPU tensors (it stages CUDA weights through host memory); `nccl` moves CUDA tensors
and needs every replica on a GPU other than the trainer's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import time
from typing import Any, Iterable, Optional

import torch
import torch.distributed as dist

from core_v1.checkpoint_engine.base import CheckpointEngine, bucket_tensors, register_checkpoint_backend
from core_v1.config.schema import ConfigError

_ALIGNMENT = 64  # byte offsets inside a bucket, so every received tensor is a view, not a copy
_RANK_COUNTER = "next_replica_rank"


class WeightBroadcastError(RuntimeError):
    """The weight broadcast could not be set up or was used out of order."""


@dataclasses.dataclass(frozen=True)
class WeightGroupSpec:
    """Where and how a replica joins the trainer's weight-broadcast group."""

    host: str
    port: int
    world_size: int
    backend: str  # "gloo" | "nccl"
    name: str  # prefixes the store keys, so several groups can share a store
    timeout_s: float = 600.0


@dataclasses.dataclass(frozen=True)
class TensorSlot:
    """One tensor's place inside a bucket's byte buffer."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    offset: int
    nbytes: int


@dataclasses.dataclass(frozen=True)
class BucketLayout:
    nbytes: int
    slots: tuple[TensorSlot, ...]


def layout_bucket(bucket: list[tuple[str, torch.Tensor]]) -> BucketLayout:
    """Byte offsets (aligned to 64) of each tensor of `bucket` in one flat buffer."""
    slots, offset = [], 0
    for name, tensor in bucket:
        nbytes = tensor.numel() * tensor.element_size()
        slots.append(TensorSlot(name, tensor.dtype, tuple(tensor.shape), offset, nbytes))
        offset += -(-nbytes // _ALIGNMENT) * _ALIGNMENT
    return BucketLayout(offset, tuple(slots))


def pack_bucket(
    bucket: list[tuple[str, torch.Tensor]],
    layout: BucketLayout,
    device: torch.device,
    buffer: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The bucket's tensors copied into one flat byte buffer (`buffer`, reused, when given)."""
    if buffer is None:
        buffer = torch.empty(layout.nbytes, dtype=torch.uint8, device=device)
    for (_, tensor), slot in zip(bucket, layout.slots):
        flat = tensor.detach().contiguous().reshape(-1).view(torch.uint8)
        buffer[slot.offset : slot.offset + slot.nbytes].copy_(flat)
    return buffer


class BufferPool:
    """One flat byte buffer per bucket position, kept across syncs. Allocating (and first touching)
    a fresh bucket-sized buffer every sync costs as much as the copy into it; the layout of the
    weights does not change between syncs, so neither do the buffers. Host buffers that stage CUDA
    weights are pinned, so the copies between device and host run at full speed."""

    def __init__(self, device: torch.device, pin: bool = False):
        self.device, self.pin = device, pin
        self._buffers: list[torch.Tensor] = []

    def get(self, index: int, nbytes: int) -> torch.Tensor:
        while len(self._buffers) <= index:
            self._buffers.append(torch.empty(0, dtype=torch.uint8, device=self.device))
        if self._buffers[index].numel() != nbytes:
            self._buffers[index] = torch.empty(
                nbytes, dtype=torch.uint8, device=self.device, pin_memory=self.pin and self.device.type == "cpu"
            )
        return self._buffers[index]


def unpack_bucket(buffer: torch.Tensor, layout: BucketLayout) -> list[tuple[str, torch.Tensor]]:
    """Views of `buffer` as the bucket's tensors (no copy)."""
    return [
        (slot.name, buffer[slot.offset : slot.offset + slot.nbytes].view(slot.dtype).view(slot.shape))
        for slot in layout.slots
    ]


def _process_group(backend: str, store: Any, rank: int, world_size: int, timeout_s: float) -> Any:
    """A process group of its own (not the default one) over `store`; blocks until all ranks join."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    if backend == "nccl":  # only CUDA builds of torch have it
        return dist.ProcessGroupNCCL(store, rank, world_size)
    raise WeightBroadcastError(f"unknown broadcast backend {backend!r}; use gloo or nccl")


def wire_device(backend: str) -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")


class WeightReceiver:
    """The replica side: joins the group described by `spec` and receives broadcasts from rank 0.

    Construction blocks until every member has joined (run it off the event loop)."""

    def __init__(self, spec: WeightGroupSpec):
        timeout = datetime.timedelta(seconds=spec.timeout_s)
        store = dist.TCPStore(spec.host, spec.port, spec.world_size, is_master=False, timeout=timeout)
        self.rank = int(store.add(f"{spec.name}/{_RANK_COUNTER}", 1))
        if not 1 <= self.rank < spec.world_size:
            raise WeightBroadcastError(
                f"weight group {spec.name!r} already has {spec.world_size - 1} replicas; "
                "a replica joined twice or the group is stale"
            )
        self.device = wire_device(spec.backend)
        # Reusing buffers is safe: the server loads a sync's tensors into the model before it
        # accepts the next sync.
        self.buffers = BufferPool(self.device, pin=torch.cuda.is_available())
        self.group = _process_group(
            spec.backend, dist.PrefixStore(spec.name, store), self.rank, spec.world_size, spec.timeout_s
        )
        self._store = store  # the group keeps using it

    def receive(self, plan: list[BucketLayout]) -> list[tuple[str, torch.Tensor]]:
        """Receive every bucket of one sync; returns (name, tensor) views of the received buffers."""
        named: list[tuple[str, torch.Tensor]] = []
        for index, layout in enumerate(plan):
            buffer = self.buffers.get(index, layout.nbytes)
            self.group.broadcast(buffer, 0).wait()
            named.extend(unpack_bucket(buffer, layout))
        return named

    def close(self) -> None:
        self.group = None
        self._store = None


class BroadcastCheckpointEngine(CheckpointEngine):
    """Rank 0 of the weight group: see the module docstring. `backend` is set by the subclasses."""

    backend = ""

    def __init__(self, config: Any):
        super().__init__(config)
        if self.backend == "nccl" and not torch.cuda.is_available():
            raise ConfigError("actor_rollout_ref.rollout.checkpoint_engine.backend=nccl needs GPUs; on CPU use gloo")
        self.master_port = getattr(config, "master_port", None) or 0
        self.timeout_s = float(getattr(config, "timeout_s", 600.0))
        self._group: Optional[Any] = None
        self._store: Optional[Any] = None
        self._buffers = BufferPool(
            wire_device(self.backend) if self.backend else torch.device("cpu"), pin=torch.cuda.is_available()
        )
        self._last: Optional[tuple[list[BucketLayout], int]] = None  # the plan and version the buffers hold
        self.num_replicas = 0

    async def sync(self, named_tensors: Iterable[tuple[str, torch.Tensor]], rollout_client: Any, version: int) -> dict:
        start = time.perf_counter()
        buckets = list(bucket_tensors(named_tensors, self.bucket_bytes))
        plan = [layout_bucket(bucket) for bucket in buckets]
        # A group holds the replicas alive when it formed: a replica lost since then (or during this
        # broadcast, which then fails) means a new group of the live ones and sending again.
        if self._group is None or rollout_client.num_replicas != self.num_replicas:
            await self._connect(rollout_client)
        self._last = None
        try:
            await self._broadcast(buckets, plan, rollout_client, version)
        except Exception:  # most likely a member died: once more, with the members there are now
            await self._connect(rollout_client)
            await self._broadcast(buckets, plan, rollout_client, version)
        self._last = (plan, version)
        return {
            "weight_sync/bytes": sum(layout.nbytes for layout in plan),
            "weight_sync/buckets": len(plan),
            "timing_s/weight_sync": time.perf_counter() - start,
        }

    async def resend(self, rollout_client: Any, index: int) -> bool:
        """Regroup (the restarted replica is a new member) and broadcast the last sync again from
        the pooled buffers, which still hold it packed; every member loads the same weights again."""
        if self._last is None:
            return False
        plan, version = self._last
        await self._connect(rollout_client)
        await self._broadcast(None, plan, rollout_client, version)
        return True

    async def _broadcast(
        self, buckets: Optional[list], plan: list[BucketLayout], rollout_client: Any, version: int
    ) -> None:
        receiving = asyncio.ensure_future(rollout_client.call_all("receive_weights", plan, version))
        try:
            await asyncio.to_thread(self._send, buckets, plan)
        except BaseException:
            receiving.cancel()
            raise
        await receiving

    async def _connect(self, rollout_client: Any) -> None:
        # Every member must join before the group forms: wait for replicas being restarted.
        self.num_replicas = await rollout_client.wait_until_up()
        world_size = self.num_replicas + 1
        timeout = datetime.timedelta(seconds=self.timeout_s)
        host = host_address()
        store = dist.TCPStore(
            host, self.master_port, world_size, is_master=True, timeout=timeout, wait_for_workers=False
        )
        spec = WeightGroupSpec(host, store.port, world_size, self.backend, f"weights-{time.time_ns()}", self.timeout_s)
        joining = asyncio.ensure_future(rollout_client.call_all("join_weight_group", spec))
        try:
            group = await asyncio.to_thread(
                _process_group, self.backend, dist.PrefixStore(spec.name, store), 0, world_size, self.timeout_s
            )
        except BaseException:
            joining.cancel()
            raise
        await joining
        self._group, self._store = group, store

    def _send(self, buckets: Optional[list[list[tuple[str, torch.Tensor]]]], plan: list[BucketLayout]) -> None:
        """Pack each bucket into its pooled buffer and broadcast it (`buckets=None`: the buffers
        already hold the packed weights, from the last sync)."""
        device = wire_device(self.backend)
        for index, layout in enumerate(plan):
            buffer = self._buffers.get(index, layout.nbytes)
            if buckets is not None:
                pack_bucket(buckets[index], layout, device, buffer)
            self._group.broadcast(buffer, 0).wait()

    def close(self) -> None:
        self._group = None
        self._store = None


@register_checkpoint_backend("gloo")
class GlooCheckpointEngine(BroadcastCheckpointEngine):
    backend = "gloo"


@register_checkpoint_backend("nccl")
class NcclCheckpointEngine(BroadcastCheckpointEngine):
    backend = "nccl"


def host_address() -> str:
    """An address the replicas can reach: this node's IP in a Ray cluster, else loopback."""
    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return "127.0.0.1"
