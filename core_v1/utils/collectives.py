"""The few collectives over data-parallel ranks that the workers and the loss functions need.

Each is the identity in one process (no `torch.distributed` group, or a world of one), so the
same code runs in one process and on several ranks. Here, below both `algorithms` and `workers`,
because a loss function (rollout correction's batch mean) needs one as much as a worker does.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world_size() -> int:
    """Data-parallel ranks: torch.distributed's world size, 1 when it is not initialised."""
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    return world_size() == 1 or dist.get_rank() == 0


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()


def sum_over_ranks(value: torch.Tensor) -> torch.Tensor:
    """`value` summed over all ranks (itself in one process)."""
    if world_size() == 1:
        return value
    reduced = value.to(_collective_device(), copy=True)
    dist.all_reduce(reduced, op=dist.ReduceOp.SUM)
    return reduced.to(value.device)


def max_over_ranks(value: int) -> int:
    """The largest `value` any rank passes (itself in one process)."""
    if world_size() == 1:
        return value
    reduced = torch.tensor([value], dtype=torch.int64, device=_collective_device())
    dist.all_reduce(reduced, op=dist.ReduceOp.MAX)
    return int(reduced.item())


def mean_over_ranks(metrics: dict[str, float]) -> dict[str, float]:
    """Each metric averaged over ranks; every rank must pass the same keys."""
    if world_size() == 1:
        return metrics
    names = sorted(metrics)
    totals = sum_over_ranks(torch.tensor([metrics[name] for name in names], dtype=torch.float64))
    return {name: total / world_size() for name, total in zip(names, totals.tolist())}


def _collective_device() -> torch.device:
    # NCCL reduces only GPU tensors; gloo reduces CPU tensors.
    if "nccl" in str(dist.get_backend()) and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")
