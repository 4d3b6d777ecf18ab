"""`NaiveRewardManager` and `load_reward_manager`: decoding, placement, results, V0 and V1 keys."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer

from core_v1.reward import RewardFunctionError
from core_v1.utils.registry import UnknownNameError
from legacy_v0.protocol import DataProto, object_column
from legacy_v0.reward import NaiveRewardManager, RewardResultError, compute_reward, load_reward_manager, score_batch
from legacy_v0.workers import left_pad, right_pad

REWARD_FILE = """
def my_score(data_source, solution_str, ground_truth, extra_info=None, bonus=0.0, **kwargs):
    return float(solution_str.strip() == ground_truth) + bonus
"""


@pytest.fixture(scope="module")
def tokenizer(tiny_assets):
    return AutoTokenizer.from_pretrained(tiny_assets["model"])


def generated(tokenizer, answers: list[str], truths: list[str]) -> DataProto:
    """Rows as generation leaves them: left-padded prompts, right-padded responses (+ EOS)."""
    questions = ["1 + 2 =", "3 ="] * len(answers)
    prompts, prompt_mask = left_pad([tokenizer.encode(q) for q in questions[: len(answers)]], tokenizer.pad_token_id)
    ids = [tokenizer.encode(a) + [tokenizer.eos_token_id] for a in answers]
    responses, response_mask = right_pad(ids, tokenizer.pad_token_id, torch.long)
    return DataProto.from_dict(
        tensors={
            "prompts": prompts,
            "responses": responses,
            "attention_mask": torch.cat([prompt_mask, response_mask], dim=1),
        },
        non_tensors={
            "data_source": object_column(["arithmetic"] * len(answers)),
            "reward_model": object_column([{"ground_truth": t} for t in truths]),
            "extra_info": object_column([{"index": i} for i in range(len(answers))]),
        },
    )


def test_score_goes_on_the_last_real_response_token(tokenizer):
    data = generated(tokenizer, ["3", "7 7"], ["3", "4"])
    rewards = NaiveRewardManager(tokenizer)(data)  # the built-in scorer for data_source=arithmetic
    lengths = data.batch["attention_mask"][:, data.batch["prompts"].shape[1] :].sum(-1)
    assert rewards[0, lengths[0] - 1] == 1.0 and rewards[0].sum() == 1.0
    assert rewards[1].sum() == 0.0  # 7 is 3 away from 4: beyond the scorer's tolerance
    assert rewards.shape == data.batch["responses"].shape


def test_dict_results_return_their_extras(tokenizer):
    result = NaiveRewardManager(tokenizer)(generated(tokenizer, ["3", "5"], ["3", "4"]), return_dict=True)
    assert result["reward_extra_info"]["exact"] == [1.0, 0.0]
    assert result["reward_tensor"].sum(-1).tolist() == [1.0, 0.5]


def test_async_and_custom_functions_and_kwargs(tokenizer):
    async def halves(data_source, solution_str, ground_truth, extra_info=None, scale=1.0):
        return scale * len(solution_str)

    manager = NaiveRewardManager(tokenizer, compute_score=halves, scale=0.5)
    rewards, extra = compute_reward(generated(tokenizer, ["3", "12"], ["3", "4"]), manager)
    assert rewards.sum(-1).tolist() == [0.5, 1.0] and extra == {}


def test_a_malformed_result_is_a_user_error(tokenizer):
    manager = NaiveRewardManager(tokenizer, compute_score=lambda **kw: {"value": 1.0})
    with pytest.raises(RewardResultError, match="without 'score'") as error:
        manager(generated(tokenizer, ["3"], ["3"]))
    assert isinstance(error.value, RewardFunctionError)  # so the entrypoint prints one `error:` line
    with pytest.raises(RewardResultError, match="return a number"):
        NaiveRewardManager(tokenizer, compute_score=lambda **kw: "high")(generated(tokenizer, ["3"], ["3"]))


def test_load_reward_manager_reads_the_v0_keys(tokenizer, tmp_path):
    path = tmp_path / "reward.py"
    path.write_text(REWARD_FILE)
    v0 = OmegaConf.create(
        {
            "reward_model": {"reward_manager": "naive", "reward_kwargs": {"bonus": 0.25}},
            "custom_reward_function": {"path": str(path), "name": "my_score"},
        }
    )
    rewards = load_reward_manager(v0, tokenizer)(generated(tokenizer, ["3", "5"], ["3", "4"]))
    assert rewards.sum(-1).tolist() == [1.25, 0.25]


def test_load_reward_manager_reads_the_v1_homes(tokenizer, tmp_path, small_config):
    path = tmp_path / "reward.py"
    path.write_text(REWARD_FILE)
    config = small_config(
        1, f"reward.custom_reward_function.path={path}", "reward.custom_reward_function.name=my_score"
    )
    manager = load_reward_manager(config, tokenizer)
    assert manager.compute_score.__name__ == "my_score"


def test_unknown_manager_and_missing_function_say_what_to_fix(tokenizer, tmp_path):
    with pytest.raises(
        UnknownNameError, match="unknown V0 reward manager 'primal'.*Known: batch, dapo, gdpo, naive, prime"
    ):
        load_reward_manager(OmegaConf.create({"reward_model": {"reward_manager": "primal"}}), tokenizer)
    with pytest.raises(RewardFunctionError, match="does not exist"):
        load_reward_manager(OmegaConf.create({"custom_reward_function": {"path": str(tmp_path / "no.py")}}), tokenizer)


def test_a_score_that_raises_fails_its_sample_only(tokenizer):
    async def grader(data_source, solution_str, ground_truth, extra_info=None):
        if solution_str.strip() == "5":
            raise ValueError("grader crashed")
        return {"score": 1.0, "exact": 1.0}

    def sync_grader(**kwargs):
        if kwargs["solution_str"].strip() == "5":
            raise ValueError("grader crashed")
        return {"score": 1.0, "exact": 1.0}

    for compute_score in (grader, sync_grader):  # awaited together, or called one by one
        rewards, extra, failed = score_batch(
            generated(tokenizer, ["3", "5", "4"], ["3", "4", "4"]),
            NaiveRewardManager(tokenizer, compute_score=compute_score),
        )
        assert list(failed) == [1] and "ValueError: grader crashed" in failed[1]
        assert rewards.sum(-1).tolist() == [1.0, 0.0, 1.0] and extra == {"exact": [1.0, None, 1.0]}
