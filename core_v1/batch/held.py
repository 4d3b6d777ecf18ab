"""A training rank's padded batch, kept across the stages of one step while the store says it is current.

The stages of a step read the same rows again: with one rank, the log-prob pass, the rollout
correction and the update all read the whole batch, each time the trajectory plus the per-token
fields the previous stage wrote. The rank that wrote those fields already holds them, so it keeps
the padded batch it read (`RowHolder.read`) and puts its own outputs into it as it writes them
(`RowHolder.wrote`); the next read of the same keys whose fields it holds is then a copy of that
batch, not a store read. The store stays the data plane: every output is still written there for
whoever reads it next (another rank, the driver's dumps).

The kept batch is used only while `store.row_versions` show no write onto its rows since it was
read but the rank's own: the read returns the rows' versions with their fields (`get_versioned`,
one store call), each of the rank's writes moves them one addition on, and any other write
(another process, an overwrite), even one between the rank's read and its write, moves them past
what the rank expects, so the next read goes to the store again. The rank need not wait for its
writes' replies (`wait=False`): the version check of its next read travels in the same store call
and runs after them. Only the fields `read_training_batch`
pads per response token are kept (the trajectory, `response_logprobs` and the stages' outputs,
`RESPONSE_ALIGNED`), for a shard without repeated keys (padding rows read the store every time).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.batch.layout import (
    RESPONSE_ALIGNED,
    TRAJECTORY_FIELDS,
    build_training_batch,
    padded_rows,
    with_per_row,
)

TRAJECTORY_KEYS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")
"""The keys `build_training_batch` makes of every row's trajectory."""


@dataclasses.dataclass
class _Held:
    partition: str
    keys: tuple[str, ...]
    versions: list[tuple[int, int]]
    batch: TensorDict  # padded, tensors only
    fields: set[str]  # the store fields beyond the trajectory's that `batch` holds


class RowHolder:
    """The last batch a rank read and the outputs it wrote onto it since; see the module docstring."""

    def __init__(self, store: Any):
        self.store = store
        self._held: Optional[_Held] = None

    def read(
        self,
        partition: str,
        keys: Sequence[str],
        *,
        pad_token_id: int,
        fields: Sequence[str] = (),
        per_row: Optional[Mapping[str, Sequence[float]]] = None,
    ) -> TensorDict:
        """`read_training_batch(self.store, ...)`, from the kept batch where it is current."""
        keys = list(keys)
        if not _keepable(keys, fields):
            self._held = None
            return with_per_row(padded_rows(self.store, partition, keys, pad_token_id, fields), per_row)
        held = self._held
        if (
            held is None
            or (held.partition, held.keys) != (partition, tuple(keys))
            or not set(fields) <= held.fields
            or held.versions != _tuples(self.store.row_versions(partition, keys))
        ):
            self._held = None  # dropped before the read: one batch in memory, not two
            rows, versions = self.store.get_versioned(partition, keys, fields=[*TRAJECTORY_FIELDS, *fields])
            batch = build_training_batch(rows, pad_token_id)
            held = self._held = _Held(partition, tuple(keys), _tuples(versions), batch, set(fields))
        return with_per_row(_copied(held.batch, fields), per_row)

    def wrote(self, partition: str, keys: Sequence[str], outputs: Mapping[str, torch.Tensor]) -> None:
        """Rows `keys` (in the kept batch's order, all of them) got `outputs` (`[B, R]`) in one
        `write_response_fields`: keep the outputs as a read would pad them, and expect the rows one
        addition on (a write by anyone else shows as more, at the next read)."""
        held = self._held
        if not outputs or held is None or (held.partition, held.keys) != (partition, tuple(keys)):
            return
        response = held.batch["attention_mask"][:, held.batch["prompts"].shape[1] :]
        kept = RESPONSE_ALIGNED | {"response_mask"}
        if any(name not in kept or tensor.shape != response.shape for name, tensor in outputs.items()):
            self._held = None  # not padded per response token by a read: not kept
            return
        for name, tensor in outputs.items():
            padded = tensor.masked_fill(response == 0, 0)  # a read pads past each row's length with 0
            held.batch[name] = padded * response if name == "response_mask" else padded
            held.fields.add(name)
        held.versions = [(serial, additions + 1) for serial, additions in held.versions]


def _tuples(versions: Sequence) -> list[tuple[int, int]]:
    return [tuple(version) for version in versions]  # however the store's client packed them


def _keepable(keys: Sequence[str], fields: Sequence[str]) -> bool:
    return len(set(keys)) == len(keys) and all(f in RESPONSE_ALIGNED or f == "response_logprobs" for f in fields)


def _copied(batch: TensorDict, fields: Sequence[str]) -> TensorDict:
    """A copy of the kept batch's entries a read of `fields` returns, in the order it returns them
    (a copy: the caller may write to it)."""
    names = [*TRAJECTORY_KEYS]
    if "response_logprobs" in fields:
        names.append("rollout_log_probs")
    names += [f for f in fields if f in RESPONSE_ALIGNED]
    return TensorDict({name: batch.get(name).clone() for name in dict.fromkeys(names)}, batch_size=batch.batch_size)
