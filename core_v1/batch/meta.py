"""`BatchMeta`: the training batch as the trainer holds it -- keys into the store, plus per-row scalars.

The trainer never holds a batch's token tensors. `ReplayBuffer.sample` moves the step's finished
trajectory rows from the `train` partition into the `step` partition of the transfer store and
returns a `BatchMeta` naming them; every stage then works on it:

- the training ranks read the fields of their shard's rows from the store, pad them themselves
  (`core_v1.batch.layout.read_training_batch`) and write their per-row outputs (old and reference
  log-probs, entropies, values) back onto the same rows (`store.add_fields`), returning only per-row
  summaries (`row_summaries`) and metrics;
- outcome-level advantage estimators (GRPO, RLOO, ReMax, GDPO, ...) run in the driver on the
  per-row scores (`columns["score"]`) and give one advantage per row, which the ranks spread over
  each row's response tokens;
- a stage that needs token-level tensors in the driver (a token-level estimator such as GAE,
  rollout correction, a reward model, the rollout dumps, a curriculum update) reads only the
  fields it names (`read_training_batch`) and writes its per-token outputs back
  (`write_response_fields`); those reads are what `core_v1.transfer_store.traffic` counts.

Columns (one Python value per row, in row order)
    `uid`, `session_id`, `output_index`  from the row's key;
    `prompt_len`, `response_len`, `global_steps`, `min_global_steps`, `max_global_steps`  from its tags;
    `score` (the reward; a reward model may rescore it), `reward_extra`, `agent_metrics` and the row's
    scalar objects (`data_source`, `num_turns`, `agent_name`, ...: `is_handle_value`) from its fields;
    `model_tokens` (response tokens the policy generated: the response mask's sum) and, per
    token-level field F a rank or the driver wrote, `F/sum`, `F/max`, `F/min` over those tokens;
    `advantage` / `return` when an outcome-level estimator computed them.

`fields` names the per-token tensor fields the rows hold in the store beyond the trajectory's own
(`prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`). `objects` names every object
field all rows hold, the bulky ones too (`raw_prompt`, `reward_model`, `extra_info`, `tools_kwargs`,
...): they stay in the store, and a stage that needs them reads them by name
(`store.get_objects(meta.partition, meta.keys, names)`), so the handle's size does not grow with the
chats, ground truths or tool arguments of the batch. Selecting rows
(`select`, e.g. PF-PPO's resampling) repeats or drops keys; the rows stay in the store until the
step ends (`ReplayBuffer.release`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Mapping, Optional, Sequence

STEP_PARTITION = "step"
"""Where a sampled batch's rows live while the step trains on them (consumed when it ends)."""


@dataclasses.dataclass
class BatchMeta:
    partition: str
    keys: list[str]
    columns: dict[str, list] = dataclasses.field(default_factory=dict)
    fields: frozenset[str] = frozenset()
    objects: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name, values in self.columns.items():
            assert len(values) == len(self.keys), f"column {name!r} has {len(values)} values for {len(self.keys)} rows"

    def __len__(self) -> int:
        return len(self.keys)

    def column(self, name: str) -> list:
        return self.columns[name]

    def has(self, name: str) -> bool:
        return name in self.columns

    def set_column(self, name: str, values: Sequence) -> None:
        values = list(values)
        if len(values) != len(self.keys):
            raise ValueError(f"column {name!r} needs {len(self.keys)} values, got {len(values)}")
        self.columns[name] = values

    def select(self, rows: Iterable[int]) -> "BatchMeta":
        """The rows `rows` (repeats allowed), as a new handle on the same store rows."""
        rows = [int(row) for row in rows]
        return BatchMeta(
            self.partition,
            [self.keys[row] for row in rows],
            {name: [values[row] for row in rows] for name, values in self.columns.items()},
            self.fields,
            self.objects,
        )

    def with_fields(self, names: Iterable[str]) -> "BatchMeta":
        return dataclasses.replace(self, fields=self.fields | frozenset(names))

    def add_summaries(self, summaries: Mapping[str, Sequence]) -> None:
        """Per-row summaries written by the ranks (`row_summaries`), by column name."""
        for name, values in summaries.items():
            self.set_column(name, values)

    @property
    def total_lengths(self) -> list[int]:
        return [int(p) + int(r) for p, r in zip(self.columns["prompt_len"], self.columns["response_len"])]

    def sessions(self) -> tuple[list[str], Optional[list]]:
        """(each row's session `{uid}_{session_id}`, each row's output index): the unit advantages judge."""
        return (
            [f"{uid}_{session}" for uid, session in zip(self.columns["uid"], self.columns["session_id"])],
            self.columns["output_index"],
        )


