"""`DataProto`: the padded batch that every stage of the V0 trainer passes along.

This reproduces the public behaviour of verl's `verl.protocol.DataProto` up to v0.7, so V0-era
code (`from verl.protocol import DataProto` rewritten to `legacy_v0.protocol`) runs unchanged:

- `batch`: a `tensordict.TensorDict` with one batch dimension (padded token tensors, masks,
  log-probs; see docs/CONTRACTS.md for the names);
- `non_tensor_batch`: `{name: numpy array}` with one entry per row (usually `dtype=object`:
  uids, raw prompts, reward-model dicts);
- `meta_info`: a plain dict for the whole batch (temperature, `global_steps`, `metrics`).

Mistakes that verl reported with a bare `assert` raise `DataProtoError`, which subclasses both
`ValueError` and `AssertionError` so old `except AssertionError` code still catches them.

Where this departs from verl (each a fix, not a new feature):
- `chunk` with auto-padding on always returns exactly `chunks` parts (sizes differ by <= 1);
  verl inherited `torch.chunk`'s habit of returning fewer parts.
- `rename` renames pairwise and refuses to overwrite an existing key; `pop` checks every key
  before removing any; `unfold_column_chunks` and `select` name an unknown batch key instead of
  failing inside tensordict.
- `collate_fn`, `from_tensordict` and `to_tensordict` keep a column of equal-length lists 1-D.
- Pickling encodes tensors as raw bytes (`serialize_tensordict`), which also carries nested
  (jagged) tensors; there is no `VERL_DATAPROTO_SERIALIZATION_METHOD` switch.

Not carried over: `DataProtoFuture` (no Ray futures in our V0) and `all_gather_data_proto`.
"""

from __future__ import annotations

import copy
import logging
import os
import pickle
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict
from torch.utils.data import DataLoader

from legacy_v0._protocol_utils import (
    DataProtoError,
    build_tensordict,
    deserialize_single_tensor,
    deserialize_tensordict,
    list_of_dict_to_dict_of_list,
    merge_meta_info,
    object_column,
    serialize_single_tensor,
    serialize_tensordict,
    union_numpy_dict,
    union_tensor_dict,
    union_two_dict,
)

__all__ = [
    "DataProto",
    "DataProtoConfig",
    "DataProtoError",
    "DataProtoItem",
    "collate_fn",
    "deserialize_single_tensor",
    "deserialize_tensordict",
    "fold_batch_dim",
    "list_of_dict_to_dict_of_list",
    "object_column",
    "pad_dataproto_to_divisor",
    "serialize_single_tensor",
    "serialize_tensordict",
    "unfold_batch_dim",
    "union_numpy_dict",
    "union_tensor_dict",
    "union_two_dict",
    "unpad_dataproto",
]

logger = logging.getLogger(__name__)


class _DataProtoConfigMeta(type):
    """Makes `DataProtoConfig.auto_padding` a class-level property, as in verl."""

    _settings: dict[str, bool] = {}
    auto_padding_key = "_verl_auto_padding"

    @property
    def auto_padding(cls) -> bool:
        from_env = os.getenv("VERL_AUTO_PADDING", "FALSE").upper() in ("TRUE", "1")
        return from_env or cls._settings.get(cls.auto_padding_key, False)

    @auto_padding.setter
    def auto_padding(cls, enabled: bool) -> None:
        if not isinstance(enabled, bool):
            raise TypeError(f"DataProtoConfig.auto_padding must be a bool, got {enabled!r}")
        cls._settings[cls.auto_padding_key] = enabled


class DataProtoConfig(metaclass=_DataProtoConfigMeta):
    """Process-wide switches. `auto_padding` (or env `VERL_AUTO_PADDING=1`) lets `chunk` split unevenly."""


@dataclass(eq=False)
class DataProtoItem:
    """One row of a DataProto (what `data[i]` returns): a batch-less TensorDict, per-row values, meta_info."""

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)


