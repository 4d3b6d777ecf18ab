"""One data-parallel training rank: the engines it holds, fed with rows from the transfer store.

A `RankWorker` runs in its own process (a Ray actor placed by `group.WorkerGroup`) or, for a
one-rank run, in the driver; the code is the same. With several ranks it joins the default
`torch.distributed` process group (gloo on CPU, nccl on GPUs), so its engines shard their models
with FSDP2 (`distributed.place_model`).

The driver never hands a rank tensors. It sends each rank a `RankTask`: the keys of its shard's rows
in the transfer store (padding rows repeat a real one), the per-token fields to read beside the
trajectory's own, and any per-row scalars (an outcome advantage); the rank reads those rows, pads
them itself (`core_v1.batch.layout.read_training_batch`), runs the engine method, and writes its
per-token outputs (log-probs, values) back onto the same rows (`store.add_fields`). Only scalar
metrics and per-row summaries of the outputs return through the call. A one-rank group's rank lives
in the driver and does exactly the same.

Roles are `actor`, `ref` and `critic`; by default they are `core_v1.workers`' engines. A run
that names a V0 worker class (`trainer.v1.worker_class`) gets the roles from that class's
adapter instead (`build_roles`), which is how a V0 `ActorRolloutRefWorker` subclass runs here.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import socket
from typing import Any, Callable, Iterator, Optional, Sequence

import torch
import torch.distributed as dist
from tensordict import TensorDict

from core_v1.checkpoint_engine.base import bucket_tensors
from core_v1.checkpoint_engine.broadcast import host_address
from core_v1.config.schema import PPOConfig
from core_v1.batch.held import RowHolder
from core_v1.batch.layout import read_training_batch, response_lengths, with_columns, write_response_fields
from core_v1.batch.meta import row_summaries
from core_v1.workers import distributed
from core_v1.workers.distillation import teacher_roles
from core_v1.workers.lora import merged_weights
from core_v1.workers.model import row_input_fields


@dataclasses.dataclass(frozen=True)
class RankTask:
    """One rank's part of a role call (see the module docstring); `keys[i]` is a padding row when
    `padding[i]`, and `per_row[name][i]` is row i's scalar."""

    role: str
    method: str
    partition: str
    keys: list[str]
    padding: tuple[bool, ...]
    fields: tuple[str, ...] = ()
    per_row: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    train: bool = False
    pad_token_id: int = 0
    row_totals: tuple[str, ...] = ()  # `run_stage`: fields whose per-row total (unmasked) comes back too


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
    roles.update(teacher_roles(config, device))  # last: loading them draws no seed the others use
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
        self.row_inputs: tuple[str, ...] = ()  # set by `setup` from the roles' models
        self.rows = RowHolder(store)  # the batch this rank read, kept across a step's stages

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
            dist.init_process_group(
                backend,
                init_method=f"tcp://{host}:{port}",
                rank=self.rank,
                world_size=self.world_size,
                timeout=datetime.timedelta(seconds=self.config.actor_rollout_ref.nccl_timeout),
            )
        self.roles = build_roles(self.config, self._device())
        # Per-row model inputs every batch of these roles reads too (a vision-language model's images).
        self.row_inputs = tuple(
            dict.fromkeys(
                field for role in self.roles.values() for field in row_input_fields(getattr(role, "model", None))
            )
        )
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "host": host_address(),
            "device": str(self._device()),
            "roles": list(self.roles),
        }

    def _device(self) -> torch.device:
        if self.device_type == "cuda":
            # Ray gives each rank actor one GPU (CUDA_VISIBLE_DEVICES), which torch sees as cuda:0.
            torch.cuda.set_device(0)
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    # ------------------------------------------------------------------------- batch methods
    def run(self, task: RankTask, kwargs: dict) -> tuple[dict, dict[str, list]]:
        """Read this rank's rows, call `roles[role].method(batch, **kwargs)`, write `outputs` back.

        A method returning a tensor (or a tuple of them, None allowed) has its rows written onto
        the store rows under `outputs`' names; one returning a dict returns it as metrics.
        Returns `(metrics, per-row summaries of the outputs)`, in the task's row order.
        """
        batch = self.rows.read(
            task.partition,
            task.keys,
            pad_token_id=task.pad_token_id,
            fields=(*task.fields, *self.row_inputs),
            per_row=task.per_row,
        )
        batch = self._mask_padding(batch, task.padding, task.train)
        tensors, metrics = self._call_engine(task.role, task.method, batch, task.outputs, kwargs)
        if not tensors:
            return metrics, {}
        tensors = {name: tensor.detach().cpu() for name, tensor in tensors.items()}
        real = [row for row, pad in enumerate(task.padding) if not pad]
        lengths = response_lengths(batch)
        written = {name: t[real] for name, t in tensors.items()}
        keys = [task.keys[row] for row in real]
        write_response_fields(self.store, task.partition, keys, [lengths[row] for row in real], written, wait=False)
        self.rows.wrote(task.partition, keys, written)
        self._send_writes()
        return metrics, _with_rollout_gap(row_summaries(tensors, batch["response_mask"]), tensors, batch)

    def run_stage(self, task: RankTask, stage: Callable, columns: dict, kwargs: dict) -> tuple[dict, dict, dict]:
        """Run a PPO stage function `stage(batch, metrics, **kwargs) -> batch` over all of `task`'s rows
        (a token-level step the driver decides but should not hold the tensors of: a token-level
        advantage estimator, rollout correction): read the rows with `columns` as the stage takes them,
        write the stage's `outputs` back onto them. Returns `(metrics, per-row summaries and sums,
        kwargs)`: the keyword objects come back, as a stateful one (a KL controller) left them."""
        result = run_stage_on_rows(self.store, task, stage, columns, kwargs, self.rows)
        self._send_writes()
        return result

    def _send_writes(self) -> None:
        """A rank writes without waiting for the store's reply (`wait=False`): its next store call
        carries the writes. A rank in its own process sends them before it returns, since the
        driver's next call may be another process's read of them; a one-rank group's rank shares
        the driver's store client, whose next call (its own next read, or the driver's) carries them."""
        if self.world_size > 1:
            self.store.flush()

    def _call_engine(
        self, role: str, method: str, batch: TensorDict, outputs: Sequence[str], kwargs: dict
    ) -> tuple[dict[str, torch.Tensor], dict]:
        """`({output name: tensor}, metrics)` of `roles[role].method(batch, **kwargs)`."""
        result = getattr(self.roles[role], method)(batch, **kwargs)
        metrics = self._drain_metrics(role)
        if isinstance(result, dict):
            return {}, {**result, **metrics}
        tensors = result if isinstance(result, tuple) else (result,)
        return {name: tensor for name, tensor in zip(outputs, tensors) if tensor is not None}, metrics

    @staticmethod
    def _mask_padding(batch: TensorDict, padding: Sequence[bool], train: bool) -> TensorDict:
        if train and any(padding) and "response_mask" in batch.keys():
            # A padding row only keeps the ranks in step: masked out, it adds nothing to a loss.
            keep = torch.tensor([not pad for pad in padding], dtype=batch["response_mask"].dtype)
            batch["response_mask"] = batch["response_mask"] * keep[:, None]
        return batch

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


