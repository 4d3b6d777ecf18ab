"""`data.truncation` and `data.filter_overlong_prompts`, as verl's dataset reads them: `error`
refuses an overlong prompt with one line naming it (train and validation files), the filter drops
such prompts instead, and `left` / `right` / `middle` cut the prompt the agent loop sends."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from core_v1.agent_loop.base import encode_chat
from core_v1.agent_loop.single_turn import SingleTurnAgentLoop
from core_v1.config import load_config
from core_v1.data import build_dataset
from core_v1.data.truncation import PromptTooLongError, truncate_prompt
from core_v1.main_ppo import main

LONG = "1+2+3+4+5+6+7+8+9="


@pytest.fixture(scope="module")
def tokenizer(tiny_assets):
    return AutoTokenizer.from_pretrained(tiny_assets["model"])


def write_prompts(path, contents):
    rows = [
        {
            "data_source": "mine",
            "prompt": [{"role": "user", "content": c}],
            "reward_model": {"style": "rule", "ground_truth": "0"},
        }
        for c in contents
    ]
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def data_section(tiny_assets, *overrides):
    return load_config(
        [f"actor_rollout_ref.model.path={tiny_assets['model']}", *overrides], config_name="quickstart"
    ).data


def test_the_cuts_are_verls():
    ids = list(range(10))
    assert truncate_prompt(ids, 4, "left") == [6, 7, 8, 9]
    assert truncate_prompt(ids, 4, "right") == [0, 1, 2, 3]
    assert truncate_prompt(ids, 5, "middle") == [0, 1, 7, 8, 9]  # verl: max // 2 from the start, the rest from the end
    assert truncate_prompt(ids, 10, "error") == ids
    with pytest.raises(PromptTooLongError, match="10 tokens"):
        truncate_prompt(ids, 4, "error")


@pytest.mark.parametrize("train", [True, False])
def test_error_refuses_an_overlong_prompt_naming_it(tmp_path, tiny_assets, tokenizer, train):
    path = write_prompts(tmp_path / "p.parquet", ["1+2=", LONG, LONG])
    with pytest.raises(PromptTooLongError) as refused:
        build_dataset(data_section(tiny_assets), path, tokenizer, train=train)
    message = str(refused.value)
    assert "\n" not in message and f"{path} row 1" in message and "(and 1 more)" in message
    assert "data.max_prompt_length=16" in message and "data.filter_overlong_prompts=true" in message


def test_the_filter_drops_them_and_the_cuts_keep_them(tmp_path, tiny_assets, tokenizer):
    path = write_prompts(tmp_path / "p.parquet", ["1+2=", LONG, "2+2="])
    kept = build_dataset(data_section(tiny_assets, "data.filter_overlong_prompts=true"), path, tokenizer)
    assert [r["raw_prompt"][0]["content"] for r in kept.rows] == ["1+2=", "2+2="]
    assert len(build_dataset(data_section(tiny_assets, "data.truncation=left"), path, tokenizer)) == 3


@pytest.mark.parametrize("side", ["left", "right", "middle"])
def test_the_agent_loop_sends_the_cut_prompt(tiny_assets, tokenizer, side):
    config = load_config(
        [f"actor_rollout_ref.model.path={tiny_assets['model']}", f"data.truncation={side}"], config_name="quickstart"
    )
    full = encode_chat(tokenizer, [{"role": "user", "content": LONG}])
    assert len(full) > 16

    class Server:
        async def generate(self, request_id, prompt_ids, sampling_params):
            self.prompt_ids = prompt_ids
            return type("Out", (), {"token_ids": [1], "log_probs": None})()

    server = Server()
    output = asyncio.run(
        SingleTurnAgentLoop(config, server, tokenizer).run({}, raw_prompt=[{"role": "user", "content": LONG}])
    )
    assert server.prompt_ids == output.prompt_ids == truncate_prompt(full, 16, side)


def test_through_the_entrypoint_one_error_line(tmp_path, tiny_assets, capsys):
    train = write_prompts(tmp_path / "train.parquet", [LONG] * 16)
    code = main(
        [
            "--config-name=quickstart",
            f"data.train_files={train}",
            "data.val_files=null",
            f"actor_rollout_ref.model.path={tiny_assets['model']}",
            f"trainer.default_local_dir={tmp_path}",
            "trainer.total_training_steps=1",
            "trainer.progress_bar=false",
            "trainer.logger=[]",
        ]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and f"{train} row 0" in errors[0], errors
