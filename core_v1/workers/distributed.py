"""Data parallelism across GPUs: FSDP2 sharding and the few collectives the engines need.

Everything here is a no-op in one process. When `torch.distributed` is initialised with a world
size above 1 (e.g. under `torchrun`), `shard_model` wraps each transformer block and then the
whole model with `torch.distributed.fsdp.fully_shard` (FSDP2), each rank trains on its own
shard of the batch, and gradients are averaged over ranks by FSDP's reduce-scatter. Every rank
must be handed the same number of rows, since each forward and backward is a collective. On
GPUs the caller initialises the process group and passes `device=f"cuda:{local_rank}"` after
`torch.cuda.set_device(local_rank)`.

State dicts go through `torch.distributed.checkpoint.state_dict`, which gathers full
(unsharded) tensors from FSDP2 modules and returns a plain state dict for an unsharded one, so
checkpointing and weight sync share one code path in both cases.

rlbridge's tests run the multi-rank path on CPU (two processes, gloo) and compare it with one
process; NCCL on GPUs runs the same code but is not part of CI.
"""

from __future__ import annotations

import warnings
from typing import Iterator

import torch
from torch.distributed.tensor import DTensor
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from core_v1.config.schema import FSDPConfig
from core_v1.workers.errors import WorkerConfigError
from core_v1.workers.model import resolve_dtype

# The collectives are importable from here too, where the workers call them (`distributed.world_size()`).
from core_v1.utils.collectives import (
    barrier,  # noqa: F401
    is_main_process,  # noqa: F401
    max_over_ranks,  # noqa: F401
    mean_over_ranks,  # noqa: F401
    sum_over_ranks,  # noqa: F401
    world_size,
)

_FULL_ON_CPU = StateDictOptions(full_state_dict=True, cpu_offload=True)


def place_model(model: torch.nn.Module, fsdp_config: FSDPConfig, device: torch.device) -> torch.nn.Module:
    """Put a model loaded on CPU where it runs: sharded with FSDP2 over several ranks, else on `device`."""
    if world_size() > 1:
        return shard_model(model, fsdp_config, device)
    if _offloads(fsdp_config) and device.type == "cuda":
        warnings.warn(
            "fsdp_config param_offload / optimizer_offload / offload_policy have no effect with one "
            "training rank: FSDP2 (which offloads) shards only over several ranks",
            stacklevel=2,
        )
    return model.to(device)


def shard_model(model: torch.nn.Module, fsdp_config: FSDPConfig, device: torch.device) -> torch.nn.Module:
    """Wrap `model` with FSDP2 when there are several ranks; return it unchanged otherwise.

    Each module named in the model's `_no_split_modules` (its transformer blocks) becomes one
    FSDP unit, then the root takes the embeddings and head. The parameters move to `device`
    unless offloading is asked for (`offload_policy`, `param_offload` or `optimizer_offload`).
    `fsdp_size` below the number of ranks shards within groups of that many ranks (HSDP).
    `mixed_precision.{param_dtype, reduce_dtype}` set FSDP2's mixed-precision policy (default on
    GPUs: bf16 compute, fp32 gradient reduction).
    """
    ranks = world_size()
    if ranks == 1:
        return model
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mixed = fsdp_config.mixed_precision or _default_mixed_precision(device)
    shard_kwargs = dict(
        mesh=_device_mesh(device.type, fsdp_config.fsdp_size, ranks),
        reshard_after_forward=fsdp_config.reshard_after_forward,
        mp_policy=MixedPrecisionPolicy(
            param_dtype=resolve_dtype(mixed["param_dtype"]) if "param_dtype" in mixed else None,
            reduce_dtype=resolve_dtype(mixed["reduce_dtype"]) if "reduce_dtype" in mixed else None,
        ),
        # Pinned host memory needs an accelerator: CPU ranks keep the policy, unpinned.
        offload_policy=(
            CPUOffloadPolicy(pin_memory=device.type == "cuda") if _offloads(fsdp_config) else OffloadPolicy()
        ),
    )
    block_names = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in block_names:
            fully_shard(module, **shard_kwargs)
    fully_shard(model, **shard_kwargs)
    return model


def mesh_shape(fsdp_size: int, ranks: int, key: str = "fsdp_config.fsdp_size") -> tuple[int, ...]:
    """verl's device mesh: shard over all ranks (`fsdp_size` -1 or at least the world size), else
    hybrid sharding (HSDP): groups of `fsdp_size` ranks shard, the groups replicate each other."""
    if fsdp_size < 0 or fsdp_size >= ranks:
        return (ranks,)
    if fsdp_size == 0 or ranks % fsdp_size:
        raise WorkerConfigError(
            f"{key}={fsdp_size} with {ranks} training ranks: the shard group size must divide "
            "the number of ranks; use -1 (shard over all ranks) or a divisor"
        )
    return (ranks // fsdp_size, fsdp_size)


def _device_mesh(device_type: str, fsdp_size: int, ranks: int):
    from torch.distributed.device_mesh import init_device_mesh

    shape = mesh_shape(fsdp_size, ranks)
    return init_device_mesh(device_type, shape, mesh_dim_names=("fsdp",) if len(shape) == 1 else ("ddp", "fsdp"))


def _default_mixed_precision(device: torch.device) -> dict:
    """verl's FSDP default on GPUs: compute in bf16, reduce gradients in fp32 (the sharded master
    weights stay in `model_dtype`). On CPU, gloo and the CPU kernels run in `model_dtype` as is."""
    return {"param_dtype": "bf16", "reduce_dtype": "fp32"} if device.type == "cuda" else {}


def _offloads(fsdp_config: FSDPConfig) -> bool:
    # FSDP2 offloads parameters, gradients and the optimizer step together; verl's FSDP1-era
    # `param_offload` / `optimizer_offload` keys ask for (part of) the same thing.
    return fsdp_config.offload_policy or fsdp_config.param_offload or fsdp_config.optimizer_offload


def full_model_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict on CPU, keyed as `from_pretrained` names them (a collective)."""
    return get_model_state_dict(model, options=_FULL_ON_CPU)


def iter_full_tensors(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor) for each state-dict entry, gathered one tensor at a time (a collective per
    sharded tensor, so every rank must iterate), on the device the parameters live on."""
    for name, tensor in model.state_dict().items():
        if isinstance(tensor, DTensor):
            tensor = tensor.full_tensor()
        yield name, tensor.detach()


def load_full_model_state_dict(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a full state dict into `model` (sharded or not); every key must match."""
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=True))


def sharded_state(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None, include_model: bool = True
) -> dict:
    """This rank's part of the model (and optimizer) state, as `torch.distributed.checkpoint` saves and
    loads it: DTensor shards under FSDP2, plain tensors in one process."""
    state = {}
    if include_model:
        state["model"] = get_model_state_dict(model)
    if optimizer is not None:
        state["optimizer"] = get_optimizer_state_dict(model, optimizer)
    return state


def load_sharded_state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Put a `sharded_state` that `torch.distributed.checkpoint.load` filled back into the model and optimizer."""
    if "model" in state:
        set_model_state_dict(model, state["model"])
    if "optimizer" in state:
        set_optimizer_state_dict(model, optimizer, state["optimizer"])


def full_optimizer_state_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """The optimizer's state keyed by parameter name, gathered on CPU (a collective)."""
    return get_optimizer_state_dict(model, optimizer, options=_FULL_ON_CPU)


def load_full_optimizer_state_dict(model: torch.nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    set_optimizer_state_dict(model, optimizer, state, options=StateDictOptions(full_state_dict=True))
