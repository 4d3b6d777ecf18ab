"""Helpers behind `legacy_v0.protocol`: the error type, dict unions, object columns, serialization.

Everything here is re-exported from `legacy_v0.protocol` under the names verl's `verl.protocol`
used (`union_tensor_dict`, `union_numpy_dict`, `serialize_tensordict`, ...), so V0-era imports
keep working; this module only keeps `protocol.py` readable.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict


class DataProtoError(ValueError, AssertionError):
    """A DataProto operation got inconsistent input (lengths, keys, sizes); the message names the fix.

    It is a `ValueError` for new code, and also an `AssertionError` because verl's DataProto
    reported these same mistakes with `assert`, and V0-era callers (and tests) catch that.
    """


# ---------------------------------------------------------------------------------------------
# Equality and unions
# ---------------------------------------------------------------------------------------------


def deep_equal(a: Any, b: Any, _seen: set[int] | None = None) -> bool:
    """Strict structural equality for the values DataProto carries.

    NaN equals NaN (in floats and in arrays), numpy arrays compare by dtype, shape and elements
    (recursively for object arrays), tensors by `torch.equal`, and a self-referencing object
    array compares equal to another one of the same shape instead of recursing forever.
    """
    if type(a) is not type(b):
        return False
    seen = set() if _seen is None else _seen
    if id(a) in seen:  # a cycle: the types matched on the way in, so call this part equal
        return True
    seen.add(id(a))
    try:
        if isinstance(a, float):
            return a == b or (math.isnan(a) and math.isnan(b))
        if isinstance(a, np.ndarray):
            return _arrays_equal(a, b, seen)
        if isinstance(a, torch.Tensor):
            return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(deep_equal(x, y, seen) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(deep_equal(a[k], b[k], seen) for k in a)
        return bool(a == b)
    finally:
        seen.discard(id(a))


def _arrays_equal(a: np.ndarray, b: np.ndarray, seen: set[int]) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype != object:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    return all(deep_equal(x, y, seen) for x, y in zip(a.flat, b.flat))


def union_tensor_dict(tensor_dict1: TensorDict, tensor_dict2: TensorDict) -> TensorDict:
    """Add the keys of `tensor_dict2` to `tensor_dict1` (in place) and return it.

    Raises `DataProtoError` if the batch sizes differ or a key present in both holds different
    values: a union never silently picks one side.
    """
    if tensor_dict1.batch_size != tensor_dict2.batch_size:
        raise DataProtoError(
            f"cannot union tensor dicts of batch sizes {tuple(tensor_dict1.batch_size)} and "
            f"{tuple(tensor_dict2.batch_size)}; select matching rows first"
        )
    for key in tensor_dict2.keys():
        if key not in tensor_dict1.keys():
            tensor_dict1[key] = tensor_dict2[key]
        elif not _tensors_equal(tensor_dict1[key], tensor_dict2[key]):
            raise DataProtoError(
                f"`{key}` in tensor_dict1 and tensor_dict2 are not the same object; "
                f"rename or pop one of them before union"
            )
    return tensor_dict1


def _tensors_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.is_nested or b.is_nested:
        return (
            a.is_nested
            and b.is_nested
            and len(a) == len(b)
            and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a.unbind(), b.unbind()))
        )
    return a.shape == b.shape and torch.equal(a, b)


def union_numpy_dict(tensor_dict1: dict[str, np.ndarray], tensor_dict2: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Add the columns of `tensor_dict2` to `tensor_dict1` (in place) and return it.

    A key present in both must hold equal arrays (see `deep_equal`: NaN-aware, recursive for
    object arrays), else `DataProtoError`.
    """
    for key, value in tensor_dict2.items():
        if key in tensor_dict1:
            for side in (tensor_dict1[key], value):
                if not isinstance(side, np.ndarray):
                    raise DataProtoError(f"non-tensor column `{key}` must be a numpy array, got {type(side).__name__}")
            if not deep_equal(tensor_dict1[key], value):
                raise DataProtoError(
                    f"`{key}` in tensor_dict1 and tensor_dict2 are not the same object; "
                    f"rename or pop one of them before union"
                )
        tensor_dict1[key] = value
    return tensor_dict1


