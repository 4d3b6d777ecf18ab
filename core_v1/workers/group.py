"""The training worker group: `trainer.nnodes x trainer.n_gpus_per_node` ranks, and the handles the
trainer uses on them.

Placement: one rank per GPU (`trainer.device=cuda`) or per CPU slot (`trainer.device=cpu`, gloo).
A group of one rank runs its `RankWorker` in the driver process; a larger one starts one Ray
actor per rank, placed by a placement group of one bundle per rank (`{"GPU": 1, "CPU": 1}` or
`{"CPU": 1}`, packed onto as few nodes as fit), and every rank holds all the roles the run uses
(actor, reference, critic), as verl's colocated workers do: one process per rank, not per role.

The trainer sees `ActorHandle`, `ReferenceHandle` and `CriticHandle`, which keep the engines'
method names (`compute_log_prob`, `update_policy`, `compute_values`, ...), so a PPO stage reads the
same whether one rank or many do the work. A call takes the step's `BatchMeta` (keys and per-row
scalars, `core_v1.batch.meta`), never tensors: each rank gets the keys of its shard
(`sharding.shard_rows`, mini-batch by mini-batch, balanced by tokens under `trainer.balance_batch`)
and any per-row scalars the method needs (an outcome advantage), reads its rows' fields from the
transfer store, pads them itself, runs the engine, and writes its per-token outputs back onto the
same rows; the call returns per-row summaries of those outputs and the metrics. A one-rank group
runs its rank in the driver process and takes the very same path (its store reads are local).
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Optional, Sequence

import torch

from core_v1.config.schema import ConfigError, FSDPConfig, PPOConfig
from core_v1.batch.meta import BatchMeta
from core_v1.device import share_cores_with_the_replicas
from core_v1.workers import distributed
from core_v1.workers.distillation import distillation_loss_of, route_rows, teacher_models, teacher_role
from core_v1.workers.rank import RankTask, RankWorker
from core_v1.workers.sharding import Shard, shard_rows

PLACEMENT_TIMEOUT_S = 120.0


def world_size_of(config: PPOConfig) -> int:
    return int(config.trainer.nnodes) * int(config.trainer.n_gpus_per_node)


def rank_bundle(device: str) -> dict[str, float]:
    """The resources one rank takes (its placement-group bundle)."""
    return {"GPU": 1.0, "CPU": 1.0} if device == "cuda" else {"CPU": 1.0}


def check_layout(config: PPOConfig) -> None:
    """Refuse a rank layout the group cannot build (ConfigError), before anything starts."""
    if world_size_of(config) < 1:
        raise ConfigError(f"trainer.nnodes x trainer.n_gpus_per_node = {world_size_of(config)}; it must be at least 1")
    refuse_sequence_parallelism(config)
    teachers = config.distillation.enabled  # placed with the reference's sharding
    built = {
        "actor_rollout_ref.actor.fsdp_config": True,
        "actor_rollout_ref.ref.fsdp_config": config.use_reference_policy or teachers,
        "critic.fsdp": config.use_critic,
    }
    for key, fsdp in fsdp_sections(config):
        if built[key]:
            distributed.mesh_shape(fsdp.fsdp_size, world_size_of(config), f"{key}.fsdp_size")


def fsdp_sections(config: PPOConfig) -> tuple[tuple[str, FSDPConfig], ...]:
    aro = config.actor_rollout_ref
    return (
        ("actor_rollout_ref.actor.fsdp_config", aro.actor.fsdp_config),
        ("actor_rollout_ref.ref.fsdp_config", aro.ref.fsdp_config),
        ("critic.fsdp", config.critic.fsdp),
    )


def refuse_sequence_parallelism(config: PPOConfig) -> None:
    """Ulysses sequence parallelism is not built; a run that asks for it stops rather than ignore it."""
    for key, fsdp in fsdp_sections(config):
        if fsdp.ulysses_sequence_parallel_size != 1:
            raise ConfigError(
                f"{key}.ulysses_sequence_parallel_size={fsdp.ulysses_sequence_parallel_size}: Ulysses "
                "sequence parallelism is not supported; set it to 1 (ranks split the batch, not sequences)"
            )


class WorkerGroup:
    """The ranks of one run; see the module docstring."""

    def __init__(self, config: PPOConfig, store: Any, device: str, pad_token_id: int = 0):
        self.config = config
        self.store = store
        self.device = device
        self.pad_token_id = pad_token_id
        self.world_size = world_size_of(config)
        check_layout(config)
        self._placement_group = None
        self._local: Optional[RankWorker] = None
        self._actors: list[Any] = []
        self.placement = self._start()

    # ------------------------------------------------------------------------------ start-up
    def _start(self) -> list[dict]:
        if self.world_size == 1:  # the rank trains in the driver, beside the replicas on its machine
            share_cores_with_the_replicas(self.config)
            self._local = RankWorker(self.config, self.store, 0, 1, self.device)
            return [self._local.setup(None)]
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = rank_bundle(self.device)
        self._placement_group = placement_group([bundle] * self.world_size, strategy="PACK")
        ready, _ = ray.wait([self._placement_group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            raise ConfigError(
                f"cannot place {self.world_size} training ranks of {bundle} each "
                f"(trainer.nnodes x trainer.n_gpus_per_node) on this Ray cluster "
                f"({ray.available_resources()} free); lower trainer.n_gpus_per_node or add nodes"
            )
        worker_cls = ray.remote(RankWorker)
        for rank in range(self.world_size):
            strategy = PlacementGroupSchedulingStrategy(
                placement_group=self._placement_group, placement_group_bundle_index=rank
            )
            self._actors.append(
                worker_cls.options(
                    num_cpus=bundle["CPU"],
                    num_gpus=bundle.get("GPU", 0),
                    scheduling_strategy=strategy,
                    runtime_env={"env_vars": {"OMP_NUM_THREADS": str(int(bundle["CPU"]))}},
                ).remote(self.config, self.store, rank, self.world_size, self.device)
            )
        address = _get(self._actors[0].rendezvous_address.remote())
        return _get([actor.setup.remote(address) for actor in self._actors])

    @property
    def roles(self) -> list[str]:
        return self.placement[0]["roles"]

    def layout(self) -> dict:
        """Where the ranks run, in the shape of the dry-run plan's `training_placement`."""
        in_driver = all(rank["pid"] == os.getpid() for rank in self.placement)
        return {
            "ranks": len(self.placement),
            "device": torch.device(self.placement[0]["device"]).type,
            "roles": self.roles,
            "in_driver": in_driver,
            "bundle": None if in_driver else rank_bundle(self.device),
        }

    # -------------------------------------------------------------------------- dispatching
    def run(
        self,
        role: str,
        method: str,
        meta: BatchMeta,
        *,
        fields: Sequence[str] = (),
        per_row: Optional[dict[str, Sequence[float]]] = None,
        outputs: Sequence[str] = (),
        mini_batch_rows: Optional[int] = None,
        train: bool = False,
        **kwargs: Any,
    ) -> tuple[dict, dict]:
        """Run `role.method` over the rows of `meta` on every rank (each on its shard, read from the store
        with the per-token `fields` earlier stages wrote, and `per_row` scalars spread over each row's
        response); the method's tensor results are written onto the rows as `outputs`.

        Returns `(summaries, metrics)`: per-row summaries of the outputs (`row_summaries`) in `meta`'s
        row order, and rank 0's metrics (the engines average them over ranks already).
        """
        shards = shard_rows(meta.total_lengths, self.world_size, mini_batch_rows, self.config.trainer.balance_batch)
        tasks = [
            (
                RankTask(
                    role,
                    method,
                    meta.partition,
                    [meta.keys[row] for row in shard.rows],
                    shard.padding,
                    tuple(fields),
                    _rows_of(per_row, shard),
                    tuple(outputs),
                    train,
                    self.pad_token_id,
                ),
                kwargs,
            )
            for shard in shards
        ]
        results = self._on_ranks("run", tasks)
        return _in_meta_order([summaries for _, summaries in results], shards, len(meta)), results[0][0]

    def run_stage(
        self,
        stage: Callable,
        meta: BatchMeta,
        *,
        fields: Sequence[str] = (),
        per_row: Optional[dict[str, Sequence[float]]] = None,
        columns: Optional[dict[str, list]] = None,
        outputs: Sequence[str] = (),
        row_totals: Sequence[str] = (),
        **kwargs: Any,
    ) -> tuple[dict, dict, dict]:
        """Run the stage function `stage(batch, metrics, **kwargs)` over all of `meta`'s rows on rank 0
        (`RankWorker.run_stage`): the rows' tensors go from the store to that rank, never to the driver.
        `stage` and `kwargs` must pickle (a module-level function, config sections, plain values)."""
        args = (
            stage_task(meta, fields, per_row, outputs, row_totals, self.pad_token_id),
            stage,
            dict(columns or {}),
            kwargs,
        )
        if self._local is not None:
            return self._local.run_stage(*args)
        return _get(self._actors[0].run_stage.remote(*args))

    def call_all(self, role: str, method: str, *args: Any) -> Any:
        """`role.method(*args)` on every rank (for collectives such as checkpoints); rank 0's result."""
        return self._on_ranks("call", [(role, method, *args)] * self.world_size)[0]

    def weights(self, role: str, bucket_bytes: int) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, full tensor) of the role's model, gathered bucket by bucket from the ranks."""
        if self._local is not None:
            for bucket in self._local.weight_buckets(role, bucket_bytes):
                yield from bucket
            return
        import ray

        streams = [
            actor.weight_buckets.options(num_returns="streaming").remote(role, bucket_bytes) for actor in self._actors
        ]
        for ref in streams[0]:
            yield from _get(ref)
        for stream in streams[1:]:  # the other ranks yielded None in step with rank 0
            for ref in stream:
                ray.get(ref)

    def _on_ranks(self, method: str, per_rank_args: list[tuple]) -> list[Any]:
        if self._local is not None:
            return [getattr(self._local, method)(*per_rank_args[0])]
        return _get([getattr(actor, method).remote(*args) for actor, args in zip(self._actors, per_rank_args)])

    def shutdown(self) -> None:
        if self._local is not None:
            self._local.shutdown()
            return
        import ray

        for actor in self._actors:
            try:
                ray.get(actor.shutdown.remote(), timeout=30)
            except Exception:  # a rank that died already needs no shutdown
                pass
            ray.kill(actor)
        self._actors = []
        if self._placement_group is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._placement_group)
            self._placement_group = None


