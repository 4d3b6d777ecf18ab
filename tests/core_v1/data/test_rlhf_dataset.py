"""`RLHFDataset`, the base of users' `data.custom_cls` classes: verl's constructor and attributes,
`self.dataframe` a HF `datasets.Dataset`, overlong prompts left out, the row `build_dataset` hands
the trainers, and a subclass that builds `self.dataframe` itself (as verl's ReTool does)."""

from __future__ import annotations

import textwrap

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from omegaconf import OmegaConf

from core_v1.config import load_config
from core_v1.data import build_dataset
from core_v1.data.rlhf_dataset import RLHFDataset, collate_fn
from examples.tiny_model import make_tokenizer
from examples.tool_agent.prepare import TOOL_WORDS


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer(TOOL_WORDS)


def write_rows(path, contents: list[str]):
    rows = [
        {
            "data_source": "mine",
            "prompt": [{"role": "user", "content": content}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(i)},
            "extra_info": {"index": 10 + i, "tools_kwargs": {"code_interpreter": {"create_kwargs": {"n": i}}}},
        }
        for i, content in enumerate(contents)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def data_config(*overrides: str):
    return load_config(list(overrides), config_name="quickstart").data


def test_the_rows_are_verls_with_the_messages_under_raw_prompt(tmp_path, tokenizer):
    files = [write_rows(tmp_path / "a.parquet", ["1+1", "2+2"]), write_rows(tmp_path / "b.parquet", ["3+3"])]
    dataset = RLHFDataset([str(f) for f in files], tokenizer, OmegaConf.structured(data_config()))
    assert isinstance(dataset.dataframe, datasets.Dataset) and len(dataset) == 3
    assert dataset.data_files == [str(f) for f in files] and dataset.prompt_key == "prompt"
    row = dataset[1]
    assert row["raw_prompt"] == [{"role": "user", "content": "2+2"}] and "prompt" not in row
    assert row["index"] == 11 and row["tools_kwargs"] == {"code_interpreter": {"create_kwargs": {"n": 1}}}
    assert row["interaction_kwargs"] == {} and row["reward_model"]["ground_truth"] == "1"


def test_overlong_prompts_are_left_out_and_max_samples_cuts(tmp_path, tokenizer):
    path = str(write_rows(tmp_path / "a.parquet", ["1+1", "9" * 200, "2+2"]))
    config = OmegaConf.structured(data_config("data.filter_overlong_prompts=true", "data.max_prompt_length=64"))
    kept = RLHFDataset(path, tokenizer, config)
    assert [row["raw_prompt"][0]["content"] for row in kept] == ["1+1", "2+2"]
    assert len(RLHFDataset(path, tokenizer, OmegaConf.structured(data_config()))) == 3  # the schema's default: off
    first_two = RLHFDataset(path, tokenizer, OmegaConf.structured(data_config("data.shuffle=false")), max_samples=2)
    assert [row["raw_prompt"][0]["content"] for row in first_two] == ["1+1", "9" * 200]


def test_collate_fn_stacks_tensors_and_keeps_the_rest_as_objects():
    batch = collate_fn([{"ids": torch.tensor([1, 2]), "meta": {"a": 1}}, {"ids": torch.tensor([3, 4]), "meta": None}])
    assert batch["ids"].tolist() == [[1, 2], [3, 4]]
    assert batch["meta"].dtype == np.dtype(object) and list(batch["meta"]) == [{"a": 1}, None]


USER_DATASET = textwrap.dedent('''\
    import datasets

    from core_v1.data.rlhf_dataset import RLHFDataset

    SUFFIX = " Answer in a box."


    class BoxedDataset(RLHFDataset):
        """Rows of another shape ({"question", "answer"}), mapped to verl's, each sent to tool_agent."""

        def _read_files_and_tokenize(self):
            frames = []
            for path in self.data_files:
                frame = datasets.load_dataset("parquet", data_files=path)["train"]
                frames.append(frame.map(self.to_row, remove_columns=frame.column_names))
            self.dataframe = datasets.concatenate_datasets(frames)

        def to_row(self, row):
            return {"data_source": "boxed", "prompt": [{"role": "user", "content": row["question"] + SUFFIX}],
                    "reward_model": {"ground_truth": row["answer"]}, "agent_name": "tool_agent"}
''')


def test_a_subclass_that_builds_its_own_dataframe_gives_build_dataset_its_rows(tmp_path, tokenizer, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    pq.write_table(
        pa.Table.from_pylist([{"question": f"{i}*2?", "answer": str(2 * i)} for i in range(3)]), tmp_path / "qa.parquet"
    )
    (tmp_path / "boxed.py").write_text(USER_DATASET)
    data = data_config(f"data.custom_cls.path={tmp_path / 'boxed.py'}", "data.custom_cls.name=BoxedDataset")
    rows = build_dataset(data, str(tmp_path / "qa.parquet"), tokenizer).rows
    assert [row["raw_prompt"] for row in rows] == [
        [{"role": "user", "content": f"{i}*2? Answer in a box."}] for i in range(3)
    ]
    assert {row["agent_name"] for row in rows} == {"tool_agent"} and rows[2]["reward_model"]["ground_truth"] == "4"
    assert rows[2]["extra_info"]["index"] == 2 and rows[0]["data_source"] == "boxed"