def union_two_dict(dict1: dict, dict2: dict) -> dict:
    """Add the items of `dict2` to `dict1` (in place); a shared key must hold equal values."""
    for key, value in dict2.items():
        if key in dict1 and not deep_equal(dict1[key], value):
            raise DataProtoError(
                f"meta_info key `{key}` differs between the two sides ({dict1[key]!r} vs {value!r}); "
                f"pop it from one side before union"
            )
        dict1[key] = value
    return dict1


def list_of_dict_to_dict_of_list(list_of_dict: list[dict]) -> dict[str, list]:
    """`[{a: 1, b: 2}, {a: 3, b: 4}] -> {a: [1, 3], b: [2, 4]}`; the first dict fixes the keys."""
    if not list_of_dict:
        return {}
    output: dict[str, list] = {key: [] for key in list_of_dict[0]}
    for index, item in enumerate(list_of_dict):
        unknown = item.keys() - output.keys()
        if unknown:
            raise DataProtoError(
                f"dict #{index} has keys {sorted(unknown)} that dict #0 lacks; give every dict the same keys"
            )
        for key, value in item.items():
            output[key].append(value)
    return output


def merge_meta_info(meta_infos: Sequence[dict]) -> dict:
    """Merge the meta_info of DataProtos being concatenated.

    Keys other than `metrics` must agree wherever they appear. `metrics` is aggregated: each
    part's metrics (a dict, or a list of dicts, e.g. one per worker) are collected and turned
    into one dict of lists, `{name: [value_from_part_0, value_from_part_1, ...]}`.
    """
    merged: dict = {}
    collected_metrics: list[dict] = []
    for meta_info in meta_infos:
        for key, value in meta_info.items():
            if key == "metrics":
                if value is not None:
                    collected_metrics.extend(value if isinstance(value, list) else [value])
            elif key in merged and not deep_equal(merged[key], value):
                raise DataProtoError(
                    f"conflicting values for meta_info key '{key}' ({merged[key]!r} vs {value!r}); "
                    f"make them agree or pop the key before concat"
                )
            else:
                merged.setdefault(key, value)
    if collected_metrics:
        merged["metrics"] = list_of_dict_to_dict_of_list(collected_metrics)
    return merged


# ---------------------------------------------------------------------------------------------
# Object columns and TensorDict assembly
# ---------------------------------------------------------------------------------------------


def object_column(values: Iterable[Any]) -> np.ndarray:
    """A 1-D object array holding exactly `values`, one element per row.

    Unlike `np.array(values, dtype=object)`, rows that are equal-length lists stay lists instead
    of becoming a second array dimension, so a column's shape never depends on its contents.
    """
    values = list(values)
    column = np.empty(len(values), dtype=object)
    for index, value in enumerate(values):
        column[index] = value
    return column


def non_tensor_stack(values: Sequence[Any]) -> NonTensorStack:
    """One NonTensorData per row; list values stay whole objects (not unpacked into sub-stacks)."""
    return NonTensorStack(*(NonTensorData(value) for value in values), batch_size=[len(values)])


