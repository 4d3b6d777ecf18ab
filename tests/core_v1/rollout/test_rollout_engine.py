"""The hf engine's decode loop against transformers' own forward and generate on a tiny Qwen2."""

import asyncio

import pytest
import torch

from core_v1.rollout import LLMServer, RolloutError, SamplingParams
from core_v1.rollout.engines import ENGINES, get_engine_cls
from core_v1.rollout.engines.hf import HFEngine
from core_v1.utils.registry import UnknownNameError

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20], [30, 31, 32, 33]]
GREEDY = SamplingParams(temperature=0, max_tokens=24)
EOS = 1  # the tiny model's (conftest.py)


@pytest.fixture
def server(tiny_model_path, engine_kwargs):
    server = LLMServer.from_model(tiny_model_path, **engine_kwargs)
    yield server
    server.shutdown()


def generate_all(server, prompts, params):
    async def scenario():
        return await asyncio.gather(*(server.generate(f"r{i}", p, params) for i, p in enumerate(prompts)))

    return asyncio.run(scenario())


def test_engine_registry_knows_hf_and_explains_unknown_names():
    assert get_engine_cls("hf") is HFEngine and "hf" in ENGINES
    with pytest.raises(UnknownNameError, match="unknown rollout engine 'hff'.*Did you mean 'hf'"):
        get_engine_cls("hff")


def test_vllm_engine_without_vllm_says_how_to_install_it():
    try:
        import vllm  # noqa: F401

        pytest.skip("vllm is installed here")
    except ImportError:
        pass
    with pytest.raises(ImportError, match="pip install 'rlbridge\\[vllm\\]'.*rollout.name=hf"):
        get_engine_cls("vllm")


def test_greedy_batch_of_different_lengths_equals_transformers_generate(server, greedy_reference):
    outputs = generate_all(server, PROMPTS, GREEDY)
    for prompt, out in zip(PROMPTS, outputs):
        assert out.token_ids == greedy_reference(prompt, 24)
        assert out.stop_reason == ("stop" if out.token_ids[-1] == EOS else "length")
    assert {o.stop_reason for o in outputs} == {"stop", "length"}  # both ways of ending are exercised
    assert server.engine.stats.prefill_cohorts == 1 and server.engine.stats.peak_batch_size == 4


def test_requests_joining_mid_flight_equal_transformers_generate(server, greedy_reference, wait_until):
    long_params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    stats = server.engine.stats

    async def scenario():
        first = asyncio.ensure_future(server.generate("long", PROMPTS[2], long_params))
        await wait_until(lambda: stats.decode_steps >= 5)
        joined = await asyncio.gather(*(server.generate(f"j{i}", p, GREEDY) for i, p in enumerate(PROMPTS[:2])))
        return await first, joined

    first, joined = asyncio.run(scenario())
    assert stats.prefill_cohorts == 2 and stats.peak_batch_size == 3  # merged into the running batch
    for prompt, out in zip(PROMPTS[:2], joined):
        assert out.token_ids == greedy_reference(prompt, 24)
    assert first.token_ids[: len(greedy_reference(PROMPTS[2], 40))] == greedy_reference(PROMPTS[2], 40)
    assert len(first.token_ids) == 40 and first.stop_reason == "length"


def test_seeded_sampling_is_reproducible_and_independent_of_the_batch(server):
    params = SamplingParams(temperature=1.0, max_tokens=30, seed=11, ignore_eos=True)
    alone = generate_all(server, PROMPTS[1:2], params)[0]
    others = [SamplingParams(temperature=0.9, top_k=20, seed=s, max_tokens=10 + 5 * s) for s in range(3)]

    async def batched():
        return await asyncio.gather(
            server.generate("x", PROMPTS[1], params),
            *(server.generate(f"o{i}", p, sp) for i, (p, sp) in enumerate(zip(PROMPTS[2:], others))),
        )

    assert asyncio.run(batched())[0].token_ids == alone.token_ids
    reseeded = generate_all(server, PROMPTS[1:2], params.replace(seed=12))[0]
    assert reseeded.token_ids != alone.token_ids


def test_log_probs_equal_a_full_forward_under_the_temperature(server, log_prob_reference):
    params = SamplingParams(temperature=0.7, top_k=10, max_tokens=20, seed=3)
    outputs = generate_all(server, PROMPTS, params)
    for prompt, out in zip(PROMPTS, outputs):
        expected = log_prob_reference(prompt, out.token_ids, temperature=0.7)
        assert out.log_probs == pytest.approx(expected, abs=1e-4)
    assert generate_all(server, PROMPTS[:1], params.replace(logprobs=False))[0].log_probs == []


def test_stop_tokens_and_max_tokens(server, greedy_reference):
    expected = greedy_reference(PROMPTS[3], 24)
    stop_at = expected[3]
    stopped = generate_all(server, PROMPTS[3:], GREEDY.replace(stop_token_ids=(stop_at,)))[0]
    assert stopped.token_ids == expected[: expected.index(stop_at) + 1] and stopped.stop_reason == "stop"
    short = generate_all(server, PROMPTS[3:], GREEDY.replace(max_tokens=2))[0]
    assert short.token_ids == expected[:2] and short.stop_reason == "length"
    empty = generate_all(server, PROMPTS[3:], GREEDY.replace(max_tokens=0))[0]
    assert empty.token_ids == [] and empty.stop_reason == "length"


