"""`RLHFDataset`: verl's prompt-dataset class, as the base that users' `data.custom_cls` classes subclass.

verl's recipes and the projects built on them (ReTool, DAPO variants, many agent projects) name a
`CustomRLHFDataset(RLHFDataset)` in `data.custom_cls.{path,name}` that overrides
`_read_files_and_tokenize` to build `self.dataframe` its own way (read other files, `map` each row
to verl's columns, add `agent_name`). This class keeps the part of verl's that such subclasses
touch, so that they run unchanged on V1 and V0 (`build_dataset` builds them as verl does:
`cls(data_files=..., tokenizer=..., config=<data section>, processor=None)`):

- the constructor `(data_files, tokenizer, config, processor=None, max_samples=-1)` and the
  attributes it sets from `config` with verl's defaults (`prompt_key`, `max_prompt_length`,
  `filter_overlong_prompts`, `truncation`, `apply_chat_template_kwargs`, `tool_config_path`,
  `need_tools_kwargs`, `shuffle`, `seed`, `cache_dir`, ...); `self.data_files` is a list of paths
  (`~` expanded: verl's copy of remote `hdfs://` files to a local cache is not done here);
- `_read_files_and_tokenize()`: every parquet file into one HF `datasets.Dataset`,
  `self.dataframe`, cut to `max_samples` as verl does, then `maybe_filter_out_long_prompts`;
- `maybe_filter_out_long_prompts(dataframe)`: with `filter_overlong_prompts`, the rows whose chat
  prompt (rendered with the tokenizer's template, the tools of `tool_config_path` and
  `apply_chat_template_kwargs`, as the agent loop renders it) has at most `max_prompt_length`
  tokens; a prompt that cannot be rendered counts as too long, as in verl;
- `__len__`, and `__getitem__` returning the row as a dict: verl's columns, the messages under
  `raw_prompt` (what agent loops read), `index`, `tools_kwargs` and `interaction_kwargs` from
  `extra_info` as verl fills them (or the row's own columns).

Where it departs: `__getitem__` does not tokenize (no `input_ids`, `attention_mask`,
`position_ids`, `raw_prompt_ids`): rlbridge's agent loops tokenize the messages themselves, and
`build_dataset` drops tensors an item carries. Images and videos (`processor`) are not supported:
rlbridge trains on text. Filtering runs in this process (`filter_overlong_prompts_workers` is
not used).
"""

from __future__ import annotations

import copy
import logging
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Optional

import datasets
import numpy as np
import pyarrow.parquet as pq
import torch
from torch.utils.data import Dataset

from core_v1.data.dataset import chosen_samples

logger = logging.getLogger(__name__)


def collate_fn(data_list: list[dict]) -> dict:
    """verl's batch of items: each tensor field stacked along a new first dimension, each other
    field an object array of the items' values."""
    tensors: dict[str, list] = defaultdict(list)
    others: dict[str, list] = defaultdict(list)
    for item in data_list:
        for key, value in item.items():
            (tensors if isinstance(value, torch.Tensor) else others)[key].append(value)
    batch: dict[str, Any] = {key: torch.stack(values) for key, values in tensors.items()}
    for key, values in others.items():
        column = np.empty(len(values), dtype=object)
        column[:] = values
        batch[key] = column
    return batch


