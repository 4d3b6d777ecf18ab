"""Trajectories (jagged, as the store returns them) -> the padded training batch, in one place.

Layout (docs/CONTRACTS.md): `prompts` left-padded, `responses` right-padded, `input_ids` their
concatenation, `attention_mask`, `position_ids`, `response_mask` (model tokens only),
`rollout_log_probs`, `token_level_scores` (the trajectory's score on its last response token),
and the per-row Python columns as non-tensor entries. Padding goes to the longest row of the
batch, not to the configured maximum: a batch of short answers costs short-answer compute.

`read_training_batch` is where a training rank (or a driver stage that needs tensors) turns store
rows into that layout, with the per-token fields earlier stages wrote onto the rows (jagged, one
value per response token) padded beside them; `write_response_fields` is the way back.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.transfer_store import pad_jagged
from core_v1.transfer_store.batching import object_column

TOKEN_FIELDS = ("prompt_ids", "response_ids", "response_mask", "response_logprobs")
TRAJECTORY_FIELDS = ("prompt_ids", "response_ids", "response_mask")
"""The tensor fields every trajectory row has (`response_logprobs` only where the rollout kept them)."""


def build_training_batch(trajectories: TensorDict, pad_token_id: int) -> TensorDict:
    prompts, prompt_mask = pad_jagged(trajectories["prompt_ids"], side="left", pad_value=pad_token_id)
    responses, response_attention = pad_jagged(trajectories["response_ids"], side="right", pad_value=pad_token_id)
    response_mask, _ = pad_jagged(trajectories["response_mask"], side="right", pad_value=0)
    attention_mask = torch.cat([prompt_mask, response_attention], dim=1)
    batch = TensorDict(
        {
            "prompts": prompts,
            "responses": responses,
            "input_ids": torch.cat([prompts, responses], dim=1),
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(dim=1) - 1).clamp(min=0),
            "response_mask": response_mask * response_attention,
        },
        batch_size=[prompts.shape[0]],
    )
    if "reward_score" in trajectories.keys():  # a training rank reads tensors only; the driver holds scores
        batch["token_level_scores"] = scores_on_last_token(column(trajectories, "reward_score"), response_attention)
    width = responses.shape[1]
    if "response_logprobs" in trajectories.keys():
        batch["rollout_log_probs"], _ = pad_jagged(
            trajectories["response_logprobs"], side="right", pad_value=0.0, length=width
        )
    for key in trajectories.keys():
        value = trajectories.get(key)
        if key in TOKEN_FIELDS or key in batch.keys():
            continue
        if isinstance(value, torch.Tensor) and value.dim() >= 2 and key in RESPONSE_ALIGNED:
            # A stage's per-token output, stored with one value per response token of its row.
            batch[key], _ = pad_jagged(value, side="right", pad_value=0.0, length=width)
        else:
            # `get`, not `[key]`: indexing an object column returns a list, which tensordict then
            # rebuilt member by member (8 ms a column for 256 rows, nested lists unpacked into
            # sub-stacks); `get` hands over the column's stack itself.
            batch[key] = value
    return batch


RESPONSE_ALIGNED = frozenset(
    {
        "old_log_probs",
        "entropys",
        "sum_pi_squared",
        "ref_log_prob",
        "teacher_log_prob",
        "teacher_topk_log_probs",
        "teacher_topk_ids",
        "values",
        "rollout_is_weights",
        "token_level_rewards",
        "advantages",
        "returns",
    }
)
"""Per-token fields stages write onto the rows (`write_response_fields`), one value per response token."""


def read_training_batch(
    store: Any,
    partition: str,
    keys: Sequence[str],
    *,
    pad_token_id: int,
    fields: Sequence[str] = (),
    per_row: Optional[Mapping[str, Sequence[float]]] = None,
) -> TensorDict:
    """The padded training batch of rows `keys` (repeats allowed): the trajectory's tensors, the
    per-token `fields` earlier stages wrote (right-padded to the response width), and each `per_row`
    scalar (e.g. an outcome estimator's advantage) spread over its row's response mask."""
    return with_per_row(padded_rows(store, partition, keys, pad_token_id, fields), per_row)


def padded_rows(
    store: Any, partition: str, keys: Sequence[str], pad_token_id: int, fields: Sequence[str]
) -> TensorDict:
    """`read_training_batch` without the per-row scalars."""
    rows = store.get(partition, list(keys), fields=[*TRAJECTORY_FIELDS, *fields])  # a repeated key: its row again
    return build_training_batch(rows, pad_token_id)


def with_per_row(batch: TensorDict, per_row: Optional[Mapping[str, Sequence[float]]]) -> TensorDict:
    """Each `per_row` scalar spread over its row's response mask, added to `batch`."""
    for name, values in (per_row or {}).items():
        batch[name] = torch.tensor(list(values), dtype=torch.float32)[:, None] * batch["response_mask"]
    return batch


def stage_batch(
    store: Any,
    partition: str,
    keys: Sequence[str],
    *,
    pad_token_id: int,
    fields: Sequence[str] = (),
    per_row: Optional[Mapping[str, Sequence[float]]] = None,
    columns: Optional[Mapping[str, Sequence]] = None,
) -> TensorDict:
    """`read_training_batch` with the driver's per-row columns added the way the PPO stage functions
    take them: `score` as `token_level_scores` (on each row's last response token),
    `reward_baselines` as a `[B]` tensor, any other column as a per-row object column."""
    batch = read_training_batch(store, partition, keys, pad_token_id=pad_token_id, fields=fields, per_row=per_row)
    return with_columns(batch, columns)


def with_columns(batch: TensorDict, columns: Optional[Mapping[str, Sequence]]) -> TensorDict:
    """The driver's per-row columns added to a read batch the way `stage_batch` adds them."""
    for name, values in (columns or {}).items():
        if name == "score":
            response_attention = batch["attention_mask"][:, batch["prompts"].shape[1] :]
            batch["token_level_scores"] = scores_on_last_token(values, response_attention)
        elif name == "reward_baselines":
            batch[name] = torch.tensor(list(values), dtype=torch.float32)
        else:
            batch[name] = object_column(list(values))
    return batch


def response_lengths(batch: TensorDict) -> list[int]:
    """Each row's response length in a padded batch (its stored per-token fields have this many values)."""
    return batch["attention_mask"][:, batch["prompts"].shape[1] :].sum(-1).tolist()


def write_response_fields(
    store: Any,
    partition: str,
    keys: Sequence[str],
    lengths: Sequence[int],
    outputs: Mapping[str, torch.Tensor],
    *,
    overwrite: bool = False,
    wait: bool = True,
) -> None:
    """Write `[B, R]` per-token outputs onto rows `keys`, each trimmed to its row's response length
    (a key named twice, e.g. a padding row, is written once), in one `add_columns` (`wait`: its)."""
    first = {key: position for position, key in reversed(list(enumerate(keys)))}  # each key's first mention
    rows = sorted(first.values())
    if not rows or not outputs:
        return
    index = torch.tensor(rows, dtype=torch.long)
    columns = {name: tensor.detach().index_select(0, index.to(tensor.device)) for name, tensor in outputs.items()}
    unique = [keys[row] for row in rows]
    store.add_columns(partition, unique, [int(lengths[row]) for row in rows], columns, overwrite=overwrite, wait=wait)


def scores_on_last_token(scores: Sequence[float], response_attention: torch.Tensor) -> torch.Tensor:
    """[B, R] token-level scores: each row's score on its last response token (position 0 for an
    empty response), zero elsewhere; V0's reward stage places a loop's own scores with it too."""
    scores = torch.as_tensor(list(scores), dtype=torch.float32)
    token_scores = torch.zeros(response_attention.shape, dtype=torch.float32)
    last = (response_attention.sum(dim=1) - 1).clamp(min=0)
    token_scores[torch.arange(len(scores)), last] = scores
    return token_scores


def session_layout(batch: TensorDict | Mapping, rows: Optional[int] = None) -> tuple[list[str], list[int] | None]:
    """(session of each row as `{uid}_{session_id}`, each row's output index in its session): the
    session is the unit the advantage judges. `batch` is the training batch or a V0 `DataProto`'s
    `non_tensor_batch` (then `rows` counts its rows). Rows without a `session_id` column (batches
    built outside the agent loops) are one session each."""
    if "session_id" not in batch.keys():
        return [str(row) for row in range(batch.batch_size[0] if rows is None else rows)], None
    sessions = [f"{uid}_{session}" for uid, session in zip(column(batch, "uid"), column(batch, "session_id"))]
    return sessions, column(batch, "output_index") if "output_index" in batch.keys() else None


def column(batch: TensorDict, key: str) -> list:
    """A per-row non-tensor column as a plain list."""
    value = batch[key]
    return value.tolist() if hasattr(value, "tolist") else list(value)