def test_context_limit_ends_with_length_and_bad_prompts_are_refused(tiny_model_path, engine_kwargs):
    server = LLMServer.from_model(tiny_model_path, max_model_len=12, **engine_kwargs)
    try:
        out = generate_all(server, PROMPTS[:1], SamplingParams(temperature=0, ignore_eos=True))[0]
        assert len(out.token_ids) == 12 - len(PROMPTS[0]) and out.stop_reason == "length"
        with pytest.raises(RolloutError, match="leaves no room in the context of 12"):
            generate_all(server, [list(range(2, 14))], GREEDY)
        with pytest.raises(RolloutError, match="empty prompt"):
            generate_all(server, [[]], GREEDY)
        with pytest.raises(RolloutError, match="tokenize the prompt first"):
            generate_all(server, ["hello"], GREEDY)
    finally:
        server.shutdown()


def test_a_cancelled_caller_frees_its_row(server, wait_until):
    async def scenario():
        task = asyncio.ensure_future(server.generate("c", PROMPTS[0], SamplingParams(max_tokens=200, ignore_eos=True)))
        await wait_until(lambda: server.engine.stats.decode_steps >= 2)
        task.cancel()
        await wait_until(lambda: server.engine.num_requests() == 0)
        return task.cancelled()

    assert asyncio.run(scenario())


def test_a_caller_cancelled_as_its_row_finishes_does_not_disturb_the_others(server, greedy_reference):
    async def scenario():
        for attempt in range(20):  # cancel at varied moments, some right as the row retires
            short = asyncio.ensure_future(server.generate(f"s{attempt}", PROMPTS[0], GREEDY.replace(max_tokens=2)))
            other = asyncio.ensure_future(server.generate(f"o{attempt}", PROMPTS[1], GREEDY))
            await asyncio.sleep(0.0005 * attempt)
            short.cancel()
            assert (await other).token_ids == greedy_reference(PROMPTS[1], 24)

    asyncio.run(scenario())


def test_cancelling_a_row_in_the_middle_leaves_the_others_exact(server, reference_model, wait_until):
    """The cancelled row's slot is refilled by the last row (slots) or cropped (dynamic); the rest
    still decode greedily as a full transformers forward does."""
    params = GREEDY.replace(max_tokens=200, ignore_eos=True)

    async def scenario():
        tasks = [asyncio.ensure_future(server.generate(f"m{i}", p, params)) for i, p in enumerate(PROMPTS)]
        await wait_until(lambda: server.engine.stats.decode_steps >= 1)
        tasks[1].cancel()
        await wait_until(lambda: server.engine.num_requests() <= 3)
        return await asyncio.gather(*(tasks[i] for i in (0, 2, 3)))

    for prompt, out in zip([PROMPTS[0], PROMPTS[2], PROMPTS[3]], asyncio.run(scenario())):
        assert len(out.token_ids) == 200
        with torch.inference_mode():
            logits = reference_model(torch.tensor([prompt + out.token_ids])).logits[0]
        assert logits[len(prompt) - 1 : -1].argmax(dim=-1).tolist() == out.token_ids


def test_prompts_prefilled_in_pieces_equal_transformers_generate(tiny_model_path, engine_kwargs, greedy_reference):
    """max_num_batched_tokens=4: the slots runner feeds each prompt 4 tokens a forward, later pieces
    attending to the K/V the earlier ones wrote."""
    server = LLMServer.from_model(tiny_model_path, max_num_batched_tokens=4, **engine_kwargs)
    try:
        outputs = generate_all(server, PROMPTS, GREEDY)
    finally:
        server.shutdown()
    for prompt, out in zip(PROMPTS, outputs):
        assert out.token_ids == greedy_reference(prompt, 24)


def test_the_slots_runner_refuses_what_it_cannot_run(tmp_path, device):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2, n_positions=64)).save_pretrained(tmp_path)
    with pytest.raises(RolloutError, match="model type 'gpt2' is not one of.*use kv_cache='dynamic'"):
        HFEngine(str(tmp_path), device=device, kv_cache="slots")
    engine = HFEngine(str(tmp_path), device=device)  # auto: transformers' own forward
    try:
        assert type(engine.runner).__name__ == "DynamicRunner"
    finally:
        engine.shutdown()


def test_slots_that_do_not_fit_are_one_error_naming_the_fix(tiny_model_path, device):
    with pytest.raises(RolloutError, match="does not fit in gpu_memory_utilization=1e-12.*raise actor_rollout_ref"):
        HFEngine(tiny_model_path, device=device, kv_cache="slots", gpu_memory_utilization=1e-12)


def test_a_failing_prefill_fails_its_cohort_and_the_engine_runs_on(server):
    """A cohort leaves the queue before its prefill: an error there reaches its callers (they waited
    forever when only the queue and the running rows were failed) and the next request runs."""

    def broken_prefill(rows):
        raise RuntimeError("prefill broke")

    working_prefill, server.engine.runner.prefill = server.engine.runner.prefill, broken_prefill

    async def scenario():
        return await asyncio.wait_for(
            asyncio.gather(
                *(server.generate(f"b{i}", p, GREEDY) for i, p in enumerate(PROMPTS[:2])), return_exceptions=True
            ),
            timeout=60,
        )

    failures = asyncio.run(scenario())
    assert [str(f) for f in failures] == ["prefill broke"] * 2
    server.engine.runner.prefill = working_prefill
    assert len(generate_all(server, PROMPTS[:1], GREEDY)[0].token_ids) > 0
