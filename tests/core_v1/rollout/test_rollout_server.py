"""LLMServer controls: abort/resume, sleep/wake_up, update_weights and weight-version tags."""

import asyncio

import pytest
import torch

from core_v1.rollout import LLMServer, SamplingParams
from core_v1.rollout.engines.hf import WeightUpdateError

PROMPT = [5, 6, 7, 8, 9]
LONG = SamplingParams(temperature=1.0, seed=5, max_tokens=60, ignore_eos=True)


@pytest.fixture
def server(tiny_model_path, engine_kwargs):
    server = LLMServer.from_model(tiny_model_path, **engine_kwargs)
    yield server
    server.shutdown()


def test_abort_all_returns_partial_outputs_and_pauses_until_resume(server, wait_until):
    stats = server.engine.stats

    async def scenario():
        running = [asyncio.ensure_future(server.generate(f"r{i}", PROMPT, LONG)) for i in range(3)]
        await wait_until(lambda: stats.decode_steps >= 4)
        assert await server.abort_all() == 3
        partial = await asyncio.gather(*running)
        late = asyncio.ensure_future(server.generate("late", PROMPT, LONG.replace(max_tokens=3)))
        await asyncio.sleep(0.2)
        held = not late.done() and server.num_running() == 1
        await server.resume()
        return partial, held, await late

    partial, held, late = asyncio.run(scenario())
    assert all(o.stop_reason == "aborted" and 0 < len(o.token_ids) < 60 for o in partial)
    assert all(len(o.log_probs) == len(o.token_ids) for o in partial)
    assert held and late.stop_reason == "length" and len(late.token_ids) == 3


def test_sleep_holds_new_requests_and_running_ones_continue_exactly_after_wake_up(server, wait_until):
    uninterrupted = asyncio.run(server.generate("u", PROMPT, LONG))
    stats = server.engine.stats

    async def scenario():
        start = stats.decode_steps
        running = asyncio.ensure_future(server.generate("s", PROMPT, LONG))
        await wait_until(lambda: stats.decode_steps >= start + 10)
        held_kv = server.engine.kv_cache_bytes()
        await server.sleep()
        assert held_kv > 0 and server.engine.kv_cache_bytes() == 0  # the KV storage is released
        newcomer = asyncio.ensure_future(server.generate("n", PROMPT, LONG.replace(max_tokens=2)))
        await asyncio.sleep(0.2)
        waited = not running.done() and not newcomer.done()
        await server.wake_up()
        return waited, await running, await newcomer

    waited, resumed, newcomer = asyncio.run(scenario())
    assert waited
    assert resumed.token_ids == uninterrupted.token_ids and resumed.stop_reason == "length"
    assert resumed.log_probs == pytest.approx(uninterrupted.log_probs, abs=1e-5)
    assert len(newcomer.token_ids) == 2


def test_update_weights_changes_outputs_and_tags_the_weight_version(server, new_weights, new_model, log_prob_reference):
    greedy = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)

    async def scenario():
        before = await server.generate("a", PROMPT, greedy)
        await server.update_weights([new_weights[:5], new_weights[5:]], version=1)  # two buckets
        after = await server.generate("b", PROMPT, greedy)
        return before, after

    before, after = asyncio.run(scenario())
    assert (before.min_weight_version, before.max_weight_version) == (0, 0)
    assert (after.min_weight_version, after.max_weight_version) == (1, 1) and server.weight_version == 1
    assert after.token_ids != before.token_ids
    assert after.log_probs == pytest.approx(log_prob_reference(PROMPT, after.token_ids, model=new_model), abs=1e-4)


def test_a_request_spanning_an_update_records_both_versions(server, new_weights, wait_until):
    stats = server.engine.stats

    async def scenario():
        running = asyncio.ensure_future(server.generate("r", PROMPT, LONG))
        await wait_until(lambda: stats.decode_steps >= 5)
        await server.update_weights(new_weights, version=7)
        return await running

    out = asyncio.run(scenario())
    assert (out.min_weight_version, out.max_weight_version) == (0, 7) and len(out.token_ids) == 60


def test_update_weights_rejects_unknown_names_and_wrong_shapes(server):
    with pytest.raises(WeightUpdateError, match="no parameter 'lm_head.weights'"):
        asyncio.run(server.update_weights([("lm_head.weights", torch.zeros(1))], version=1))
    with pytest.raises(WeightUpdateError, match="has shape \\(2, 2\\), the model expects"):
        asyncio.run(server.update_weights([("lm_head.weight", torch.zeros(2, 2))], version=1))
    assert server.weight_version == 0


def test_a_server_outlives_successive_event_loops(server):
    async def held_then_released():
        await server.sleep()
        request = asyncio.ensure_future(server.generate("h", PROMPT, {"max_tokens": 3}))
        await asyncio.sleep(0.05)
        held = not request.done()
        await server.wake_up()
        return held, await request

    for _ in range(2):  # e.g. a synchronous trainer calling asyncio.run() once per step
        held, out = asyncio.run(held_then_released())
        assert held and len(out.token_ids) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_sleep_gives_the_kv_storage_and_the_weights_back_to_cuda(tiny_model_path):
    server = LLMServer.from_model(tiny_model_path, device="cuda", kv_cache="slots", max_num_seqs=64)
    weight_bytes = sum(p.numel() * p.element_size() for p in server.engine.model.parameters())
    try:
        before = asyncio.run(server.generate("a", PROMPT, LONG))  # fills slots, captures graphs
        torch.cuda.synchronize()
        awake, kv_bytes = torch.cuda.memory_allocated(), server.engine.kv_cache_bytes()
        asyncio.run(server.sleep())
        asleep = torch.cuda.memory_allocated()
        asyncio.run(server.wake_up())
        after = asyncio.run(server.generate("b", PROMPT, LONG))
    finally:
        server.shutdown()
    print(f"cuda memory allocated: awake {awake} B, asleep {asleep} B (KV {kv_bytes} B, weights {weight_bytes} B)")
    assert kv_bytes > 0 and awake - asleep >= kv_bytes + weight_bytes
    assert after.token_ids == before.token_ids  # same seed, re-allocated slots and re-captured graphs
