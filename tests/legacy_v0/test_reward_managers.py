"""verl's `dapo`, `batch` and `prime` reward managers on V0, and how the V0 config selects them."""

from __future__ import annotations

import time

import pytest
from transformers import AutoTokenizer

from core_v1.reward import RewardFunctionError
from legacy_v0.config import OverlongBufferConfig, compose_v0
from legacy_v0.reward import (
    BatchRewardManager,
    DAPORewardManager,
    NaiveRewardManager,
    PrimeRewardManager,
    RewardResultError,
    load_reward_manager,
)
from shims.v0_keys import KeyTableOnV0
from tests.legacy_v0.test_reward import generated


@pytest.fixture(scope="module")
def tokenizer(tiny_assets):
    return AutoTokenizer.from_pretrained(tiny_assets["model"])


def exact(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return float(solution_str.strip() == ground_truth)


def response_lengths(data) -> list[int]:
    return data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :].sum(-1).tolist()


def test_dapo_punishes_only_the_part_beyond_the_buffer_start(tokenizer):
    data = generated(tokenizer, ["3", "3 3 3 3 3"], ["3", "3"])
    short, long = response_lengths(data)
    # The buffer starts right after the short response: it is not punished, the long one is,
    # linearly in how far it reaches into the buffer.
    buffer = OverlongBufferConfig(enable=True, len=long - short + 2, penalty_factor=1.0, log=True)
    manager = DAPORewardManager(
        tokenizer, compute_score=exact, max_resp_len=short + buffer.len, overlong_buffer_cfg=buffer
    )
    result = manager(data, return_dict=True)
    expected_penalty = -(long - short) / buffer.len
    assert result["reward_tensor"].sum(-1).tolist() == pytest.approx([1.0, 0.0 + expected_penalty])
    assert result["reward_extra_info"]["overlong"] == [False, True]
    assert result["reward_extra_info"]["acc"] == [1.0, 0.0]  # verl reports a plain score as acc
    plain = DAPORewardManager(tokenizer, compute_score=exact)(data)
    assert plain.sum(-1).tolist() == [1.0, 0.0]  # without the buffer: the naive score


def test_dapo_overlong_buffer_from_verl_keys_in_both_homes(tokenizer, tiny_assets):
    base = [
        f"actor_rollout_ref.model.path={tiny_assets['model']}",
        f"data.train_files={tiny_assets['train']}",
        "data.max_response_length=16",
        "reward_model.reward_manager=dapo",
    ]
    recipe = compose_v0(
        overrides=[
            *base,
            "reward_model.overlong_buffer.enable=True",
            "reward_model.overlong_buffer.len=4",
            "reward_model.overlong_buffer.penalty_factor=2",
        ],
        legacy_keys=KeyTableOnV0(),
    )
    example = compose_v0(
        overrides=[
            *base,
            "+reward_model.reward_kwargs.overlong_buffer_cfg.enable=True",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.len=4",
            "+reward_model.reward_kwargs.overlong_buffer_cfg.penalty_factor=2",
            "+reward_model.reward_kwargs.max_resp_len=16",
        ],
        legacy_keys=KeyTableOnV0(),
    )
    for v0 in (recipe, example):
        manager = load_reward_manager(v0.ppo_config(), tokenizer, settings=v0.settings)
        assert isinstance(manager, DAPORewardManager)
        assert (manager.max_resp_len, manager.overlong.len, manager.overlong.penalty_factor) == (16, 4, 2.0)


def batch_score(data_sources, solution_strs, ground_truths, extra_infos, offset=0.0):
    assert len(data_sources) == len(solution_strs) == len(ground_truths) == len(extra_infos)
    return [
        {"score": float(s.strip() == t) + offset, "seen": len(solution_strs)}
        for s, t in zip(solution_strs, ground_truths)
    ]


