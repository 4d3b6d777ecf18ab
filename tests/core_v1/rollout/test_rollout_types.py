"""SamplingParams parsing/validation, TokenOutput, and the sampling function's statistics."""

import pytest
import torch

from core_v1.rollout.engines.sampling import position_seed, sample_next_tokens, seed_key, token_uniforms
from core_v1.rollout.types import SamplingParams, SamplingParamsError, TokenOutput


def test_from_dict_accepts_verl_style_keys_and_aliases():
    params = SamplingParams.from_dict(
        {
            "temperature": 0.7,
            "top_p": 0.9,
            "top_k": 0,
            "repetition_penalty": 1.0,
            "logprobs": 1,
            "max_new_tokens": 12,
            "n": 1,
            "stop_token_ids": [3, 4],
        }
    )
    assert params == SamplingParams(temperature=0.7, top_p=0.9, top_k=-1, max_tokens=12, stop_token_ids=(3, 4))
    assert SamplingParams.from_dict({"response_length": 5}).max_tokens == 5
    assert SamplingParams.from_dict({"do_sample": False, "temperature": 1.0}).greedy
    assert SamplingParams.from_dict({"logprobs": None}).logprobs is False
    assert SamplingParams.from_dict(None) == SamplingParams()


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ({"temprature": 1.0}, "unknown sampling parameter 'temprature'"),
        ({"temperature": -1}, "temperature must be"),
        ({"top_p": 0.0}, "top_p must be in (0, 1]"),
        ({"top_k": -3}, "top_k must be"),
        ({"max_tokens": 2.5}, "max_tokens must be"),
        ({"max_tokens": 4, "max_new_tokens": 4}, "sets 'max_tokens' twice"),
        ({"repetition_penalty": 1.2}, "repetition_penalty=1.2 is not supported"),
        ({"n": 4}, "actor_rollout_ref.rollout.n"),
        ({"logprobs": 5}, "only the sampled token's log-prob"),
        ({"seed": "x"}, "seed must be an int"),
    ],
)
def test_from_dict_rejects_with_a_message_naming_the_problem(bad, fragment):
    with pytest.raises(SamplingParamsError) as excinfo:
        SamplingParams.from_dict(bad)
    assert fragment in str(excinfo.value)


def test_token_output_rejects_unknown_stop_reason():
    with pytest.raises(ValueError, match="stop_reason"):
        TokenOutput(stop_reason="eos")


def test_position_seeds_differ_across_positions_and_seeds():
    seeds = {position_seed(s, t) for s in range(20) for t in range(50)}
    assert len(seeds) == 1000 and all(0 <= s < 2**63 for s in seeds)


def test_sampling_frequencies_follow_the_tempered_softmax():
    torch.manual_seed(0)
    logits = torch.randn(12).repeat(20000, 1)
    params = [SamplingParams(temperature=0.8)] * len(logits)
    tokens, log_probs = sample_next_tokens(logits, params, [0] * len(logits), seeds=range(len(logits)))
    expected = torch.softmax(logits[0] / 0.8, dim=-1)
    frequencies = torch.bincount(tokens, minlength=12).float() / len(tokens)
    assert torch.allclose(frequencies, expected, atol=0.015)
    assert torch.allclose(log_probs, torch.log(expected)[tokens], atol=1e-5)
    # the same seed at successive positions is as good a stream as many seeds
    by_position = sample_next_tokens(logits, params, range(len(logits)), seeds=[3] * len(logits))[0]
    assert torch.allclose(torch.bincount(by_position, minlength=12).float() / len(tokens), expected, atol=0.015)


def test_top_k_and_top_p_restrict_the_support_but_not_the_reported_log_prob():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.5, 0.0, -1.0]]).repeat(4000, 1)
    seeds = range(4000)
    top_k = sample_next_tokens(logits, [SamplingParams(top_k=2)] * 4000, [0] * 4000, seeds)[0]
    assert set(top_k.tolist()) == {0, 1}
    probs = torch.softmax(logits[0], dim=-1)  # 0.61, 0.22, 0.08, ...: the 0.8 nucleus is tokens 0-1
    top_p, log_probs = sample_next_tokens(logits, [SamplingParams(top_p=0.8)] * 4000, [0] * 4000, seeds)
    assert set(top_p.tolist()) == {0, 1}
    assert torch.allclose(log_probs, torch.log(probs)[top_p], atol=1e-5)  # unfiltered distribution
    kept = probs[:2] / probs[:2].sum()
    assert torch.allclose(torch.bincount(top_p, minlength=2).float() / 4000, kept, atol=0.03)


def test_seeded_rows_draw_by_seed_and_position_only():
    logits = torch.randn(3, 50)
    params = [SamplingParams(seed=7), SamplingParams(seed=8), SamplingParams(seed=7)]
    tokens = sample_next_tokens(logits[[0, 0, 0]], params, [5, 5, 5])[0]
    alone = sample_next_tokens(logits[[0]], params[:1], [5])[0]
    assert tokens[0] == tokens[2] == alone[0]
    draws = {sample_next_tokens(logits[[0]], params[:1], [t])[0].item() for t in range(40)}
    assert len(draws) > 5  # a new position is a new draw
    # a row that filters does not change what an unfiltered neighbour draws
    mixed = sample_next_tokens(logits[[0, 0]], [params[0], SamplingParams(seed=9, top_k=3)], [5, 5])[0]
    assert mixed[0] == alone[0]
    with pytest.raises(ValueError, match="give seeds"):
        sample_next_tokens(logits, [SamplingParams()] * 3, [0] * 3)


def test_greedy_rows_take_the_argmax_and_report_untempered_log_probs():
    logits = torch.randn(4, 30)
    tokens, log_probs = sample_next_tokens(logits, [SamplingParams(temperature=0)] * 4, [0] * 4, seeds=[0] * 4)
    assert torch.equal(tokens, logits.argmax(dim=-1))
    assert torch.allclose(log_probs, torch.log_softmax(logits, -1).gather(1, tokens[:, None]).squeeze(1))


def test_the_device_hash_matches_integer_arithmetic():
    """token_uniforms' int64 tensor hash equals the same murmur3 mix done on Python ints."""

    def fmix32(h):
        h ^= h >> 16
        h = (h * 0x85EBCA6B) & 0xFFFFFFFF
        h ^= h >> 13
        h = (h * 0xC2B2AE35) & 0xFFFFFFFF
        return h ^ (h >> 16)

    seeds, positions = [0, 1, 2**62 + 12345, 987654321], [0, 7, 2**31 + 5, 123456]
    keys = [seed_key(s) for s in seeds]
    got = token_uniforms(
        torch.tensor([k[0] for k in keys]), torch.tensor([k[1] for k in keys]), torch.tensor(positions), 5
    )
    for (lo, hi), position, row in zip(keys, positions, got.tolist()):
        for token, u in enumerate(row):
            h = fmix32(fmix32(lo ^ ((position * 0x9E3779B9) & 0xFFFFFFFF)) ^ ((token * 0x85EBCA77) & 0xFFFFFFFF))
            h = fmix32(h ^ hi)
            assert u == min(((h >> 9) + 0.5) * 2.0**-23, 1 - 2.0**-23)
