"""The served reward model: scoring, micro-batching, re-encoding, combination with the rule score,
and its config keys (V1 homes and verl's V0 names)."""

from __future__ import annotations

import math

import pytest
import torch

from core_v1.agent_loop.base import encode_chat
from core_v1.config import ConfigError, load_config
from core_v1.config.schema import unsupported_features
from core_v1.reward.reward_model import (
    RewardModel,
    build_reward_model,
    combine_scores,
    rule_function_for,
    rule_score_or_nan,
    score_padded_batch,
)
from tests.conftest import quickstart_overrides


def _random_reward_model(out, tokenizer, seed=0):
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    Qwen2ForSequenceClassification(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def policy_tokenizer(tiny_assets):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_assets["model"])


@pytest.fixture(scope="module")
def same_tokenizer_rm(tmp_path_factory, policy_tokenizer):
    return _random_reward_model(tmp_path_factory.mktemp("rm-same"), policy_tokenizer)


@pytest.fixture(scope="module")
def own_tokenizer_rm(tmp_path_factory):
    from examples.reward_model.make_reward_model import reward_model_tokenizer

    return _random_reward_model(tmp_path_factory.mktemp("rm-own"), reward_model_tokenizer())


def _rows(tokenizer, answers=("3", "12", "", "7 7 7")):
    chats = [[{"role": "user", "content": f"{i}+2="}] for i in range(len(answers))]
    prompts = [encode_chat(tokenizer, chat) for chat in chats]
    responses = [[*tokenizer.encode(a, add_special_tokens=False), tokenizer.eos_token_id] for a in answers]
    return prompts, responses, chats


def test_a_row_scores_the_same_alone_in_any_micro_batch_and_as_hf_pools_it(same_tokenizer_rm, policy_tokenizer):
    prompts, responses, chats = _rows(policy_tokenizer)
    reward_model = RewardModel.from_pretrained(str(same_tokenizer_rm), policy_tokenizer, micro_batch_size=3)
    assert not reward_model.reencode
    together = reward_model.score(prompts, responses, chats)
    alone = torch.cat([reward_model.score([p], [r], [c]) for p, r, c in zip(prompts, responses, chats)])
    assert together.shape == (4,) and torch.allclose(together, alone, atol=1e-5)
    for prompt, response, score in zip(prompts, responses, together):  # one unpadded row: HF's own pooling
        ids = torch.tensor([[*prompt, *response]])
        assert reward_model.model(input_ids=ids).logits[0, 0].item() == pytest.approx(score.item(), abs=1e-5)
    assert len(set(together.tolist())) == 4  # the rows really differ


def test_another_tokenizer_re_encodes_through_its_chat_template(own_tokenizer_rm, policy_tokenizer):
    prompts, responses, chats = _rows(policy_tokenizer)
    reward_model = RewardModel.from_pretrained(str(own_tokenizer_rm), policy_tokenizer)
    assert reward_model.reencode
    texts = [reward_model.tokenizer.decode(reward_model.encode(p, r, c)) for p, r, c in zip(prompts, responses, chats)]
    assert texts == ["Q: 0+2=\nA: 3\n", "Q: 1+2=\nA: 12\n", "Q: 2+2=\nA: \n", "Q: 3+2=\nA: 7 7 7\n"]
    # Without the messages, the decoded prompt and response go in as plain text.
    plain = reward_model.tokenizer.decode(reward_model.encode(prompts[0], responses[0], None))
    assert "0+2=" in plain and plain.endswith("3") and not plain.startswith("Q:")


def test_max_length_keeps_the_end(same_tokenizer_rm, policy_tokenizer):
    prompts, responses, _ = _rows(policy_tokenizer)
    reward_model = RewardModel.from_pretrained(str(same_tokenizer_rm), policy_tokenizer, max_length=3)
    assert reward_model.encode(prompts[1], responses[1]) == [*prompts[1], *responses[1]][-3:]


def test_padded_batch_layout(same_tokenizer_rm, policy_tokenizer):
    prompts, responses, chats = _rows(policy_tokenizer)
    prompts[0] = prompts[0][1:]  # prompts of different lengths, so the left padding shows
    reward_model = RewardModel.from_pretrained(str(same_tokenizer_rm), policy_tokenizer)
    left, left_mask = _pad(prompts, policy_tokenizer.pad_token_id, left=True)
    right, right_mask = _pad(responses, policy_tokenizer.pad_token_id, left=False)
    padded = score_padded_batch(reward_model, left, right, torch.cat([left_mask, right_mask], 1), chats)
    assert torch.allclose(padded, reward_model.score(prompts, responses, chats), atol=1e-5)


