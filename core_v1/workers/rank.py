"""One data-parallel training rank: the engines it holds, fed with rows from the transfer store.

A `RankWorker` runs in its own process (a Ray actor placed by `group.WorkerGroup`) or, for a
one-rank run, in the driver; the code is the same. With several ranks it joins the default
`torch.distributed` process group (gloo on CPU, nccl on GPUs), so its engines shard their models
with FSDP2 (`distributed.place_model`).

The driver never hands a rank tensors. It publishes a batch's rows to the store under fresh
keys and sends each rank the keys of its shard (`sharding.Shard`); the rank reads those rows,
runs the engine method, and writes per-row outputs (log-probs, values) back under the same keys
in the output partition. Only scalar metrics return through the call itself. The one exception
is a one-rank group, whose rank lives in the driver: it indexes its shard out of the batch and
returns its outputs directly (`run_in_process`), with the same rows in the same order.

Roles are `actor`, `ref` and `critic`; by default they are `core_v1.workers`' engines. A run
that names a V0 worker class (`trainer.v1.worker_class`) gets the roles from that class's
adapter instead (`build_roles`), which is how a V0 `ActorRolloutRefWorker` subclass runs here.
"""

from __future__ import annotations

import datetime
import os
import socket
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.distributed as dist
from tensordict import TensorDict

from core_v1.checkpoint_engine.base import bucket_tensors
from core_v1.checkpoint_engine.broadcast import host_address
from core_v1.config.schema import PPOConfig
from core_v1.transfer_store import take_rows
from core_v1.workers import distributed
from core_v1.workers.lora import merged_weights
from core_v1.workers.sharding import Shard

INPUT_PARTITION = "worker_inputs"
OUTPUT_PARTITION = "worker_outputs"


def build_roles(config: PPOConfig, device: torch.device) -> dict[str, Any]:
    """`{"actor": ..., "ref": ..., "critic": ...}` (only those the run uses), built in that order
    after seeding torch, so every rank and every world size starts from the same weights."""
    torch.manual_seed(config.trainer.seed)
    worker_class = config.trainer.v1.worker_class
    if worker_class:
        return _worker_class_roles(config, worker_class, device)
    from core_v1.workers import ActorEngine, CriticEngine, ReferenceEngine

    roles: dict[str, Any] = {"actor": ActorEngine(config, device=device)}
    if config.use_reference_policy:
        roles["ref"] = ReferenceEngine(config, device=device, actor=roles["actor"])  # a LoRA actor's base
    if config.use_critic:
        roles["critic"] = CriticEngine(config, device=device)
    return roles


def _worker_class_roles(config: PPOConfig, spec: str, device: torch.device) -> dict[str, Any]:
    """Roles from a user's worker class, built by the adapter the class names (see
    `core_v1.workers.worker_class`), so core_v1 reaches the V0 layer only through the user's class."""
    from core_v1.workers.worker_class import load_worker_class

    worker_cls, adapter = load_worker_class(spec)
    return adapter(worker_cls, config, device)