def summary_columns(field: str) -> tuple[str, str, str]:
    return f"{field}/sum", f"{field}/max", f"{field}/min"


def row_summaries(outputs: Mapping[str, Any], response_mask: Any) -> dict[str, list]:
    """Per-row `{F/sum, F/max, F/min}` of each `[B, R]` output over the row's model tokens, plus
    `model_tokens`: what step metrics need of a token-level field, without its tensor."""
    import torch

    mask = response_mask.bool()
    summaries: dict[str, list] = {"model_tokens": mask.sum(-1).tolist()}
    for name, tensor in outputs.items():
        if tensor is None or tensor.dim() != 2 or tensor.shape != mask.shape:
            continue
        values = tensor.detach().float()
        total, high, low = summary_columns(name)
        summaries[total] = (values * mask).sum(-1).tolist()
        summaries[high] = torch.where(mask, values, float("-inf")).max(-1).values.tolist()
        summaries[low] = torch.where(mask, values, float("inf")).min(-1).values.tolist()
    return summaries


__all__ = ["BatchMeta", "STEP_PARTITION", "is_handle_value", "row_summaries", "summary_columns"]


TAG_COLUMNS = {
    "prompt_len": 0,
    "response_len": 0,
    "global_steps": None,
    "min_global_steps": None,
    "max_global_steps": None,
    "has_logprobs": False,
}
"""Columns a trajectory row's tags give the handle (with the value a row without the tag gets)."""
KEY_COLUMNS = ("uid", "session_id", "output_index")


HANDLE_MAPPINGS = ("reward_extra", "agent_metrics")
"""Object fields the handle carries although they are mappings: the step's metrics average them."""


def is_handle_value(name: str, value: Any) -> bool:
    """Whether a row's field rides in the handle: a scalar (a number, a string, a bool, None) or one of
    `HANDLE_MAPPINGS`. Chats, ground truths, tool arguments and tensors stay in the store."""
    if isinstance(value, (str, int, float, bool)) or value is None:
        return True
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return True
    return name in HANDLE_MAPPINGS and isinstance(value, Mapping)


def describe_rows(store: Any, partition: str, keys: Sequence[str], tags: Mapping[str, Mapping[str, Any]]) -> BatchMeta:
    """The handle on trajectory rows `keys`: columns from their keys and tags, and their scalar
    object fields (the tag `handle_fields` names them), read without their tensors or bulky objects."""
    from core_v1.transfer_store import parse_key

    parsed = [parse_key(key) for key in keys]
    columns: dict[str, list] = {
        "uid": [p.uid for p in parsed],
        "session_id": [p.session_id for p in parsed],
        "output_index": [p.index for p in parsed],
    }
    for name, default in TAG_COLUMNS.items():
        columns[name] = [tags[key].get(name, default) for key in keys]
    handle_values, objects = _object_columns(store, partition, keys, tags)
    for name, values in handle_values.items():
        if name not in columns:
            columns["score" if name == "reward_score" else name] = values
    return BatchMeta(partition, list(keys), columns, objects=objects)


def _common(keys: Sequence[str], tags: Mapping[str, Mapping[str, Any]], tag: str) -> Optional[frozenset[str]]:
    """The field names every row's tag `tag` lists (None: a row without the tag)."""
    named = [tags[key].get(tag) for key in keys]
    if not keys or any(names is None for names in named):
        return None
    return frozenset.intersection(*(frozenset(names) for names in named))


def _object_columns(
    store: Any, partition: str, keys: Sequence[str], tags: Mapping[str, Mapping[str, Any]]
) -> tuple[dict[str, list], frozenset[str]]:
    """(the handle's object columns, the names of every object field the rows share)."""
    in_handle, objects = _common(keys, tags, "handle_fields"), _common(keys, tags, "object_fields")
    if in_handle is not None and objects is not None:
        return (store.get_objects(partition, keys, sorted(in_handle)) if in_handle else {}), objects
    # Rows put without the tags (not by an agent loop): every field is read, and what the handle does
    # not carry is dropped.
    import torch

    rows = store.get(partition, keys)
    columns = {name: rows[name].tolist() for name in rows.keys() if not isinstance(rows.get(name), torch.Tensor)}
    return (
        {name: values for name, values in columns.items() if all(is_handle_value(name, value) for value in values)},
        frozenset(columns),
    )
