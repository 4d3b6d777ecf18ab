"""examples/custom_dataset: a user's dataset class (data.custom_cls) and a chat template of the command
line (model.custom_chat_template with data.apply_chat_template_kwargs) shape the prompts the trainers
train on, on V1 and V0."""

from __future__ import annotations

from pathlib import Path

import pytest

from core_v1.agent_loop.base import encode_chat, load_policy_tokenizer
from core_v1.config import load_config
from core_v1.data import DataError, build_dataset
from core_v1.utils.tracking import read_metrics
from tests.conftest import quickstart_overrides

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "custom_dataset" / "my_dataset.py"
# Newlines inside Jinja's string literals, as verl's templates write them (Jinja makes each `\\n` a newline).
TEMPLATE = (
    '{% if hint %}{{ "<|im_start|>system\\n" + hint + "<|im_end|>\\n" }}{% endif %}{% for m in messages %}'
    '{{ "<|im_start|>" + m.role + "\\n" + m.content + "<|im_end|>\\n" }}{% endfor %}'
    '{% if add_generation_prompt %}{{ "<|im_start|>assistant\\n" }}{% endif %}'
)
OVERRIDES = (
    f"data.custom_cls.path={EXAMPLE}",
    "data.custom_cls.name=FewShotDataset",
    f"actor_rollout_ref.model.custom_chat_template='{TEMPLATE}'",
    "+data.apply_chat_template_kwargs.hint=system",
    "data.max_prompt_length=48",
)  # the solved example lengthens the prompt past the quickstart's 16


def _config(assets, out, *extra):
    return load_config(
        quickstart_overrides(assets, out, 1, "trainer.test_freq=-1", "trainer.logger=[jsonl]", *OVERRIDES, *extra),
        config_name="quickstart",
    )


def _expected_prompt_length(config) -> int:
    """Every row's prompt has one length here (single-digit operands): the example's few-shot
    question under the command line's template, with its `hint` system turn."""
    tokenizer = load_policy_tokenizer(config)
    rows = build_dataset(config.data, config.data.train_files, tokenizer).rows
    lengths = {len(encode_chat(tokenizer, row["raw_prompt"], **config.data.apply_chat_template_kwargs)) for row in rows}
    assert len(lengths) == 1
    return lengths.pop()


def test_the_dataset_class_builds_the_rows_and_the_template_its_tokens(tiny_assets, tmp_path):
    config = _config(tiny_assets, tmp_path)
    tokenizer = load_policy_tokenizer(config)
    rows = build_dataset(config.data, config.data.train_files, tokenizer).rows
    assert rows[0]["raw_prompt"][0]["content"].startswith("1+2=3 ")
    assert rows[0]["reward_model"]["ground_truth"] and rows[0]["data_source"] == "arithmetic"
    plain = load_policy_tokenizer(load_config(quickstart_overrides(tiny_assets, tmp_path, 1), config_name="quickstart"))
    hinted = tokenizer.decode(encode_chat(tokenizer, rows[0]["raw_prompt"], hint="system"))
    assert hinted.startswith("<|im_start|>system\nsystem<|im_end|>\n<|im_start|>user\n1+2=3 ")
    assert len(encode_chat(tokenizer, rows[0]["raw_prompt"], hint="system")) > len(
        encode_chat(plain, rows[0]["raw_prompt"], hint="system")
    )  # the model's own template has no hint


@pytest.mark.parametrize(
    "custom_cls, message",
    [
        ("data.custom_cls.name=NoSuchClass", "has no 'NoSuchClass'"),
        ("data.custom_cls.name=pq", "not a torch.utils.data.Dataset"),
    ],
)
def test_a_bad_dataset_class_is_one_error_line(tiny_assets, tmp_path, custom_cls, message):
    config = _config(tiny_assets, tmp_path, custom_cls)
    with pytest.raises(DataError, match=message) as error:
        build_dataset(config.data, config.data.train_files)
    assert "\n" not in str(error.value)


@pytest.mark.slow
def test_v1_trains_on_the_custom_prompts(tiny_assets, ray_runtime, tmp_path):
    from core_v1.main_ppo import run_v1

    config = _config(tiny_assets, tmp_path)
    assert run_v1(config) == 0
    (step,) = read_metrics(tmp_path / "metrics.jsonl")
    assert step["prompt_length/mean"] == _expected_prompt_length(config)


@pytest.mark.slow
def test_v0_trains_on_the_custom_prompts(tiny_assets, tmp_path):
    from legacy_v0.main_ppo import run_ppo

    config = _config(tiny_assets, tmp_path, "trainer.use_v1=false")
    (step,) = run_ppo(config)
    assert step["prompt_length/mean"] == _expected_prompt_length(config)