class RankWorker:
    """One rank; see the module docstring. Construct, then `setup(address)` on every rank at once."""

    def __init__(self, config: PPOConfig, store: Any, rank: int, world_size: int, device_type: str):
        self.config = config
        self.store = store
        self.rank = rank
        self.world_size = world_size
        self.device_type = device_type
        self.roles: dict[str, Any] = {}

    # ------------------------------------------------------------------------------ start-up
    def rendezvous_address(self) -> tuple[str, int]:
        """Rank 0's reachable address and a free port for the process group."""
        host = host_address()
        with socket.socket() as sock:
            sock.bind(("", 0))
            return host, sock.getsockname()[1]

    def setup(self, address: Optional[tuple[str, int]]) -> dict:
        """Join the process group (several ranks), build the roles; returns where this rank runs."""
        if self.world_size > 1:
            host, port = address
            backend = "nccl" if self.device_type == "cuda" else "gloo"
            dist.init_process_group(backend, init_method=f"tcp://{host}:{port}", rank=self.rank,
                                    world_size=self.world_size,
                                    timeout=datetime.timedelta(seconds=self.config.actor_rollout_ref.nccl_timeout))
        self.roles = build_roles(self.config, self._device())
        return {"rank": self.rank, "pid": os.getpid(), "host": host_address(), "device": str(self._device()),
                "roles": list(self.roles)}

    def _device(self) -> torch.device:
        if self.device_type == "cuda":
            # Ray gives each rank actor one GPU (CUDA_VISIBLE_DEVICES), which torch sees as cuda:0.
            torch.cuda.set_device(0)
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # ------------------------------------------------------------------------- batch methods
    def run(self, role: str, method: str, shard: Shard, keys: Sequence[str], outputs: Sequence[str],
            train: bool, kwargs: dict) -> dict:
        """Read this rank's rows, call `roles[role].method(batch, **kwargs)`, write `outputs` back.

        A method returning a tensor (or a tuple of them, None allowed) has its rows written to the
        output partition under `outputs`' names; one returning a dict returns it as metrics.
        """
        tensors, metrics = self._call_engine(role, method, self._read_shard(shard, keys, train), outputs, kwargs)
        if tensors:
            self._write_outputs(shard, keys, tensors)
        return metrics

    def run_in_process(self, role: str, method: str, shard: Shard, batch: TensorDict, outputs: Sequence[str],
                       train: bool, kwargs: dict) -> tuple[dict[str, torch.Tensor], dict]:
        """`run` for the rank that lives in the driver: the shard is indexed out of the driver's batch
        instead of being put into the store and read back, which would copy and pickle every row
        twice to arrive at the same rows in the same order. The engine gets new tensors and a
        TensorDict of its own; its Python objects are the caller's (engines only read them).
        Returns `(outputs, metrics)`: each output as a `[B, ...]` CPU tensor in the batch's row
        order, as `WorkerGroup.run` reads them back from the store."""
        shard_batch = take_rows(batch, shard.rows)  # new tensors and TensorDict: the caller's stay as they are
        tensors, metrics = self._call_engine(role, method, self._mask_padding(shard_batch, shard, train), outputs,
                                             kwargs)
        in_order = {name: _in_batch_order(tensor.detach().cpu(), shard, len(batch)) for name, tensor in tensors.items()}
        return in_order, metrics

    def _call_engine(self, role: str, method: str, batch: TensorDict, outputs: Sequence[str],
                     kwargs: dict) -> tuple[dict[str, torch.Tensor], dict]:
        """`({output name: tensor}, metrics)` of `roles[role].method(batch, **kwargs)`."""
        result = getattr(self.roles[role], method)(batch, **kwargs)
        metrics = self._drain_metrics(role)
        if isinstance(result, dict):
            return {}, {**result, **metrics}
        tensors = result if isinstance(result, tuple) else (result,)
        return {name: tensor for name, tensor in zip(outputs, tensors) if tensor is not None}, metrics

    def _read_shard(self, shard: Shard, keys: Sequence[str], train: bool) -> TensorDict:
        unique = sorted(set(shard.rows))
        position = {row: i for i, row in enumerate(unique)}
        rows = self.store.get(INPUT_PARTITION, [keys[row] for row in unique])
        return self._mask_padding(take_rows(rows, [position[row] for row in shard.rows]), shard, train)

    @staticmethod
    def _mask_padding(batch: TensorDict, shard: Shard, train: bool) -> TensorDict:
        if train and any(shard.padding) and "response_mask" in batch.keys():
            # A padding row only keeps the ranks in step: masked out, it adds nothing to a loss.
            keep = torch.tensor([not pad for pad in shard.padding], dtype=batch["response_mask"].dtype)
            batch["response_mask"] = batch["response_mask"] * keep[:, None]
        return batch

    def _write_outputs(self, shard: Shard, keys: Sequence[str], tensors: dict[str, torch.Tensor]) -> None:
        rows = {}
        for position, (row, pad) in enumerate(zip(shard.rows, shard.padding)):
            if not pad:
                rows[keys[row]] = {name: tensor[position].clone() for name, tensor in tensors.items()}
        if rows:
            self.store.put(OUTPUT_PARTITION, rows)

    def _drain_metrics(self, role: str) -> dict:
        drain = getattr(self.roles[role], "drain_metrics", None)
        # Each rank measured its own shard; every rank reports the same names (one role class).
        return distributed.mean_over_ranks(drain()) if drain is not None else {}

    # ------------------------------------------------------------------------ every-rank calls
    def call(self, role: str, method: str, *args: Any) -> Any:
        """`roles[role].method(*args)` on this rank (every rank runs it: checkpoints are collectives)."""
        return getattr(self.roles[role], method)(*args)

    def weight_buckets(self, role: str, bucket_bytes: int) -> Iterator[Optional[list[tuple[str, torch.Tensor]]]]:
        """The role's full weights, gathered from the shards one bucket at a time.

        Every rank must iterate (each gather is a collective); rank 0 yields the buckets on CPU,
        the others yield None in step with it.
        """
        model = self.roles[role].model
        # A LoRA model's adapters are merged into copies of the base weights (the engines serve full models).
        for bucket in bucket_tensors(merged_weights(distributed.iter_full_tensors(model), model), bucket_bytes):
            yield [(name, tensor.cpu()) for name, tensor in bucket] if self.rank == 0 else None

    def shutdown(self) -> None:
        if self.world_size > 1 and dist.is_initialized():
            dist.destroy_process_group()


def _in_batch_order(tensor: torch.Tensor, shard: Shard, batch_rows: int) -> torch.Tensor:
    """A shard's per-row output (row i belongs to batch row `shard.rows[i]`) in the batch's row order,
    padding rows dropped; a new tensor, as the store would return it."""
    position = {row: i for i, (row, pad) in enumerate(zip(shard.rows, shard.padding)) if not pad}
    return tensor.index_select(0, torch.tensor([position[row] for row in range(batch_rows)], device=tensor.device))
