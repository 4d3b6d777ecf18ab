"""verl's reward managers on V1 (`reward.reward_manager.name`): dapo's overlong punishment, prime, gdpo
(batch: test_batch_reward_manager.py)."""

from __future__ import annotations

import asyncio

import pytest

from core_v1.config import ConfigError, load_config
from core_v1.reward.loop import RewardFunctionRaised, RewardScorer, RewardTimeoutError
from core_v1.reward.managers import reward_manager_policy

SCORE_FILE = """
import time


def exact(data_source, solution_str, ground_truth, extra_info=None):  # no **kwargs: nothing extra may arrive
    if solution_str == "raise":
        raise ZeroDivisionError("no verdict")
    if solution_str == "hang":
        time.sleep(5)
    return float(solution_str.strip() == ground_truth)
"""


@pytest.fixture
def reward_config(tmp_path, tiny_assets):
    score = tmp_path / "score.py"
    score.write_text(SCORE_FILE)

    def build(*extra: str):
        return load_config(
            [
                f"actor_rollout_ref.model.path={tiny_assets['model']}",
                f"data.train_files={tiny_assets['train']}",
                "data.max_response_length=16",
                f"reward.custom_reward_function.path={score}",
                "reward.custom_reward_function.name=exact",
                *extra,
            ]
        ).reward

    return build


DAPO = (
    "reward.reward_manager.name=dapo",
    "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
    "+reward.reward_kwargs.overlong_buffer_cfg.len=4",
    "+reward.reward_kwargs.overlong_buffer_cfg.log=true",
)


def test_dapo_punishes_responses_that_reach_into_the_buffer(reward_config):
    scorer = RewardScorer(reward_config(*DAPO), max_response_length=16)
    row = {"data_source": "arithmetic", "reward_model": {"ground_truth": "3"}}
    scores = [asyncio.run(scorer.score(row, "3", length)) for length in (12, 14, 16)]
    assert [s for s, _ in scores] == [1.0, 0.5, 0.0]  # 12 tokens fit; 14 and 16 reach 2 and 4 into the buffer
    assert [extra["overlong"] for _, extra in scores] == [0.0, 1.0, 1.0]
    naive = RewardScorer(reward_config(), max_response_length=16)
    assert asyncio.run(naive.score(row, "3", 16))[0] == 1.0


def test_prime_scores_per_sample_and_an_unknown_manager_names_the_ones_v1_runs(reward_config):
    assert reward_manager_policy(reward_config("reward.reward_manager.name=prime")).overlong is None


def test_prime_scores_a_failed_call_zero_as_verl_did_where_naive_marks_it_failed(reward_config):
    row = {"data_source": "arithmetic", "reward_model": {"ground_truth": "3"}}
    prime = RewardScorer(reward_config("reward.reward_manager.name=prime", "reward.timeout_s=0.2"))
    scores = [asyncio.run(prime.score(row, text)) for text in ("3", "4", "raise", "hang")]
    assert scores == [
        (1.0, {"scored_zero_on_failure": 0.0}),
        (0.0, {"scored_zero_on_failure": 0.0}),
        (0.0, {"scored_zero_on_failure": 1.0}),
        (0.0, {"scored_zero_on_failure": 1.0}),
    ]
    naive = RewardScorer(reward_config("reward.timeout_s=0.2"))
    for text, failure in (("raise", RewardFunctionRaised), ("hang", RewardTimeoutError)):
        with pytest.raises(failure):
            asyncio.run(naive.score(row, text))
    with pytest.raises(ConfigError, match="V1 runs naive, dapo, prime, gdpo and batch"):
        reward_manager_policy(reward_config("reward.reward_manager.name=judge_loop"))


PARTS_FILE = """
def parts(data_source, solution_str, ground_truth, extra_info=None):
    # Like verl's GDPO example scorer, which picks the chat format by the experiment's name.
    if "qwen" not in extra_info.get("experiment_name", ""):
        raise NotImplementedError(f"unknown model name: {extra_info.get('experiment_name')!r}")
    accuracy = float(solution_str.strip() == ground_truth)
    return {"score": accuracy + 0.5, "accuracy_reward": accuracy, "format_reward": 0.5,
            "row": float(extra_info["index"])}
"""


def test_gdpo_manager_scores_per_sample_with_the_experiment_name_in_extra_info(tmp_path, tiny_assets):
    from core_v1.agent_loop.worker import AgentLoopWorker

    score = tmp_path / "parts.py"
    score.write_text(PARTS_FILE)
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_assets['model']}",
            f"data.train_files={tiny_assets['train']}",
            f"reward.custom_reward_function.path={score}",
            "reward.custom_reward_function.name=parts",
            "reward.reward_manager.name=gdpo",
            "trainer.experiment_name=qwen2.5-1.5B-GDPO",
        ]
    )
    worker = AgentLoopWorker(config, client=None, store=None, tokenizer=None)  # its scorer, as each session uses it
    row = {"data_source": "arithmetic", "reward_model": {"ground_truth": "3"}, "extra_info": {"index": 7}}
    score_value, extra = asyncio.run(worker.reward.score(row, "3", 4))
    assert score_value == 1.5
    assert extra == {"accuracy_reward": 1.0, "format_reward": 0.5, "row": 7.0}  # the components GDPO reads
    assert row["extra_info"] == {"index": 7}  # the row's own extra_info is left as it was
    naive = RewardScorer(
        load_config(
            [
                f"actor_rollout_ref.model.path={tiny_assets['model']}",
                f"data.train_files={tiny_assets['train']}",
                f"reward.custom_reward_function.path={score}",
                "reward.custom_reward_function.name=parts",
            ]
        ).reward
    )
    with pytest.raises(Exception, match="unknown model name"):  # naive passes extra_info as it is
        asyncio.run(naive.score(row, "3", 4))


def test_data_reward_fn_key_names_the_column_passed_as_data_source(tmp_path, tiny_assets):
    score = tmp_path / "by_source.py"
    score.write_text(
        "def by_source(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return {'score': float(data_source == 'mine'), 'source_seen': data_source}\n"
    )
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_assets['model']}",
            f"reward.custom_reward_function.path={score}",
            "reward.custom_reward_function.name=by_source",
            "data.reward_fn_key=origin",
        ]
    )
    scorer = RewardScorer(config.reward, source_key=config.data.reward_fn_key)
    row = {"data_source": "unknown", "origin": "mine", "reward_model": {"ground_truth": "3"}}
    assert asyncio.run(scorer.score(row, "3")) == (1.0, {"source_seen": "mine"})
    # the built-in scorers are chosen by that column too (verl's default_compute_score)
    builtin = RewardScorer(load_config(["data.reward_fn_key=origin"]).reward, source_key="origin")
    gsm8k_row = {"data_source": "unknown", "origin": "openai/gsm8k", "reward_model": {"ground_truth": "3"}}
    assert asyncio.run(builtin.score(gsm8k_row, "#### 3"))[0] == 1.0