# ------------------------------------------------------------------------------ role handles
class _RoleHandle:
    role = ""

    def __init__(self, group: WorkerGroup):
        self.group = group
        self._metrics: dict = {}

    def drain_metrics(self) -> dict:
        """Metrics a role reported beside its outputs (a V0 worker's `meta_info["metrics"]`)."""
        metrics, self._metrics = self._metrics, {}
        return metrics

    def _run(self, method: str, meta: BatchMeta, **kwargs: Any) -> tuple[dict, dict]:
        return self.group.run(self.role, method, meta, **kwargs)

    @staticmethod
    def update_fields(meta: BatchMeta) -> tuple[str, ...]:
        """What an update reads of each row: the trajectory, the rollout's log-probs where every row
        has them, and every per-token field the step's stages wrote."""
        rollout = ("response_logprobs",) if all(meta.columns.get("has_logprobs", [False])) else ()
        return (*rollout, *sorted(meta.fields))

    def save_checkpoint(self, directory: str) -> None:
        self.group.call_all(self.role, "save_checkpoint", str(directory))

    def load_checkpoint(self, directory: str) -> None:
        self.group.call_all(self.role, "load_checkpoint", str(directory))

    def set_total_training_steps(self, total_training_steps: int) -> None:
        self.group.call_all(self.role, "set_total_training_steps", total_training_steps)