class RLHFDataset(Dataset):
    """Prompts of parquet files in verl's row format (see the module docstring)."""

    def __init__(self, data_files: Any, tokenizer: Any, config: Any, processor: Any = None, max_samples: int = -1):
        if isinstance(data_files, (str, os.PathLike)):
            data_files = [data_files]
        self.data_files = [str(f) for f in data_files]
        self.original_data_files = copy.deepcopy(self.data_files)
        self.tokenizer, self.processor, self.config, self.max_samples = tokenizer, processor, config, max_samples
        if processor is not None:
            logger.warning("RLHFDataset: a processor (images, video) is not used; rlbridge trains on text prompts")

        get = config.get
        self.cache_dir = os.path.expanduser(get("cache_dir", "~/.cache/verl/rlhf"))
        self.prompt_key = get("prompt_key", "prompt")
        self.image_key, self.video_key = get("image_key", "images"), get("video_key", "videos")
        self.max_prompt_length = get("max_prompt_length", 1024)
        self.return_raw_chat = get("return_raw_chat", False)
        self.return_full_prompt = get("return_full_prompt", False)
        self.truncation = get("truncation", "error")
        self.filter_overlong_prompts = get("filter_overlong_prompts", True)
        self.apply_chat_template_kwargs = dict(get("apply_chat_template_kwargs", None) or {})
        self.tool_config_path = get("tool_config_path", None)
        self.tool_schemas = self._tool_schemas()
        self.num_workers = get("filter_overlong_prompts_workers", 1)
        self.use_shm = get("use_shm", False)
        self.need_tools_kwargs = get("need_tools_kwargs", False)
        self.filter_prompts = get("filter_prompts", True)
        self.shuffle = get("shuffle", False)
        self.seed = get("seed", None)
        self.serialize_dataset = False

        self._download()
        self._read_files_and_tokenize()

    def _download(self, use_origin_parquet: bool = False) -> None:
        """verl copies remote files to a local cache here; rlbridge reads local paths (`~` expanded)."""
        files = self.original_data_files if use_origin_parquet else self.data_files
        self.data_files = [str(Path(f).expanduser()) for f in files]

    def _read_files_and_tokenize(self) -> None:
        frames = [datasets.Dataset(_read_parquet(path)) for path in self.data_files]
        self.dataframe: datasets.Dataset = datasets.concatenate_datasets(frames)
        chosen = chosen_samples(len(self.dataframe), self.max_samples, self.shuffle, self.seed)
        if chosen is not None:
            self.dataframe = self.dataframe.select(chosen)
        self.dataframe = self.maybe_filter_out_long_prompts(self.dataframe)

    def maybe_filter_out_long_prompts(self, dataframe: Optional[datasets.Dataset] = None) -> datasets.Dataset:
        """`dataframe` without the rows whose prompt is longer than `max_prompt_length` tokens, when
        `filter_overlong_prompts`; as it is otherwise."""
        dataframe = self.dataframe if dataframe is None else dataframe
        if not self.filter_overlong_prompts or self.tokenizer is None:
            return dataframe
        keep = [index for index, row in enumerate(dataframe) if self._prompt_length(row) <= self.max_prompt_length]
        if len(keep) < len(dataframe):
            logger.info(
                "RLHFDataset: %d of %d prompts are longer than %d tokens and left out",
                len(dataframe) - len(keep),
                len(dataframe),
                self.max_prompt_length,
            )
        return dataframe.select(keep) if len(keep) < len(dataframe) else dataframe

    def _prompt_length(self, row: dict) -> int:
        from core_v1.agent_loop.base import encode_chat

        try:
            messages = _messages(row[self.prompt_key])
            return len(
                encode_chat(self.tokenizer, messages, tools=self.tool_schemas, **self.apply_chat_template_kwargs)
            )
        except Exception as error:  # verl's rule: a prompt that cannot be rendered is too long
            logger.warning(
                "RLHFDataset: a prompt could not be rendered and is left out: %s: %s", type(error).__name__, error
            )
            return self.max_prompt_length + 1

    def _tool_schemas(self) -> Optional[list[dict]]:
        if not self.tool_config_path:
            return None
        from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config

        try:
            tools = initialize_tools_from_config(self.tool_config_path)
        except Exception as error:  # verl's rule: prompts are then measured without the tools
            logger.warning(
                "RLHFDataset: the tools of %s could not be built (%s); prompt lengths leave them out",
                self.tool_config_path,
                error,
            )
            return None
        return [tool.tool_schema.model_dump(exclude_unset=True, exclude_none=True) for tool in tools]

    def __len__(self) -> int:
        return len(self.dataframe)

    def _build_messages(self, example: dict) -> list[dict]:
        """The chat messages of a row, taken out of it (its `prompt_key` column)."""
        return _messages(example.pop(self.prompt_key))

    def __getitem__(self, item: int) -> dict:
        row: dict = dict(self.dataframe[item])
        row["raw_prompt"] = self._build_messages(row)
        extra_info = row.get("extra_info") or {}
        row["extra_info"] = extra_info
        row["index"] = extra_info.get("index", 0)
        for key in ("tools_kwargs", "interaction_kwargs"):
            row[key] = extra_info.get(key) or row.get(key) or {}
        if self.need_tools_kwargs and not row["tools_kwargs"]:
            logger.warning(
                "RLHFDataset: tools_kwargs is empty for index %s, data source %s", row["index"], row.get("data_source")
            )
        return row


def _read_parquet(path: str) -> Any:
    if not Path(path).is_file():
        raise FileNotFoundError(f"data file {path!r} does not exist")
    return pq.read_table(path)


def _messages(prompt: Any) -> list[dict]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(message) for message in prompt]
