"""How many torch tensor bytes this process moved into and out of the transfer store.

Both backends' clients count here, in the process that calls them: `put_bytes` is the tensor
data a `put` / `aput` / `add_fields` of this process handed to the store (what the in-process
store copies in, what the Ray client stages for the object store), `got_bytes` the tensor data
of the batches its `get` calls returned (what the in-process store copies out, what the Ray
client viewed or assembled). Python objects (strings, dicts) are not counted. The figures
answer "did this process carry trajectory tensors?", e.g. the driver of a many-rank run should
show 0 bytes per step; `snapshot()` before and after a step gives the step's traffic.

Counting is one addition per call under a lock: cheap next to any copy it counts.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable, Mapping

import torch

_lock = threading.Lock()
_counts = {"put_bytes": 0, "got_bytes": 0, "puts": 0, "gets": 0}


def snapshot() -> dict[str, int]:
    """`{"put_bytes", "got_bytes", "puts", "gets"}` counted in this process since start or `reset()`."""
    with _lock:
        return dict(_counts)


def reset() -> None:
    """Zero every counter of this process."""
    with _lock:
        for name in _counts:
            _counts[name] = 0


def count_put(nbytes: int) -> None:
    with _lock:
        _counts["put_bytes"] += nbytes
        _counts["puts"] += 1


def count_got(nbytes: int) -> None:
    with _lock:
        _counts["got_bytes"] += nbytes
        _counts["gets"] += 1


def tensor_bytes(value: Any) -> int:
    """Bytes of a tensor's data (a jagged nested tensor: its values), 0 for anything else."""
    if not isinstance(value, torch.Tensor):
        return 0
    if value.is_nested:
        return value.values().nbytes if value.layout is torch.jagged else sum(t.nbytes for t in value.unbind())
    return value.nbytes


def rows_tensor_bytes(rows: Iterable[Mapping[str, Any]]) -> int:
    """Tensor bytes of the fields of `rows` (`{field: value}` dicts)."""
    return sum(tensor_bytes(value) for fields in rows for value in fields.values())


def batch_tensor_bytes(batch: Any) -> int:
    """Tensor bytes of a TensorDict batch's fields (object columns count 0)."""
    return sum(tensor_bytes(batch.get(name)) for name in batch.keys())