@dataclass(eq=False)
class DataProto:
    """A batch of rows: tensors in `batch`, per-row Python objects in `non_tensor_batch`, `meta_info` for all.

    Invariants (checked on construction, see `check_consistency`): `batch` has exactly one batch
    dimension, every `non_tensor_batch` value is a numpy array, and all of them have the same
    number of rows. Methods that return a DataProto share `meta_info` with their source unless
    they say otherwise; `union`, `reorder`, `padding`, `rename`, `pop` and `to` work in place.
    """

    batch: TensorDict | None = None
    non_tensor_batch: dict = field(default_factory=dict)
    meta_info: dict = field(default_factory=dict)

    def __post_init__(self):
        self.check_consistency()

    # -- construction ---------------------------------------------------------------------------

    def check_consistency(self) -> None:
        """Raise `DataProtoError` unless the invariants in the class docstring hold."""
        if self.non_tensor_batch is None:
            self.non_tensor_batch = {}
        if self.meta_info is None:
            self.meta_info = {}
        if self.batch is not None and len(self.batch.batch_size) != 1:
            raise DataProtoError(
                f"only support num_batch_dims=1, got batch size {tuple(self.batch.batch_size)}; "
                f"flatten the extra dimensions (see unfold_batch_dim)"
            )
        for key, value in self.non_tensor_batch.items():
            if not isinstance(value, np.ndarray):
                raise DataProtoError(
                    f"data in the non_tensor_batch must be a numpy.array with dtype=object, "
                    f"but for key={key!r} got {type(value).__name__}; "
                    f"wrap it with np.array(..., dtype=object)"
                )
        lengths = {key: value.shape[0] for key, value in self.non_tensor_batch.items()}
        expected = self.batch.batch_size[0] if self.batch is not None else next(iter(lengths.values()), 0)
        for key, length in lengths.items():
            if length != expected:
                raise DataProtoError(
                    f"key {key} length {length} is not equal to batch size {expected}; "
                    f"every column needs one entry per row"
                )

    @classmethod
    def from_dict(
        cls,
        tensors: dict[str, torch.Tensor] | None = None,
        non_tensors: dict | None = None,
        meta_info: dict | None = None,
        num_batch_dims: int = 1,
        auto_padding: bool = False,
    ) -> DataProto:
        """Build from `{name: tensor}` (all sharing the first `num_batch_dims` dims) and `{name: per-row values}`.

        Non-tensor values that are not numpy arrays become `np.array(values, dtype=object)`
        (as in verl, equal-length inner lists become a second dimension). `auto_padding=True`
        marks this batch as allowed to be chunked unevenly.
        """
        if num_batch_dims <= 0:
            raise DataProtoError(f"num_batch_dims must be greater than zero, got {num_batch_dims}")
        if non_tensors and num_batch_dims != 1:
            raise DataProtoError("only support num_batch_dims=1 when non_tensors is given")
        tensors = dict(tensors or {})
        meta_info = {} if meta_info is None else meta_info
        batch_size, pivot_key = None, None
        for key, tensor in tensors.items():
            current = tuple(tensor.shape[:num_batch_dims])
            if batch_size is None:
                batch_size, pivot_key = current, key
            elif current != batch_size:
                raise DataProtoError(
                    f"Not all the tensor in tensors have the same batch size with batch_dims={num_batch_dims}. "
                    f"Got {pivot_key} has {batch_size}, {key} has {current}"
                )
        columns = {
            key: value if isinstance(value, np.ndarray) else np.array(value, dtype=object)
            for key, value in (non_tensors or {}).items()
        }
        if auto_padding:
            meta_info[DataProtoConfig.auto_padding_key] = True
        batch = TensorDict(tensors, batch_size=batch_size) if tensors else None
        return cls(batch=batch, non_tensor_batch=columns, meta_info=meta_info)

    @classmethod
    def from_single_dict(
        cls, data: dict[str, torch.Tensor | np.ndarray], meta_info: dict | None = None, auto_padding: bool = False
    ) -> DataProto:
        """Build from one dict: tensors go to `batch`, numpy arrays to `non_tensor_batch`."""
        tensors, non_tensors = {}, {}
        for key, value in data.items():
            if isinstance(value, torch.Tensor):
                tensors[key] = value
            elif isinstance(value, np.ndarray):
                non_tensors[key] = value
            else:
                raise ValueError(
                    f"Unsupported type in data {type(value)} for key {key!r}; pass a torch.Tensor or a numpy array"
                )
        return cls.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=meta_info, auto_padding=auto_padding)

    @classmethod
    def from_tensordict(
        cls, tensor_dict: TensorDict, meta_info: dict | None = None, num_batch_dims: int = 1
    ) -> DataProto:
        """Build from a TensorDict: tensors -> `batch`, `NonTensorStack` -> a column, `NonTensorData` -> meta_info."""
        if num_batch_dims <= 0:
            raise DataProtoError(f"num_batch_dims must be greater than zero, got {num_batch_dims}")
        meta_info = dict(meta_info or {})
        tensors, columns = {}, {}
        for key, value in tensor_dict.items():
            if isinstance(value, NonTensorStack):
                columns[key] = object_column(value.tolist())
            elif isinstance(value, NonTensorData):
                meta_info[key] = value.data
            elif isinstance(value, torch.Tensor):
                tensors[key] = value
            else:
                raise DataProtoError(
                    f"cannot place `{key}` of type {type(value).__name__} in a DataProto; "
                    f"flatten nested TensorDicts into top-level keys first"
                )
        if columns and num_batch_dims != 1:
            raise DataProtoError("only support num_batch_dims=1 when tensor_dict contains non tensor data")
        batch = None
        if tensors:
            if len(tensor_dict.batch_size) >= num_batch_dims:
                batch_size = tensor_dict.batch_size[:num_batch_dims]
            else:
                batch_size = next(iter(tensors.values())).shape[:num_batch_dims]
            batch = TensorDict(tensors, batch_size=batch_size, device=tensor_dict.device)
        return cls(batch=batch, non_tensor_batch=columns, meta_info=meta_info)

    def to_tensordict(self) -> TensorDict:
        """One TensorDict: tensors as they are, each column as a `NonTensorStack`, meta_info as `NonTensorData`.

        Keys must be unique across the three parts. `shims.data.dataproto_to_tensordict`
        adds what is needed to come back bit-for-bit (column dtypes and shapes).
        """
        tensors = self.batch.to_dict() if self.batch is not None else {}
        columns = {key: list(value) for key, value in self.non_tensor_batch.items()}
        result = build_tensordict(tensors, columns, self.meta_info, batch_size=len(self))
        if self.batch is not None and self.batch.device is not None:
            result = result.to(self.batch.device)
        return result

    # -- size, indexing, pickling ---------------------------------------------------------------

    def __len__(self) -> int:
        if self.batch is not None:
            return self.batch.batch_size[0]
        if self.non_tensor_batch:
            return next(iter(self.non_tensor_batch.values())).shape[0]
        return 0

    def __getitem__(self, item):
        """`data[i]` -> DataProtoItem; a slice, index list / array / tensor or bool mask -> DataProto."""
        if isinstance(item, (np.ndarray, torch.Tensor)) and item.ndim == 0:
            item = item.item()
        if isinstance(item, slice):
            return self.slice(item.start, item.stop, item.step)
        if isinstance(item, (list, np.ndarray, torch.Tensor)):
            return self.select_idxs(item)
        if isinstance(item, (int, np.integer)):
            return DataProtoItem(
                batch=self.batch[item] if self.batch is not None else None,
                non_tensor_batch={key: value[item] for key, value in self.non_tensor_batch.items()},
                meta_info=self.meta_info,
            )
        raise TypeError(
            f"Indexing with {type(item)} is not supported; use an int, a slice, "
            f"or a list / numpy array / tensor of indices or booleans"
        )

    def __getstate__(self):
        batch = serialize_tensordict(self.batch) if self.batch is not None else None
        return batch, self.non_tensor_batch, self.meta_info

    def __setstate__(self, state):
        batch, self.non_tensor_batch, self.meta_info = state
        self.batch = deserialize_tensordict(batch) if batch is not None else None

    def save_to_disk(self, filepath: str | os.PathLike) -> None:
        """Pickle this DataProto to `filepath`."""
        with open(filepath, "wb") as file:
            pickle.dump(self, file)

    @staticmethod
    def load_from_disk(filepath: str | os.PathLike) -> DataProto:
        """Load a DataProto written by `save_to_disk` (pickle: only load files you trust)."""
        with open(filepath, "rb") as file:
            return pickle.load(file)

    def print_size(self, prefix: str = "") -> None:
        """Print the memory held by the tensors and the numpy columns, in GB."""
        tensor_bytes = sum(t.element_size() * t.numel() for t in self.batch.values()) if self.batch is not None else 0
        numpy_bytes = sum(value.nbytes for value in self.non_tensor_batch.values())
        message = (
            f"Size of tensordict: {tensor_bytes / 1024**3} GB, size of non_tensor_batch: {numpy_bytes / 1024**3} GB"
        )
        print(f"{prefix}, {message}" if prefix else message)

    def get_data_info(self) -> str:
        """A readable listing of keys with shapes and dtypes (tensors, columns) and meta_info types."""
        lines = ["batch"]
        for key, tensor in self.batch.items() if self.batch is not None else []:
            lines.append(f"  {key}: {tuple(tensor.shape)} ({tensor.dtype}) {tensor.device}")
        lines.append("non_tensor_batch")
        lines += [f"  {key}: ndarray{value.shape} ({value.dtype})" for key, value in self.non_tensor_batch.items()]
        lines.append("meta_info")
        lines += [f"  {key}: {type(value).__name__}" for key, value in self.meta_info.items()]
        return "\n".join(lines)

    # -- selecting rows and keys ----------------------------------------------------------------

    def to(self, device) -> DataProto:
        """Move `batch` to `device` (in place) and return self."""
        if self.batch is not None:
            self.batch = self.batch.to(device)
        return self

    def select(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
        deepcopy: bool = False,
    ) -> DataProto:
        """A DataProto holding only the named keys (None keeps a part whole).

        Batch keys must exist; as in verl, absent non-tensor and meta_info keys are skipped,
        since callers pass optional keys such as `multi_modal_inputs`. `deepcopy` copies the
        non-tensor columns and meta_info; tensors are always shared.
        """
        batch = self.batch
        if batch_keys is not None:
            self._require_batch_keys(batch_keys, "select")
            batch = self.batch.select(*batch_keys) if self.batch is not None else None
        columns = self.non_tensor_batch
        if non_tensor_batch_keys is not None:
            columns = {key: value for key, value in columns.items() if key in non_tensor_batch_keys}
        meta_info = self.meta_info
        if meta_info_keys is not None:
            meta_info = {key: value for key, value in meta_info.items() if key in meta_info_keys}
        if deepcopy:
            columns, meta_info = copy.deepcopy(columns), copy.deepcopy(meta_info)
        return type(self)(batch=batch, non_tensor_batch=columns, meta_info=meta_info)

    def _require_batch_keys(self, keys: Sequence[str], operation: str) -> None:
        present = set(self.batch.keys()) if self.batch is not None else set()
        missing = [key for key in keys if key not in present]
        if missing:
            raise DataProtoError(f"{operation}: batch has no key(s) {missing}; it has {sorted(present)}")

    def select_idxs(self, idxs) -> DataProto:
        """The rows at `idxs`: a list, numpy array or tensor of integer indices, or a boolean mask."""
        idxs_torch, idxs_np = _as_index(idxs, len(self))
        batch = self.batch[idxs_torch] if self.batch is not None else None
        columns = {key: value[idxs_np] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=columns, meta_info=self.meta_info)

    def slice(self, start: int | None = None, end: int | None = None, step: int | None = None) -> DataProto:
        """Rows `start:end:step` as a DataProto (what `data[start:end:step]` returns); tensors are views."""
        window = slice(start, end, step)
        if step is not None and step < 0:  # torch cannot take a negative-step view; gather instead
            return self.select_idxs(np.arange(len(self))[window])
        batch = self.batch[window] if self.batch is not None else None
        columns = {key: value[window] for key, value in self.non_tensor_batch.items()}
        return type(self)(batch=batch, non_tensor_batch=columns, meta_info=self.meta_info)

    def pop(
        self,
        batch_keys: Sequence[str] | None = None,
        non_tensor_batch_keys: Sequence[str] | None = None,
        meta_info_keys: Sequence[str] | None = None,
    ) -> DataProto:
        """Remove the named keys from self and return them as a new DataProto.

        Every key must exist; nothing is removed unless all do.
        """
        batch_keys, non_tensor_batch_keys, meta_info_keys = (
            list(keys or []) for keys in (batch_keys, non_tensor_batch_keys, meta_info_keys)
        )
        self._require_batch_keys(batch_keys, "pop")
        for part, keys, present in (
            ("non_tensor_batch", non_tensor_batch_keys, self.non_tensor_batch),
            ("meta_info", meta_info_keys, self.meta_info),
        ):
            missing = [key for key in keys if key not in present]
            if missing:
                raise DataProtoError(f"pop: {part} has no key(s) {missing}; it has {sorted(present)}")
        tensors = {key: self.batch.pop(key) for key in batch_keys}
        columns = {key: self.non_tensor_batch.pop(key) for key in non_tensor_batch_keys}
        meta_info = {key: self.meta_info.pop(key) for key in meta_info_keys}
        return type(self).from_dict(tensors=tensors, non_tensors=columns, meta_info=meta_info)

    def rename(self, old_keys: str | list[str] | None = None, new_keys: str | list[str] | None = None) -> DataProto:
        """Rename batch keys (in place) pairwise, `old_keys[i] -> new_keys[i]`, and return self."""
        old_keys, new_keys = _as_key_list(old_keys), _as_key_list(new_keys)
        if len(old_keys) != len(new_keys):
            raise ValueError(
                f"new_keys and old_keys must have the same length, but got {len(new_keys)} and {len(old_keys)}"
            )
        self._require_batch_keys(old_keys, "rename")
        existing = set(self.batch.keys()) - set(old_keys) if self.batch is not None else set()
        taken = [key for key in new_keys if key in existing]
        if taken or len(set(new_keys)) != len(new_keys):
            raise DataProtoError(
                f"rename: new key(s) {taken or new_keys} would overwrite another key; "
                f"pop the existing key first or pick another name"
            )
        renamed = {new: self.batch.pop(old) for old, new in zip(old_keys, new_keys)}
        for key, tensor in renamed.items():
            self.batch[key] = tensor
        return self

    # -- combining ------------------------------------------------------------------------------

    def union(self, other: DataProto) -> DataProto:
        """Merge `other` into self (in place) and return self.

        Raises `DataProtoError` if the row counts differ, or a key present on both sides (in
        batch, non_tensor_batch or meta_info) holds different values.
        """
        if _has_rows(self) and _has_rows(other) and len(self) != len(other):
            raise DataProtoError(
                f"cannot union DataProtos of {len(self)} and {len(other)} rows; select matching rows first"
            )
        if self.batch is not None and other.batch is not None:
            self.batch = union_tensor_dict(self.batch, other.batch)
        elif self.batch is None:
            self.batch = other.batch
        self.non_tensor_batch = union_numpy_dict(self.non_tensor_batch, other.non_tensor_batch)
        self.meta_info = union_two_dict(self.meta_info, other.meta_info)
        self.check_consistency()
        return self

    @staticmethod
    def concat(data: Sequence[DataProto]) -> DataProto:
        """Stack DataProtos row-wise. All parts need the same batch and non-tensor keys.

        meta_info is merged: keys must agree across parts, except `metrics`, which is gathered
        into one `{name: [value per part]}` dict (see `merge_meta_info`).
        """
        if not data:
            raise DataProtoError("concat needs at least one DataProto")
        _require_same_keys([None if d.batch is None else sorted(d.batch.keys()) for d in data], "batch keys")
        _require_same_keys([sorted(d.non_tensor_batch) for d in data], "non_tensor_batch keys")
        batch = torch.cat([d.batch for d in data], dim=0) if data[0].batch is not None else None
        columns = {
            key: np.concatenate([d.non_tensor_batch[key] for d in data], axis=0) for key in data[0].non_tensor_batch
        }
        return type(data[0])(
            batch=batch, non_tensor_batch=columns, meta_info=merge_meta_info([d.meta_info for d in data])
        )

    def chunk(self, chunks: int) -> list[DataProto]:
        """Split into `chunks` consecutive parts that share meta_info.

        The length must divide evenly unless auto-padding is on (`is_padding_enabled`); then the
        part sizes differ by at most one, larger parts first.
        """
        if not isinstance(chunks, int) or chunks <= 0:
            raise DataProtoError(f"chunks must be a positive int, got {chunks!r}")
        if not self.is_padding_enabled() and len(self) % chunks != 0:
            raise DataProtoError(
                f"only support equal chunk. Got size of DataProto {len(self)} and chunk {chunks}; "
                f"pad first (pad_dataproto_to_divisor) or enable auto padding"
            )
        base, extra = divmod(len(self), chunks)
        bounds = np.cumsum([0] + [base + (1 if i < extra else 0) for i in range(chunks)])
        return [self.slice(int(start), int(end)) for start, end in zip(bounds[:-1], bounds[1:])]

    def split(self, split_size: int) -> list[DataProto]:
        """Consecutive parts of `split_size` rows (the last may be shorter)."""
        if not isinstance(split_size, int) or split_size <= 0:
            raise DataProtoError(f"split_size must be a positive int, got {split_size!r}")
        return [self[start : start + split_size] for start in range(0, len(self), split_size)]

    # -- reordering and repeating ---------------------------------------------------------------

    def reorder(self, indices) -> None:
        """Permute the rows in place: row `i` becomes old row `indices[i]`."""
        reordered = self.select_idxs(indices)
        self.batch, self.non_tensor_batch = reordered.batch, reordered.non_tensor_batch

    def repeat(self, repeat_times: int = 2, interleave: bool = True) -> DataProto:
        """Each row `repeat_times` times: `aabbcc` when `interleave`, else `abcabc`."""
        if not isinstance(repeat_times, int) or repeat_times < 0:
            raise DataProtoError(f"repeat_times must be a non-negative int, got {repeat_times!r}")
        rows = torch.arange(len(self))
        return self.select_idxs(rows.repeat_interleave(repeat_times) if interleave else rows.repeat(repeat_times))

    def sample_level_repeat(self, repeat_times) -> DataProto:
        """Row `i` repeated `repeat_times[i]` times, in order (a list, tuple, 1-D array or tensor of counts)."""
        if not isinstance(repeat_times, (list, tuple, np.ndarray, torch.Tensor)):
            raise TypeError(
                f"repeat_times type must be in [list, torch.Tensor, np.ndarray, tuple], got {type(repeat_times)}"
            )
        counts = torch.as_tensor(
            repeat_times if isinstance(repeat_times, torch.Tensor) else np.asarray(repeat_times)
        ).long()
        if counts.ndim != 1 or len(counts) != len(self) or bool((counts < 0).any()):
            raise DataProtoError(
                f"repeat_times must hold one non-negative count per row ({len(self)}), got shape {tuple(counts.shape)}"
            )
        return self.select_idxs(torch.arange(len(self)).repeat_interleave(counts))

    def unfold_column_chunks(self, n_split: int, split_keys: Sequence[str] | None = None) -> DataProto:
        """Cut dim 1 of each `split_keys` entry into `n_split` pieces that become rows; repeat the rest.

        Row `i` becomes rows `i*n_split ... i*n_split + n_split - 1`. Keys not in `split_keys`
        (all keys, if it is None) are repeated `n_split` times so every part keeps its row.
        """
        split_keys = set(split_keys or [])
        known = set(self.batch.keys() if self.batch is not None else []) | set(self.non_tensor_batch)
        if split_keys - known:
            raise DataProtoError(f"unfold_column_chunks: unknown split key(s) {sorted(split_keys - known)}")
        repeated = self.repeat(n_split, interleave=True)
        for key in split_keys:
            in_batch = self.batch is not None and key in self.batch.keys()
            value = self.batch[key] if in_batch else self.non_tensor_batch[key]
            if value.ndim < 2 or value.shape[1] % n_split != 0:
                raise DataProtoError(
                    f"cannot split `{key}` of shape {tuple(value.shape)} into {n_split} column "
                    f"chunks: dim 1 must exist and be divisible by {n_split}"
                )
            unfolded = value.reshape(value.shape[0] * n_split, value.shape[1] // n_split, *value.shape[2:])
            if in_batch:
                repeated.batch[key] = unfolded
            else:
                repeated.non_tensor_batch[key] = unfolded
        return repeated

    # -- padding and iteration ------------------------------------------------------------------

    def is_padding_enabled(self) -> bool:
        """True if this batch (`meta_info`) or the process (`DataProtoConfig.auto_padding`) allows uneven chunks."""
        return bool(self.meta_info.get(DataProtoConfig.auto_padding_key, False)) or DataProtoConfig.auto_padding

    def padding(self, padding_size: int, padding_candidate: str = "") -> None:
        """Append `padding_size` copies of the first row (`"first"`) or the last row (anything else), in place."""
        if padding_size == 0:
            return
        if len(self) == 0:
            raise DataProtoError("cannot pad an empty DataProto: there is no row to copy")
        source = 0 if padding_candidate == "first" else len(self) - 1
        padded = self.select_idxs(torch.cat([torch.arange(len(self)), torch.full((padding_size,), source)]))
        self.batch, self.non_tensor_batch = padded.batch, padded.non_tensor_batch

    def make_iterator(
        self, mini_batch_size: int, epochs: int, seed: int | None = None, dataloader_kwargs: dict | None = None
    ) -> Iterator[DataProto]:
        """Yield mini-batches of `mini_batch_size` rows, `epochs` times over, through a torch DataLoader.

        The length must be divisible by `mini_batch_size`. `dataloader_kwargs` go to the
        DataLoader (e.g. `{"shuffle": True}`); `seed` makes the shuffling reproducible. Every
        mini-batch carries this DataProto's meta_info.
        """
        if mini_batch_size <= 0 or len(self) % mini_batch_size != 0:
            raise DataProtoError(
                f"{len(self)} % {mini_batch_size} != 0: the batch must split into whole "
                f"mini-batches; pad it (pad_dataproto_to_divisor) or change mini_batch_size"
            )
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        loader = DataLoader(
            dataset=self,
            batch_size=mini_batch_size,
            collate_fn=collate_fn,
            generator=generator,
            **(dataloader_kwargs or {}),
        )

        def mini_batches() -> Iterator[DataProto]:
            for _ in range(epochs):
                for mini_batch in loader:
                    mini_batch.meta_info = self.meta_info
                    yield mini_batch

        return mini_batches()


# ---------------------------------------------------------------------------------------------
# Module-level helpers (verl.protocol's free functions)
# ---------------------------------------------------------------------------------------------


def pad_dataproto_to_divisor(data: DataProto, size_divisor: int) -> tuple[DataProto, int]:
    """Pad `data` by cycling its rows from the start until its length divides `size_divisor`.

    Returns `(padded, pad_size)`; undo with `unpad_dataproto(padded, pad_size)`.
    """
    if not isinstance(data, DataProto):
        raise TypeError(f"data must be a DataProto, got {type(data).__name__}")
    if size_divisor <= 0:
        raise DataProtoError(f"size_divisor must be positive, got {size_divisor}")
    if len(data) == 0:
        logger.warning("padding a DataProto with no item, no changed made")
        return data, 0
    pad_size = -len(data) % size_divisor
    if pad_size == 0:
        return data, 0
    return data.select_idxs(torch.arange(len(data) + pad_size) % len(data)), pad_size


def unpad_dataproto(data: DataProto, pad_size: int) -> DataProto:
    """Drop the last `pad_size` rows (what `pad_dataproto_to_divisor` added)."""
    return data[:-pad_size] if pad_size != 0 else data


def fold_batch_dim(data: DataProto, new_batch_size: int) -> DataProto:
    """Reshape every value from `[bsz, ...]` to `[new_batch_size, bsz // new_batch_size, ...]`."""
    batch_size = len(data)
    if new_batch_size <= 0 or batch_size % new_batch_size != 0:
        raise DataProtoError(f"cannot fold {batch_size} rows into {new_batch_size} groups: it must divide evenly")
    batch = None
    if data.batch is not None:
        batch = TensorDict(
            {key: t.reshape(new_batch_size, -1, *t.shape[1:]) for key, t in data.batch.items()},
            batch_size=[new_batch_size],
            device=data.batch.device,
        )
    columns = {key: value.reshape(new_batch_size, -1, *value.shape[1:]) for key, value in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=columns, meta_info=data.meta_info)


def unfold_batch_dim(data: DataProto, batch_dims: int = 2) -> DataProto:
    """Merge the first `batch_dims` dimensions of every value into one batch dimension."""

    def flatten(value):
        if value.ndim < batch_dims:
            raise DataProtoError(f"cannot unfold {batch_dims} batch dims of a value of shape {tuple(value.shape)}")
        return value.reshape(-1, *value.shape[batch_dims:])

    batch = None
    if data.batch is not None:
        tensors = {key: flatten(t) for key, t in data.batch.items()}
        rows = next(iter(tensors.values())).shape[0] if tensors else int(np.prod(data.batch.batch_size))
        batch = TensorDict(tensors, batch_size=[rows], device=data.batch.device)
    columns = {key: flatten(value) for key, value in data.non_tensor_batch.items()}
    return type(data)(batch=batch, non_tensor_batch=columns, meta_info=data.meta_info)


def collate_fn(items: list[DataProtoItem]) -> DataProto:
    """Stack DataProtoItems (rows) back into a DataProto.

    A column whose row values are numpy arrays of one shape and dtype is stacked into a
    multi-dimensional column (as verl does: a row of a 2-D column is such an array); any other
    column becomes a 1-D object array holding each row's value unchanged.
    """
    batch = torch.stack([item.batch for item in items]).contiguous() if items and items[0].batch is not None else None
    columns = {}
    for key, values in list_of_dict_to_dict_of_list([item.non_tensor_batch for item in items]).items():
        if _same_shape_arrays(values):
            columns[key] = np.stack(values)
        else:
            columns[key] = object_column(values)
    return DataProto(batch=batch, non_tensor_batch=columns)


def _same_shape_arrays(values: list) -> bool:
    return bool(values) and all(
        isinstance(v, np.ndarray) and v.shape == values[0].shape and v.dtype == values[0].dtype for v in values
    )


def _as_index(idxs, length: int) -> tuple[torch.Tensor, np.ndarray]:
    """The same row index as a CPU tensor and a numpy array; a boolean mask must have one entry per row."""
    if isinstance(idxs, list):
        is_mask = len(idxs) > 0 and all(isinstance(i, (bool, np.bool_)) for i in idxs)
        idxs = np.asarray(idxs, dtype=bool if is_mask else np.int64)
    if isinstance(idxs, torch.Tensor):
        idxs_np = idxs.detach().cpu().numpy()
    elif isinstance(idxs, np.ndarray):
        idxs_np = idxs
    else:
        raise TypeError(f"indices must be a list, numpy array or tensor, got {type(idxs).__name__}")
    if idxs_np.dtype == bool:
        if idxs_np.shape != (length,):
            raise DataProtoError(f"boolean mask of shape {idxs_np.shape} does not match {length} rows")
    elif idxs_np.size and idxs_np.dtype.kind not in "iu":
        raise DataProtoError(f"indices must be integers or booleans, got dtype {idxs_np.dtype}")
    else:
        idxs_np = idxs_np.astype(np.int64, copy=False)
    if idxs_np.ndim != 1:
        raise DataProtoError(f"indices must be 1-D, got shape {idxs_np.shape}")
    return torch.from_numpy(np.ascontiguousarray(idxs_np)), idxs_np


def _has_rows(data: DataProto) -> bool:
    return data.batch is not None or bool(data.non_tensor_batch)


def _as_key_list(keys) -> list[str]:
    if isinstance(keys, str):
        return [keys]
    if isinstance(keys, list):
        return keys
    raise TypeError(f"keys must be a list or a string, but got {type(keys)}")


def _require_same_keys(key_sets: list, what: str) -> None:
    for index, keys in enumerate(key_sets[1:], start=1):
        if keys != key_sets[0]:
            raise DataProtoError(
                f"concat: part #{index} has {what} {keys}, part #0 has {key_sets[0]}; "
                f"select or pop keys so every part has the same ones"
            )
