"""`data.train_max_samples` / `data.val_max_samples`: a run reads that many rows, as verl does (the
first ones, or with `data.shuffle` a subset drawn with `data.seed`), on V1 and V0, through the
built-in reader and through a user's dataset class (which verl hands `max_samples`)."""

from __future__ import annotations

import textwrap

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core_v1.config import load_config
from core_v1.data import DataError, build_dataset
from core_v1.data.dataset import chosen_samples
from legacy_v0.config import compose_v0
from shims.v0_keys import KeyTableOnV0


def write_rows(path, count: int):
    rows = [
        {
            "data_source": "mine",
            "prompt": [{"role": "user", "content": f"{i}+0="}],
            "reward_model": {"style": "rule", "ground_truth": str(i)},
        }
        for i in range(count)
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def contents(dataset) -> list[str]:
    return [row["raw_prompt"][0]["content"] for row in dataset.rows]


def test_the_cut_is_verls():
    assert chosen_samples(10, -1, True, 3) is None and chosen_samples(10, 10, True, 3) is None
    assert chosen_samples(10, 4, False, 3) == [0, 1, 2, 3]
    # verl: np.random.default_rng(seed).choice(total, size=max_samples, replace=False)
    assert chosen_samples(10, 4, True, 3) == np.random.default_rng(3).choice(10, size=4, replace=False).tolist()


def test_train_and_validation_files_are_cut(tmp_path):
    train, val = write_rows(tmp_path / "train.parquet", 20), write_rows(tmp_path / "val.parquet", 8)
    data = load_config(
        [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.train_max_samples=5",
            "data.val_max_samples=3",
            "data.shuffle=false",
        ],
        config_name="quickstart",
    ).data
    assert contents(build_dataset(data, train)) == [f"{i}+0=" for i in range(5)]
    assert contents(build_dataset(data, val, train=False)) == ["0+0=", "1+0=", "2+0="]


def test_with_shuffle_a_seeded_subset_the_same_every_time(tmp_path):
    train = write_rows(tmp_path / "train.parquet", 20)

    def subset(*overrides):
        data = load_config(
            [f"data.train_files={train}", "data.train_max_samples=6", *overrides], config_name="quickstart"
        ).data
        return contents(build_dataset(data, train))

    picked = subset()  # data.shuffle is on by default; data.seed unset draws with seed 0
    assert picked == [f"{i}+0=" for i in np.random.default_rng(0).choice(20, size=6, replace=False)]
    assert subset() == picked and subset("data.seed=7") != picked
    assert len(subset("data.train_max_samples=-1")) == 20


def test_v0_reads_the_keys_too(tmp_path):
    train = write_rows(tmp_path / "train.parquet", 20)
    v0 = compose_v0(
        "quickstart",
        None,
        [f"data.train_files={train}", "data.train_max_samples=4", "data.shuffle=false", "trainer.use_v1=false"],
        legacy_keys=KeyTableOnV0(),
    )
    data = v0.ppo_config().data
    assert contents(build_dataset(data, train)) == [f"{i}+0=" for i in range(4)]


def test_a_dataset_class_gets_max_samples_as_verl_passes_it(tmp_path):
    train = write_rows(tmp_path / "train.parquet", 20)
    module = tmp_path / "my_data.py"
    module.write_text(
        textwrap.dedent("""
        from core_v1.data.rlhf_dataset import RLHFDataset

        class Mine(RLHFDataset):
            pass

        class Old(RLHFDataset):  # written for verl 0.5: no max_samples argument
            def __init__(self, data_files, tokenizer, config, processor=None):
                super().__init__(data_files, tokenizer, config, processor)
    """)
    )

    def data(name: str):
        return load_config(
            [
                f"data.train_files={train}",
                "data.train_max_samples=3",
                "data.shuffle=false",
                f"data.custom_cls.path={module}",
                f"data.custom_cls.name={name}",
            ],
            config_name="quickstart",
        ).data

    assert contents(build_dataset(data("Mine"), train)) == ["0+0=", "1+0=", "2+0="]
    with pytest.raises(DataError, match="takes no max_samples argument.*add `max_samples: int = -1`"):
        build_dataset(data("Old"), train)