def test_batch_manager_scores_the_whole_batch_in_one_call(tokenizer):
    data = generated(tokenizer, ["3", "5", "4"], ["3", "4", "4"])
    result = BatchRewardManager(tokenizer, compute_score=batch_score, offset=0.5)(data, return_dict=True)
    assert result["reward_tensor"].sum(-1).tolist() == [1.5, 0.5, 1.5]
    assert result["reward_extra_info"]["seen"] == [3, 3, 3]


def test_batch_manager_needs_a_list_function_and_one_score_per_row(tokenizer):
    with pytest.raises(RewardFunctionError, match="custom_reward_function.path"):
        BatchRewardManager(tokenizer)
    manager = BatchRewardManager(tokenizer, compute_score=lambda **kw: [1.0])
    with pytest.raises(RewardResultError, match="returned 1 scores for 2"):
        manager(generated(tokenizer, ["3", "5"], ["3", "4"]))


def slow_on_seven(data_source, solution_str, ground_truth, extra_info=None):
    if "7" in solution_str:
        time.sleep(30)
    if "5" in solution_str:
        raise ValueError("the verifier crashed")
    return float(solution_str.strip() == ground_truth)


def test_prime_scores_in_processes_and_a_hanging_or_failing_verifier_scores_zero(tokenizer, capsys):
    data = generated(tokenizer, ["3", "7", "5", "4"], ["3", "7", "5", "4"])
    manager = PrimeRewardManager(tokenizer, compute_score=slow_on_seven, num_processes=4, timeout_s=2.0)
    started = time.monotonic()
    rewards = manager(data)
    assert time.monotonic() - started < 20  # the hanging call was not waited for
    assert rewards.sum(-1).tolist() == [1.0, 0.0, 0.0, 1.0]
    out = capsys.readouterr().out
    assert "row 1: scoring took longer than 2.0s" in out and "row 2: ValueError: the verifier crashed" in out
    assert NaiveRewardManager(tokenizer, compute_score=exact)(generated(tokenizer, ["3"], ["3"])).sum() == 1.0


def named_parts(data_source, solution_str, ground_truth, extra_info=None):
    return {
        "score": float(solution_str.strip() == ground_truth),
        "accuracy_reward": 1.0,
        "qwen_run": float("qwen" in extra_info.get("experiment_name", "")),
        "row": float(extra_info["index"]),
    }


def test_gdpo_manager_adds_the_experiment_name_to_extra_info(tokenizer, tiny_assets, tmp_path):
    from legacy_v0.reward import GDPORewardManager

    score = tmp_path / "parts.py"
    score.write_text(
        "def parts(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': 1.0, 'qwen_run': float('qwen' in extra_info['experiment_name'])}\n"
    )
    v0 = compose_v0(
        overrides=[
            f"actor_rollout_ref.model.path={tiny_assets['model']}",
            f"data.train_files={tiny_assets['train']}",
            "reward.reward_manager.name=gdpo",
            f"reward.custom_reward_function.path={score}",
            "reward.custom_reward_function.name=parts",
            "trainer.experiment_name=qwen-gdpo",
        ],
        legacy_keys=KeyTableOnV0(),
    )
    manager = load_reward_manager(v0.ppo_config(), tokenizer, settings=v0.settings)
    assert isinstance(manager, GDPORewardManager) and manager.experiment_name == "qwen-gdpo"
    data = generated(tokenizer, ["3", "5"], ["3", "4"])
    assert manager(data, return_dict=True)["reward_extra_info"]["qwen_run"] == [1.0, 1.0]
    result = GDPORewardManager(tokenizer, compute_score=named_parts, experiment_name="qwen")(data, return_dict=True)
    assert result["reward_extra_info"]["row"] == [0.0, 1.0]  # the row's own extra_info is kept
    assert list(data.non_tensor_batch["extra_info"]) == [{"index": 0}, {"index": 1}]  # and not changed
    assert NaiveRewardManager(tokenizer, compute_score=named_parts)(data, return_dict=True)["reward_extra_info"][
        "qwen_run"
    ] == [0.0, 0.0]
