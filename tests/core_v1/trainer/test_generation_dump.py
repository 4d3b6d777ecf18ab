"""The generation dump file (`trainer.rollout_data_dir` / `validation_data_dir`) from a hand-made
batch: verl's fields, padding left out, extras every row has, and an all-or-nothing write.
(The trainers' files from real runs: test_trainer_e2e.py for V1, tests/legacy_v0/test_parity.py for V0.)"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from core_v1.algorithms.advantages.gdpo import reward_components
from core_v1.algorithms.errors import AlgorithmInputError
from core_v1.reward.loop import reward_extra_values
from core_v1.batch.layout import build_training_batch
from core_v1.trainer.generation_dump import dump_generations, generation_records
from examples.tiny_model import make_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer([str(i) for i in range(10)] + ["ünïcode"])


def _batch(tokenizer, extras, *, request_ids=None) -> TensorDict:
    prompts = ["<|im_start|>user\n1+2=<|im_end|>\n<|im_start|>assistant\n", "<|im_start|>user\n3+4=<|im_end|>\n"]
    responses = ["3<|im_end|>", "ünïcode 7"]
    columns = {"reward_model": [{"ground_truth": "3"}, {"style": "rule"}], "reward_extra": extras}
    if request_ids is not None:
        columns["request_id"] = request_ids
    trajectories = TensorDict(
        {
            "prompt_ids": torch.nested.nested_tensor(
                [torch.tensor(tokenizer.encode(p)) for p in prompts], layout=torch.jagged
            ),
            "response_ids": torch.nested.nested_tensor(
                [torch.tensor(tokenizer.encode(r)) for r in responses], layout=torch.jagged
            ),
            "response_mask": torch.nested.nested_tensor(
                [torch.ones(len(tokenizer.encode(r)), dtype=torch.long) for r in responses], layout=torch.jagged
            ),
            "reward_score": NonTensorStack(1.0, 0.25),
            **{key: NonTensorStack(*values) for key, values in columns.items()},
        },
        batch_size=[2],
    )
    return build_training_batch(trajectories, pad_token_id=tokenizer.pad_token_id)


def test_records_have_verls_fields_without_padding_or_special_tokens(tokenizer):
    extras = [{"acc": 1.0, "pred": "3", "score": 9.0}, {"acc": 0.0, "pred": "7", "only_here": 1.0}]
    batch = _batch(tokenizer, extras, request_ids=["a", "b"])
    first, second = generation_records(batch, tokenizer, step=3)
    assert first == {
        "input": "user\n1+2=\nassistant\n",
        "output": "3",
        "gts": "3",
        "score": 1.0,
        "step": 3,
        "acc": 1.0,
        "pred": "3",
        "request_id": "a",
    }  # an extra named `score` does not replace it
    assert second["input"] == "user\n3+4=\n" and second["output"] == "ünïcode 7" and second["gts"] is None
    assert second["score"] == 0.25 and "only_here" not in second  # only extras every row has
    assert list(first) == ["input", "output", "gts", "score", "step", "acc", "pred", "request_id"]
    validated = generation_records(batch, tokenizer, step=0, validation=True)
    assert [record["reward"] for record in validated] == [1.0, 0.25]


def test_a_step_written_again_replaces_its_file_whole(tokenizer, tmp_path):
    path = dump_generations(tmp_path / "dumps", 1, _batch(tokenizer, [{}, {}]), tokenizer)
    assert path == tmp_path / "dumps" / "1.jsonl"
    text = path.read_text(encoding="utf-8")
    assert "ünïcode" in text  # non-ASCII text as it is, as verl writes it (ensure_ascii=False)
    dump_generations(tmp_path / "dumps", 1, _batch(tokenizer, [{}, {}]), tokenizer)  # a resumed run's step 1
    assert path.read_text(encoding="utf-8") == text and len(text.splitlines()) == 2
    assert [json.loads(line)["step"] for line in text.splitlines()] == [1, 1]
    assert sorted(os.listdir(tmp_path / "dumps")) == ["1.jsonl"]


def test_a_write_killed_midway_leaves_the_previous_file(tokenizer, tmp_path, monkeypatch):
    path = dump_generations(tmp_path, 2, _batch(tokenizer, [{}, {}]), tokenizer)
    before = path.read_text(encoding="utf-8")

    def killed(_fd):
        raise KeyboardInterrupt  # the run stopped after the staging file was written, before the rename

    monkeypatch.setattr(os, "fsync", killed)
    with pytest.raises(KeyboardInterrupt):
        dump_generations(tmp_path, 2, _batch(tokenizer, [{"acc": 1.0}, {"acc": 0.0}]), tokenizer)
    assert path.read_text(encoding="utf-8") == before
    assert sorted(os.listdir(tmp_path)) == ["2.jsonl"]  # no staging file left behind


def test_a_reward_dicts_numbers_and_text_reach_the_dump_and_gdpo_takes_only_numbers():
    kept = reward_extra_values(
        {"score": 1.0, "acc": True, "pred": "3", "n": np.int64(2), "trace": [1, 2], "none": None}
    )
    assert kept == {"acc": 1.0, "pred": "3", "n": 2.0}  # verl's math scorers return acc and pred
    assert reward_components([kept], ["acc"], rows=1).tolist() == [[1.0]]
    with pytest.raises(AlgorithmInputError, match="'pred'.*as a number"):
        reward_components([kept], ["pred"], rows=1)