class ActorHandle(_RoleHandle):
    role = "actor"

    def __init__(self, group: WorkerGroup):
        super().__init__(group)
        aro = group.config.actor_rollout_ref
        self.mini_batch_rows = aro.actor.ppo_mini_batch_size * aro.rollout.n
        self.bucket_bytes = int(aro.rollout.checkpoint_engine.update_weights_bucket_megabytes) * 1024 * 1024

    def compute_log_prob(self, meta: BatchMeta, calculate_entropy: bool = False) -> dict[str, list]:
        """`ActorEngine.compute_log_prob` over the ranks: writes `old_log_probs`, `entropys` (and
        `sum_pi_squared` when the actor computes it) onto the rows; returns their per-row summaries."""
        rollout = ("response_logprobs",) if all(meta.columns.get("has_logprobs", [False])) else ()
        summaries, self._metrics = self._run(
            "compute_log_prob",
            meta,
            fields=rollout,
            outputs=("old_log_probs", "entropys", "sum_pi_squared"),
            calculate_entropy=calculate_entropy,
        )
        return summaries

    def update_policy(self, meta: BatchMeta, per_row: Optional[dict[str, Sequence[float]]] = None) -> dict[str, float]:
        _, metrics = self._run(
            "update_policy",
            meta,
            fields=self.update_fields(meta),
            per_row=per_row,
            mini_batch_rows=self.mini_batch_rows,
            train=True,
        )
        return metrics

    def named_parameters_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        return self.group.weights(self.role, self.bucket_bytes)


