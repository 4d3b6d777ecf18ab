"""verl's generation dumps: `trainer.rollout_data_dir` and `trainer.validation_data_dir`.

With the key set, each training step writes the samples it trained on, and each validation the
samples it scored, to `{dir}/{step}.jsonl`: one JSON object per sample (non-ASCII text as it is),
in the batch's row order, with verl's fields (`RayPPOTrainer._dump_generations`, v0.6-v0.7.1;
v0.5 wrote no `gts`):

    input    the prompt, decoded with skip_special_tokens=True
    output   the response (tool and observation tokens included), decoded the same way
    gts      the row's `reward_model.ground_truth` (null without one)
    score    the sample's total score: its `token_level_scores` summed (reward model included)
    step     the training step (`global_steps`; 0 for the validation before training). In the
             async modes a step's batch mixes groups submitted at earlier steps: this is still the
             step that trained on them, not the one that generated them
    ...      each reward extra every sample has (the row's `reward_extra`: e.g. `acc`, `pred` of a
             reward function that returns a dict), `request_id` where the batch has that column,
             and in validation files `reward` (the score again, as verl writes it)

An extra named like one of the first five fields is left out: those say what they say above.
Unlike verl, only samples that scored are written (a failed sample is neither trained nor validated),
and a `request_id` column is written where the batch has one (verl 0.5 wrote it; 0.6-0.7.1 collect
it and then write a copy of the extras made before it was added).

The file is written whole to a temporary file in the same folder and renamed over `{step}.jsonl`:
a run killed mid-write leaves the previous file or none, never half of one, and a step run again
after a resume replaces its file. V1's trainer and validator and V0's trainer all write through
`dump_generations`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from core_v1.batch.layout import column

BASE_FIELDS = ("input", "output", "gts", "score", "step")


def dump_generations(
    directory: str | os.PathLike, step: int, batch: TensorDict, tokenizer: Any, *, validation: bool = False
) -> Path:
    """Write `{directory}/{step}.jsonl` for `batch` (the training layout of docs/CONTRACTS.md:
    `prompts`, `responses`, `attention_mask`, `token_level_scores`, and the per-row columns) and
    return its path. `validation` adds verl's `reward` column of validation files."""
    records = generation_records(batch, tokenizer, step=step, validation=validation)
    return write_jsonl_atomically(Path(directory) / f"{step}.jsonl", records)


def generation_records(batch: TensorDict, tokenizer: Any, *, step: int, validation: bool = False) -> list[dict]:
    """One dict per row of `batch`, with the fields of the module docstring."""
    rows = batch.batch_size[0]
    prompt_width = batch["prompts"].shape[1]
    real = batch["attention_mask"].bool()  # padding is left out before decoding, whatever the pad token
    scores = batch["token_level_scores"].sum(-1).tolist()
    reward_model = column(batch, "reward_model") if "reward_model" in batch.keys() else [None] * rows
    columns = {
        "input": _decode(tokenizer, batch["prompts"], real[:, :prompt_width]),
        "output": _decode(tokenizer, batch["responses"], real[:, prompt_width:]),
        "gts": [_ground_truth(spec) for spec in reward_model],
        "score": scores,
        "step": [step] * rows,
    }
    extras = {"reward": scores} if validation else {}
    if "reward_extra" in batch.keys():
        extras.update(shared_extras(column(batch, "reward_extra")))
    if "request_id" in batch.keys():
        extras.setdefault("request_id", column(batch, "request_id"))
    columns.update({name: values for name, values in extras.items() if name not in BASE_FIELDS})
    return [{name: values[row] for name, values in columns.items()} for row in range(rows)]


def shared_extras(extras: Sequence[Optional[Mapping[str, Any]]]) -> dict[str, list]:
    """The per-row reward extras as verl's columns: each key every row has, in first-seen order
    (verl writes an extra whose list has one value per sample)."""
    rows = [dict(extra or {}) for extra in extras]
    keys = dict.fromkeys(key for row in rows for key in row)
    return {key: [row[key] for row in rows] for key in keys if all(key in row for row in rows)}


def write_jsonl_atomically(path: Path, records: Sequence[Mapping[str, Any]]) -> Path:
    """`records` as JSON lines at `path`, all or nothing (a temporary file in the same folder,
    flushed to disk, then renamed over `path`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(record, ensure_ascii=False, default=_plain) + "\n" for record in records)
    staging = path.with_name(f".{path.name}.tmp")
    try:
        with open(staging, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise
    return path


def _decode(tokenizer: Any, ids: torch.Tensor, mask: torch.Tensor) -> list[str]:
    return tokenizer.batch_decode([row[keep].tolist() for row, keep in zip(ids, mask)], skip_special_tokens=True)


def _ground_truth(reward_model: Any) -> Any:
    return reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None


def _plain(value: Any) -> Any:
    """JSON for what `json` cannot write itself: numpy and torch values as numbers and lists,
    anything else as its text (a dump should not stop a run over an odd reward extra)."""
    if isinstance(value, (np.generic, np.ndarray, torch.Tensor)):
        return value.tolist()
    return str(value)