def build_tensordict(
    tensors: dict[str, torch.Tensor], columns: dict[str, list], meta_info: dict, batch_size: int | None
) -> TensorDict:
    """A TensorDict of batch size `[batch_size]` (or `[]` if None) from tensors, per-row columns and metadata.

    Tensors are stored as they are (nested jagged tensors included), each per-row column as a
    `NonTensorStack`, each meta_info entry as a `NonTensorData`. The three sets of keys must be
    disjoint.
    """
    clash = (tensors.keys() & columns.keys()) | ((tensors.keys() | columns.keys()) & meta_info.keys())
    if clash:
        raise DataProtoError(
            f"keys {sorted(clash)} appear in more than one of batch / non_tensor_batch / meta_info; "
            f"rename them so a TensorDict can hold them side by side"
        )
    result = TensorDict(dict(tensors), batch_size=[] if batch_size is None else [batch_size])
    for key, values in columns.items():
        if any(isinstance(value, torch.Tensor) for value in values):
            raise DataProtoError(
                f"non-tensor column `{key}` holds torch.Tensor values, which a NonTensorStack "
                f"cannot keep apart from tensor fields; convert them to numpy first"
            )
        result[key] = non_tensor_stack(values)
    for key, value in meta_info.items():
        result[key] = NonTensorData(value)
    return result


# ---------------------------------------------------------------------------------------------
# Serialization: plain bytes in numpy arrays, nested (jagged) tensors included
# ---------------------------------------------------------------------------------------------


def serialize_single_tensor(tensor: torch.Tensor) -> tuple[str, tuple[int, ...], np.ndarray]:
    """`(dtype name, shape, raw bytes as a uint8 numpy array)` for a dense tensor on any device."""
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    return str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), flat.view(torch.uint8).numpy()


def deserialize_single_tensor(encoded: tuple[str, Sequence[int], np.ndarray]) -> torch.Tensor:
    """Inverse of `serialize_single_tensor`; the result owns its memory and lives on the CPU."""
    dtype_name, shape, raw = encoded
    dtype = getattr(torch, dtype_name)
    if len(raw) == 0:  # torch.frombuffer refuses an empty buffer
        return torch.empty(tuple(shape), dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(tuple(shape))


def serialize_tensordict(batch: TensorDict) -> tuple[tuple[int, ...], str | None, dict]:
    """`(batch_size, device, {key: encoded tensor})`, picklable without torch's own serializer.

    A nested tensor is encoded as `(layout name, [encoded component, ...])`, a dense one as the
    3-tuple of `serialize_single_tensor`. Nested sub-TensorDicts are flattened to tuple keys.
    """
    encoded: dict = {}
    for key, value in batch.items(include_nested=True, leaves_only=True):
        if not isinstance(value, torch.Tensor):
            raise DataProtoError(
                f"cannot serialize `{key}` of type {type(value).__name__}: a DataProto batch "
                f"holds tensors only; keep other values in non_tensor_batch or meta_info"
            )
        if value.is_nested:
            layout = str(value.layout).removeprefix("torch.")
            encoded[key] = (layout, [serialize_single_tensor(component) for component in value.unbind()])
        else:
            encoded[key] = serialize_single_tensor(value)
    device = str(batch.device) if batch.device is not None else None
    return tuple(batch.batch_size), device, encoded


def deserialize_tensordict(encoded: tuple[Sequence[int], str | None, dict]) -> TensorDict:
    """Inverse of `serialize_tensordict`.

    The recorded device is restored when this process can use it; otherwise (say, a CUDA batch
    loaded on a CPU-only machine) the TensorDict stays on the CPU.
    """
    batch_size, device, items = encoded
    result = TensorDict({}, batch_size=tuple(batch_size))
    for key, value in items.items():
        if len(value) == 2:
            layout, components = value
            result.set(
                key,
                torch.nested.as_nested_tensor(
                    [deserialize_single_tensor(c) for c in components], layout=getattr(torch, layout)
                ),
            )
        elif len(value) == 3:
            result.set(key, deserialize_single_tensor(value))
        else:
            raise DataProtoError(
                f"invalid encoding for `{key}`: expected 2 (nested) or 3 (dense) parts, "
                f"got {len(value)}; was it written by serialize_tensordict?"
            )
    if device is not None and _device_usable(device):
        result = result.to(device)
    return result


def _device_usable(device: str) -> bool:
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError):
        return False
    return True
