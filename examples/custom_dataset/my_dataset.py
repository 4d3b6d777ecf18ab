"""A dataset class of one's own (verl's `data.custom_cls`): every question gets a solved example first.

rlbridge builds the class as verl does, `FewShotDataset(data_files=[...], tokenizer=...,
processor=None, config=<the data section>)`, and reads every item: a dict holding the chat
messages (under `data.prompt_key`, here `prompt`, or verl's `raw_prompt`) and the row's other
columns (`data_source`, `reward_model`, `extra_info`, ...), which reach the agent loop and the
reward function as they are. Tensors in an item are dropped: the agent loop tokenizes the messages
with the run's chat template itself.

    python -m examples.quickstart \\
        data.custom_cls.path=examples/custom_dataset/my_dataset.py data.custom_cls.name=FewShotDataset
"""

from __future__ import annotations

import pyarrow.parquet as pq
from torch.utils.data import Dataset


class FewShotDataset(Dataset):
    """The quickstart's `a+b=` questions, each after one solved example (`1+2=3 a+b=`)."""

    def __init__(self, data_files, tokenizer, config, processor=None):
        self.rows = [row for path in data_files for row in pq.read_table(path).to_pylist()]
        self.prompt_key = config.get("prompt_key", "prompt")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        row = dict(self.rows[index])
        a, b = row["extra_info"]["a"], row["extra_info"]["b"]
        row[self.prompt_key] = [{"role": "user", "content": f"1+2=3 {a}+{b}="}]
        return row