class ReferenceHandle(_RoleHandle):
    role = "ref"

    def compute_ref_log_prob(self, meta: BatchMeta) -> dict[str, list]:
        """Writes `ref_log_prob` onto the rows; returns its per-row summaries."""
        summaries, self._metrics = self._run("compute_ref_log_prob", meta, outputs=("ref_log_prob",))
        return summaries


class TeacherHandle:
    """The distillation teachers (`core_v1.workers.distillation`): a role per teacher on every rank;
    each row is scored by the teacher its `distillation.teacher_key` column names."""

    def __init__(self, group: WorkerGroup):
        self.group = group
        self.teacher_keys = list(teacher_models(group.config.distillation))
        self.teacher_key = group.config.distillation.teacher_key
        loss = distillation_loss_of(group.config)
        self.fields = loss.fields if loss is not None else ()

    def compute_teacher_log_prob(self, meta: BatchMeta) -> dict[str, list]:
        """Writes `self.fields` (`teacher_log_prob`, and the top-k fields of forward_kl_topk) onto the
        rows; returns their per-row summaries in `meta`'s order."""
        routing = self._routing_column(meta) if len(self.teacher_keys) > 1 else None
        merged: dict[str, list] = {}
        for key, rows in route_rows(self.teacher_keys, len(meta), routing, self.teacher_key).items():
            summaries, _ = self.group.run(
                teacher_role(key), "compute_teacher_log_prob", meta.select(rows), outputs=self.fields
            )
            for name, values in summaries.items():
                column = merged.setdefault(name, [None] * len(meta))
                for row, value in zip(rows, values):
                    column[row] = value
        return merged

    def _routing_column(self, meta: BatchMeta) -> Optional[list]:
        if meta.has(self.teacher_key):
            return meta.column(self.teacher_key)
        if self.teacher_key in getattr(meta, "objects", ()):  # an object the handle leaves in the store
            return self.group.store.get_objects(meta.partition, meta.keys, [self.teacher_key])[self.teacher_key]
        return None


class CriticHandle(_RoleHandle):
    role = "critic"

    def __init__(self, group: WorkerGroup):
        super().__init__(group)
        critic = group.config.critic
        self.mini_batch_rows = critic.ppo_mini_batch_size * critic.rollout_n

    def compute_values(self, meta: BatchMeta) -> dict[str, list]:
        """Writes `values` onto the rows; returns their per-row summaries."""
        summaries, self._metrics = self._run("compute_values", meta, outputs=("values",))
        return summaries

    def update_critic(self, meta: BatchMeta, per_row: Optional[dict[str, Sequence[float]]] = None) -> dict[str, float]:
        _, metrics = self._run(
            "update_critic",
            meta,
            fields=self.update_fields(meta),
            per_row=per_row,
            mini_batch_rows=self.mini_batch_rows,
            train=True,
        )
        return metrics


def stage_task(
    meta: BatchMeta,
    fields: Sequence[str],
    per_row: Optional[dict[str, Sequence[float]]],
    outputs: Sequence[str],
    row_totals: Sequence[str],
    pad_token_id: int,
) -> RankTask:
    """The task of a stage function over all of `meta`'s rows (`run_stage`)."""
    return RankTask(
        "",
        "stage",
        meta.partition,
        list(meta.keys),
        (False,) * len(meta),
        tuple(fields),
        {name: list(values) for name, values in (per_row or {}).items()},
        tuple(outputs),
        False,
        pad_token_id,
        tuple(row_totals),
    )


def _rows_of(per_row: Optional[dict[str, Sequence[float]]], shard: Shard) -> dict[str, list[float]]:
    """The per-row scalars of a shard's rows (a rank gets its own rows' values, never the batch's)."""
    return {name: [values[row] for row in shard.rows] for name, values in (per_row or {}).items()}


def _in_meta_order(per_shard: list[dict[str, list]], shards: list[Shard], rows: int) -> dict[str, list]:
    """The ranks' per-row summaries (each in its shard's order) in the batch's row order, padding dropped."""
    ordered: dict[str, list] = {}
    for summaries, shard in zip(per_shard, shards):
        for name, values in summaries.items():
            column = ordered.setdefault(name, [None] * rows)
            for row, pad, value in zip(shard.rows, shard.padding, values):
                if not pad:
                    column[row] = value
    return ordered


def _get(refs: Any) -> Any:
    """`ray.get`, raising a rank's own exception (a config mistake stays a one-line error)."""
    import ray
    from ray.exceptions import RayTaskError

    try:
        return ray.get(refs)
    except RayTaskError as error:
        cause = getattr(error, "cause", None)
        raise (cause if isinstance(cause, BaseException) else error) from None