def _pad(rows, pad, left):
    width = max(len(r) for r in rows)
    ids, mask = torch.full((len(rows), width), pad), torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        span = slice(width - len(row), width) if left else slice(0, len(row))
        ids[i, span], mask[i, span] = torch.tensor(row), 1
    return ids, mask


def test_combine_replace_add_and_unscored_rows():
    rule = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.0]])
    attention = torch.tensor([[1, 1, 0], [1, 0, 0]])
    rm = torch.tensor([2.0, -1.0])
    replaced, metrics = combine_scores(rule, rm, attention, "replace")
    assert replaced.tolist() == [[0.0, 2.0, 0.0], [-1.0, 0.0, 0.0]]
    assert metrics == {"reward_model/score/mean": 0.5, "reward_model/rule_score/mean": 0.75}
    added, _ = combine_scores(rule, rm, attention, "add")
    assert added.tolist() == [[0.0, 3.0, 0.0], [-0.5, 0.0, 0.0]]
    rule[1, 0] = math.nan  # no rule scorer for this row's data source
    replaced, metrics = combine_scores(rule, rm, attention, "replace")
    assert not replaced.isnan().any() and metrics["reward_model/rule_score/mean"] == 1.0
    with pytest.raises(ValueError, match="combine=add needs a rule score for every row"):
        combine_scores(rule, rm, attention, "add")


def test_rule_score_is_optional_only_when_the_model_replaces_it(tiny_assets, tmp_path):
    assert math.isnan(rule_score_or_nan("hh_rlhf", "hi", None))
    assert rule_score_or_nan("arithmetic", "3", "3")["score"] == 1.0
    replace = load_config(
        quickstart_overrides(
            tiny_assets, tmp_path, 1, "reward.reward_model.enable=true", "reward.reward_model.model_path=/rm"
        ),
        config_name="quickstart",
    )
    add = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            1,
            "reward.reward_model.enable=true",
            "reward.reward_model.model_path=/rm",
            "reward.reward_model.combine=add",
        ),
        config_name="quickstart",
    )
    assert rule_function_for(replace.reward, None) is rule_score_or_nan
    assert rule_function_for(add.reward, None) is not rule_score_or_nan


def test_config_keys(tiny_assets, tmp_path, same_tokenizer_rm, policy_tokenizer, capsys):
    def config(*extra):
        return load_config(quickstart_overrides(tiny_assets, tmp_path, 1, *extra), config_name="quickstart")

    with pytest.raises(ConfigError, match="reward.reward_model.combine='mean' is not one of replace, add"):
        config("reward.reward_model.combine=mean")
    assert any(
        "needs reward.reward_model.model_path" in p
        for p in unsupported_features(config("reward.reward_model.enable=true"))
    )
    cfg = config(
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={same_tokenizer_rm}",
        "reward.reward_model.micro_batch_size_per_gpu=2",
        "+reward.reward_model.rollout.gpu_memory_utilization=0.4",
        "reward.reward_model.n_gpus_per_node=8",
    )
    assert not unsupported_features(cfg)
    reward_model = build_reward_model(cfg.reward.reward_model, policy_tokenizer, "cpu")
    assert reward_model.micro_batch_size == 2
    assert "reward.reward_model.rollout.gpu_memory_utilization has no effect" in capsys.readouterr().err
    assert build_reward_model(config().reward.reward_model, policy_tokenizer, "cpu") is None
    # input_tokenizer: the tokenizer that wrote the policy's tokens, loaded from its path.
    cfg = config(
        "reward.reward_model.enable=true",
        f"reward.reward_model.model_path={same_tokenizer_rm}",
        f"reward.reward_model.input_tokenizer={tiny_assets['model']}",
    )
    reward_model = build_reward_model(cfg.reward.reward_model, object(), "cpu")
    assert reward_model.input_tokenizer.get_vocab() == policy_tokenizer.get_vocab() and not reward_model.reencode


@pytest.mark.parametrize(
    "v0_key, v1_key",
    [
        ("reward_model.enable", "reward.reward_model.enable"),
        ("reward_model.model.path", "reward.reward_model.model_path"),
        ("reward_model.micro_batch_size_per_gpu", "reward.reward_model.micro_batch_size_per_gpu"),
        ("reward_model.micro_batch_size", "reward.reward_model.micro_batch_size_per_gpu"),
        ("reward_model.max_length", "reward.reward_model.max_length"),
        ("reward_model.model.input_tokenizer", "reward.reward_model.input_tokenizer"),
        ("reward_model.model.trust_remote_code", "reward.reward_model.trust_remote_code"),
    ],
)
def test_verl_reward_model_keys_move_to_their_v1_homes(v0_key, v1_key):
    from shims.rename_table import resolve_config_key

    assert resolve_config_key(v0_key, "1").new_key == v1_key
