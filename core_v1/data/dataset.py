"""Prompt datasets in the old (verl) parquet format, and the seeded sampler that walks them.

A row has `data_source`, `prompt` (a list of chat messages; the column is `data.prompt_key`),
`ability`, `reward_model` (`{"style": "rule", "ground_truth": ...}`), `extra_info` (a dict),
and optionally `agent_name`, `tools_kwargs` and `interaction_kwargs`. Rows reach agent loops as
keyword arguments, with the prompt under `raw_prompt` (what verl's agent loops read).

`build_dataset(config.data, files, tokenizer)` is how a run gets its prompts: a `PromptDataset`,
or the user's own class when `data.custom_cls.{path,name}` names one (see `read_custom_dataset`).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Iterable, Optional

import numpy as np
import pyarrow.parquet as pq
import torch

from core_v1.data.truncation import PromptTooLongError, too_long_message
from core_v1.errors import UserError

CUSTOM_CLS_KEY = "data.custom_cls.{path,name}"


class DataError(UserError, ValueError):
    """A data file is missing or malformed; the message names the file and the fix."""


class PromptDataset:
    """All rows of one or more parquet files, in memory, each a plain dict."""

    def __init__(
        self,
        files: str | Iterable[str],
        prompt_key: str = "prompt",
        max_prompt_length: Optional[int] = None,
        tokenizer: Any = None,
        filter_overlong_prompts: bool = False,
        chat_template_kwargs: Optional[dict] = None,
        max_samples: int = -1,
        shuffle_samples: bool = False,
        seed: Optional[int] = 0,
        truncation: str = "error",
        processor: Any = None,
        image_key: str = "images",
        video_key: str = "videos",
    ):
        """With a `tokenizer` and `max_prompt_length`, prompts longer than that are dropped
        (`filter_overlong_prompts`) or, with `truncation="error"`, refused (core_v1.data.truncation).
        With a vision-language model's `processor`, a prompt's length counts its images' tokens
        (the images of the `image_key` column) and videos' (`video_key`), as verl's dataset counts them."""
        paths = _paths(files)
        self.prompt_key = prompt_key
        self.rows: list[dict] = []
        origins: list[str] = []  # "file row i" of each row, for the refusal of an overlong prompt
        for path in paths:
            rows = _read_rows(Path(str(path)).expanduser(), prompt_key)
            self.rows.extend(rows)
            origins.extend(f"{path} row {i}" for i in range(len(rows)))
        chosen = chosen_samples(len(self.rows), max_samples, shuffle_samples, seed)
        if chosen is not None:
            self.rows, origins = [self.rows[i] for i in chosen], [origins[i] for i in chosen]
        if tokenizer is not None and max_prompt_length and (filter_overlong_prompts or truncation == "error"):
            lengths = [
                _prompt_length(tokenizer, r, chat_template_kwargs or {}, processor, (image_key, video_key))
                for r in self.rows
            ]
            fits = [length <= max_prompt_length for length in lengths]
            if filter_overlong_prompts:
                self.rows = [row for row, fit in zip(self.rows, fits) if fit]
            elif not all(fits):
                first = fits.index(False)
                raise PromptTooLongError(
                    too_long_message(origins[first], lengths[first], max_prompt_length, fits.count(False))
                )
        if not self.rows:
            raise DataError(f"{', '.join(map(str, paths))}: no rows left to train on")

    @classmethod
    def of_rows(cls, rows: list[dict], prompt_key: str, source: str) -> "PromptDataset":
        """A dataset of rows read elsewhere (a user's dataset class); `source` names them in errors."""
        if not rows:
            raise DataError(f"{source}: no rows to train on")
        dataset = cls.__new__(cls)
        dataset.prompt_key, dataset.rows = prompt_key, rows
        return dataset

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


def chosen_samples(total: int, max_samples: int, shuffle: bool, seed: Optional[int]) -> Optional[list[int]]:
    """verl's `max_samples` cut of `total` rows: None to keep them all (`max_samples` <= 0 or >= total),
    else the first `max_samples`, or with `shuffle` as many drawn without replacement by numpy's
    generator from `seed` (fresh entropy when None), as verl's RLHFDataset draws them."""
    if not 0 < max_samples < total:
        return None
    if not shuffle:
        return list(range(max_samples))
    rng = np.random.default_rng(*(() if seed is None else (seed,)))
    return rng.choice(total, size=max_samples, replace=False).tolist()


def _read_rows(path: Path, prompt_key: str) -> list[dict]:
    if not path.is_file():
        raise DataError(
            f"data file {str(path)!r} does not exist; check data.train_files / data.val_files "
            "(the quickstart writes its data with `python -m examples.quickstart.prepare`)"
        )
    try:
        table = pq.read_table(path)
    except Exception as error:  # pyarrow raises several types for a file that is not parquet
        raise DataError(f"{path}: cannot read as parquet ({error})") from None
    if prompt_key not in table.column_names:
        raise DataError(
            f"{path}: no {prompt_key!r} column (columns: {', '.join(table.column_names)}); "
            f"set data.prompt_key to the column that holds the chat messages"
        )
    return [_as_row(row, prompt_key, i, str(path)) for i, row in enumerate(table.to_pylist())]


def _as_row(row: dict, prompt_key: str, index: int, source: str) -> dict:
    """A row as agent loops take it: the chat messages under `raw_prompt` (from the `prompt_key`
    column, or verl's `raw_prompt` already there), `data_source` and `extra_info.index` filled."""
    prompt = row.pop(prompt_key) if prompt_key in row else row.pop("raw_prompt", None)
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if not isinstance(prompt, (list, tuple, np.ndarray)) or not len(prompt):
        raise DataError(
            f"{source}: row {index} has an empty or malformed {prompt_key!r} (expected a list of "
            "{'role': ..., 'content': ...} messages)"
        )
    row["raw_prompt"] = [dict(m) for m in prompt]
    row.setdefault("data_source", "unknown")
    row["extra_info"] = dict(row.get("extra_info") or {})
    row["extra_info"].setdefault("index", index)
    return row


def _paths(files: Any) -> list:
    paths = [files] if isinstance(files, (str, Path)) else list(files or [])
    if not paths:
        raise DataError("no data files given; set data.train_files=<file.parquet>")
    return paths


def _prompt_length(
    tokenizer: Any,
    row: dict,
    chat_template_kwargs: dict,
    processor: Any = None,
    media_keys: tuple[str, str] = ("images", "videos"),
) -> int:
    if processor is not None:
        from core_v1.agent_loop.video import row_videos
        from core_v1.agent_loop.vision import encode_vision_prompt, row_images

        images, videos = row_images(row, media_keys[0]), row_videos(row, media_keys[1])
        return len(encode_vision_prompt(processor, row["raw_prompt"], images, chat_template_kwargs, videos=videos)[0])
    from core_v1.agent_loop.base import encode_chat

    return len(encode_chat(tokenizer, row["raw_prompt"], **chat_template_kwargs))


# ------------------------------------------------------------------------ a user's dataset class
def build_dataset(
    data: Any, files: Any, tokenizer: Any = None, *, train: bool = True, processor: Any = None
) -> PromptDataset:
    """The prompts of `files` as `data` (the run's `data` section) says: the user's class named by
    `data.custom_cls`, else the parquet reader, which drops prompts longer than
    `data.max_prompt_length` when `data.filter_overlong_prompts` and refuses them when
    `data.truncation=error`, in the training and the validation files alike, as verl's dataset does."""
    custom = dict(data.custom_cls or {})
    max_samples = data.train_max_samples if train else data.val_max_samples
    if custom.get("path"):
        return read_custom_dataset(load_dataset_class(custom), files, tokenizer, data, max_samples)
    cut = dict(max_samples=max_samples, shuffle_samples=data.shuffle, seed=0 if data.seed is None else data.seed)
    return PromptDataset(
        files,
        data.prompt_key,
        data.max_prompt_length,
        tokenizer,
        data.filter_overlong_prompts,
        chat_template_kwargs=dict(data.apply_chat_template_kwargs or {}),
        truncation=data.truncation,
        processor=processor,
        image_key=data.image_key,
        video_key=data.video_key,
        **cut,
    )


def load_dataset_class(custom_cls: dict) -> type:
    """The class `data.custom_cls.{path,name}` names (a `.py` file or a module, verl's `file://` and
    `pkg://` prefixes allowed); it must be a `torch.utils.data.Dataset`, as verl requires."""
    from core_v1.utils.loading import PluginError, load_verl_object

    if not custom_cls.get("name"):
        raise DataError(f"data.custom_cls.path={custom_cls.get('path')!r} needs data.custom_cls.name (the class)")
    try:
        cls = load_verl_object(custom_cls["path"], custom_cls["name"], key=CUSTOM_CLS_KEY)
    except PluginError as error:
        raise DataError(str(error)) from None
    if not (isinstance(cls, type) and issubclass(cls, torch.utils.data.Dataset)):
        raise DataError(
            f"{CUSTOM_CLS_KEY}: {custom_cls['name']} is not a torch.utils.data.Dataset subclass; "
            "subclass it (or core_v1.data.PromptDataset's row format with torch's Dataset)"
        )
    return cls


def read_custom_dataset(cls: type, files: Any, tokenizer: Any, data: Any, max_samples: int = -1) -> PromptDataset:
    """Every item of the user's dataset class, as rows.

    The class is built as verl builds it: `cls(data_files=..., tokenizer=..., processor=None,
    config=<the data section as a DictConfig>)`, plus `max_samples=` when the run sets
    `data.train_max_samples` / `data.val_max_samples` (verl 0.6+ passes it; the class does the cut). Each item is a dict with the chat messages under
    `data.prompt_key` or verl's `raw_prompt`, and any other columns (`data_source`, `reward_model`,
    `extra_info`, `agent_name`, `tools_kwargs`, `interaction_kwargs`...). Tensors in an item (verl's
    `input_ids`, `attention_mask`...) are dropped: agent loops tokenize the messages themselves.
    """
    from omegaconf import OmegaConf

    source = f"{cls.__name__} ({CUSTOM_CLS_KEY})"
    limit = {"max_samples": max_samples} if max_samples > 0 else {}
    try:
        dataset = cls(
            data_files=[str(p) for p in _paths(files)],
            tokenizer=tokenizer,
            processor=None,
            config=OmegaConf.structured(data),
            **limit,
        )
    except (DataError, FileNotFoundError) as error:
        raise DataError(f"{source}: {error}") from None
    except TypeError as error:
        if not limit or "max_samples" not in str(error):
            raise
        raise DataError(
            f"{source} takes no max_samples argument (verl 0.6+ passes it for data.train_max_samples / "
            "data.val_max_samples): add `max_samples: int = -1` to its constructor and cut the rows, "
            "or unset those keys"
        ) from None
    rows = []
    for index in range(len(dataset)):
        item = dataset[index]
        if not isinstance(item, dict):
            raise DataError(f"{source}: item {index} is a {type(item).__name__}, not a dict of columns")
        row = {key: value for key, value in item.items() if not isinstance(value, torch.Tensor)}
        rows.append(_as_row(row, data.prompt_key, index, source))
    return PromptDataset.of_rows(rows, data.prompt_key, source)


class PromptSampler:
    """Yields dataset rows batch by batch, reshuffled each epoch with a seeded RNG; resumable.

    The state is (epoch, position); the permutation of epoch e is a function of (seed, e) only,
    so a resumed run sees exactly the rows the uninterrupted run would have.
    """

    def __init__(self, dataset: PromptDataset, batch_size: int, shuffle: bool = True, seed: int = 0):
        if batch_size > len(dataset):
            raise DataError(
                f"batch size {batch_size} is larger than the dataset ({len(dataset)} rows); "
                "lower data.train_batch_size or add data"
            )
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
        order = self._order(self.epoch)[self.position : self.position + self.batch_size]
        self.position += self.batch_size
        return [dict(self.dataset[i]) for i in order]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