def run_stage_on_rows(
    store: Any, task: RankTask, stage: Callable, columns: dict, kwargs: dict, rows: Optional[RowHolder] = None
) -> tuple[dict, dict, dict]:
    """`RankWorker.run_stage`'s work, in whatever process holds `store`'s client (and the rank's
    kept batch `rows`, if any)."""
    read = dict(pad_token_id=task.pad_token_id, fields=task.fields, per_row=task.per_row)
    if rows is None:
        batch = read_training_batch(store, task.partition, task.keys, **read)
    else:
        batch = rows.read(task.partition, task.keys, **read)
    batch = with_columns(batch, columns)
    metrics: dict = {}
    batch = stage(batch, metrics, **kwargs)
    outputs = {name: batch[name] for name in task.outputs if name in batch.keys()}
    lengths = response_lengths(batch)
    write_response_fields(store, task.partition, task.keys, lengths, outputs, overwrite=True, wait=False)
    if rows is not None:
        rows.wrote(task.partition, task.keys, outputs)
    summaries = row_summaries(outputs, batch["response_mask"])
    summaries.update(
        {f"{name}/row_total": batch[name].sum(-1).tolist() for name in task.row_totals if name in batch.keys()}
    )
    return metrics, summaries, kwargs


def _with_rollout_gap(
    summaries: dict[str, list], tensors: dict[str, torch.Tensor], batch: TensorDict
) -> dict[str, list]:
    """Add each row's summed |old - rollout| log-prob gap over its model tokens: the driver reports
    the batch's mean gap (`training/rollout_actor_logprob_diff/mean`) without the tensors."""
    if "old_log_probs" in tensors and "rollout_log_probs" in batch.keys():
        gap = (tensors["old_log_probs"] - batch["rollout_log_probs"]).abs() * batch["response_mask"].bool()
        summaries["rollout_logprob_gap/sum"] = gap.sum(-1).tolist()
    return summaries
