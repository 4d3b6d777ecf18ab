"""Prompt datasets in the old (verl) parquet format, and the seeded sampler that walks them.

A row has `data_source`, `prompt` (a list of chat messages; the column is `data.prompt_key`),
`ability`, `reward_model` (`{"style": "rule", "ground_truth": ...}`), `extra_info` (a dict),
and optionally `agent_name` and `tools_kwargs`. Rows reach agent loops as keyword arguments,
with the prompt under `raw_prompt` (what verl's agent loops read).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import pyarrow.parquet as pq


class DataError(ValueError):
    """A data file is missing or malformed; the message names the file and the fix."""


class PromptDataset:
    """All rows of one or more parquet files, in memory, each a plain dict."""

    def __init__(self, files: str | Iterable[str], prompt_key: str = "prompt", max_prompt_length: Optional[int] = None,
                 tokenizer: Any = None, filter_overlong_prompts: bool = False):
        paths = [files] if isinstance(files, (str, Path)) else list(files)
        if not paths:
            raise DataError("no data files given; set data.train_files=<file.parquet>")
        self.prompt_key = prompt_key
        self.rows: list[dict] = []
        for path in paths:
            self.rows.extend(_read_rows(Path(str(path)).expanduser(), prompt_key))
        if filter_overlong_prompts and tokenizer is not None and max_prompt_length:
            self.rows = [r for r in self.rows if _prompt_length(tokenizer, r["raw_prompt"]) <= max_prompt_length]
        if not self.rows:
            raise DataError(f"{', '.join(map(str, paths))}: no rows left to train on")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


def _read_rows(path: Path, prompt_key: str) -> list[dict]:
    if not path.is_file():
        raise DataError(f"data file {str(path)!r} does not exist; check data.train_files / data.val_files "
                        "(the quickstart writes its data with `python -m examples.quickstart.prepare`)")
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for a file that is not parquet
        raise DataError(f"{path}: cannot read as parquet ({error})") from None
    if prompt_key not in table.column_names:
        raise DataError(f"{path}: no {prompt_key!r} column (columns: {', '.join(table.column_names)}); "
                        f"set data.prompt_key to the column that holds the chat messages")
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        prompt = row.pop(prompt_key)
        if isinstance(prompt, str):
            prompt = [{"role": "user", "content": prompt}]
        if not isinstance(prompt, (list, tuple, np.ndarray)) or not prompt:
            raise DataError(f"{path}: row {i} has an empty or malformed {prompt_key!r} (expected a list of "
                            "{'role': ..., 'content': ...} messages)")
        row["raw_prompt"] = [dict(m) for m in prompt]
        row.setdefault("data_source", "unknown")
        row["extra_info"] = dict(row.get("extra_info") or {})
        row["extra_info"].setdefault("index", i)
    return rows


def _prompt_length(tokenizer: Any, messages: list[dict]) -> int:
    from core_v1.agent_loop.base import encode_chat
    return len(encode_chat(tokenizer, messages))


class PromptSampler:
    """Yields dataset rows batch by batch, reshuffled each epoch with a seeded RNG; resumable.

    The state is (epoch, position); the permutation of epoch e is a function of (seed, e) only,
    so a resumed run sees exactly the rows the uninterrupted run would have.
    """

    def __init__(self, dataset: PromptDataset, batch_size: int, shuffle: bool = True, seed: int = 0):
        if batch_size > len(dataset):
            raise DataError(f"batch size {batch_size} is larger than the dataset ({len(dataset)} rows); "
                            "lower data.train_batch_size or add data")
        self.dataset, self.batch_size, self.shuffle, self.seed = dataset, batch_size, shuffle, seed
        self.epoch, self.position = 0, 0

    @property
    def batches_per_epoch(self) -> int:
        return len(self.dataset) // self.batch_size  # the ragged tail is dropped, as verl does

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next_batch(self) -> list[dict]:
        if self.position + self.batch_size > len(self.dataset):
            self.epoch, self.position = self.epoch + 1, 0
        order = self._order(self.epoch)[self.position:self.position + self.batch_size]
        self.position += self.batch_size
        return [dict(self.dataset[i]) for i in order]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
