"""LLMServerClient routing over local servers, and partial rollout in FullyAsyncLLMServerClient."""

import asyncio

import pytest

from core_v1.rollout import FullyAsyncLLMServerClient, LLMServer, LLMServerClient, SamplingParams

PROMPT = [12, 13, 14, 15]
SEEDED = {"temperature": 1.0, "seed": 21, "max_tokens": 50, "ignore_eos": True}


@pytest.fixture
def servers(tiny_model_path, engine_kwargs):
    servers = [LLMServer.from_model(tiny_model_path, **engine_kwargs) for _ in range(2)]
    yield servers
    for server in servers:
        server.shutdown()


def test_new_ids_go_to_the_least_loaded_replica_and_ids_stick(servers):
    client = LLMServerClient(servers)
    slow = SamplingParams(max_tokens=40, ignore_eos=True)

    async def scenario():
        first = [asyncio.ensure_future(client.generate(f"s{i}", PROMPT, slow)) for i in range(4)]
        await asyncio.sleep(0)
        spread = client.in_flight()
        extra = asyncio.ensure_future(client.generate("s0", PROMPT, {"max_tokens": 2}))  # sticky, not least loaded
        await asyncio.sleep(0)
        sticky = client.in_flight()
        await asyncio.gather(*first, extra)
        return spread, sticky

    spread, sticky = asyncio.run(scenario())
    assert spread == [2, 2]
    assert sticky == [3, 2]  # s0 went to replica 0 first, and went back there
    assert [s.num_running() for s in servers] == [0, 0] and client.in_flight() == [0, 0]


def test_unbalanced_load_sends_new_ids_to_the_idle_replica(servers):
    client = LLMServerClient(servers)

    async def scenario():
        busy = [asyncio.ensure_future(client.generate("busy", PROMPT, {"max_tokens": 30, "ignore_eos": True}))]
        await asyncio.sleep(0)
        busy.append(asyncio.ensure_future(client.generate("busy", PROMPT, {"max_tokens": 30, "ignore_eos": True})))
        await asyncio.sleep(0)
        fresh = asyncio.ensure_future(client.generate("fresh", PROMPT, {"max_tokens": 2}))
        await asyncio.sleep(0)
        loads = client.in_flight()
        await asyncio.gather(*busy, fresh)
        return loads

    assert asyncio.run(scenario()) == [2, 1]


def test_control_calls_fan_out_to_every_replica(servers, new_weights):
    client = LLMServerClient(servers)

    async def scenario():
        await client.sleep()
        assert all(s._asleep for s in servers)
        await client.wake_up()
        await client.update_weights(iter([new_weights]), version=3)  # a generator is materialised once
        outs = await asyncio.gather(*(client.generate(f"v{i}", PROMPT, {"max_tokens": 3}) for i in range(2)))
        await client.abort_all()
        await client.resume()
        return outs

    outs = asyncio.run(scenario())
    assert [s.weight_version for s in servers] == [3, 3]
    assert all(o.min_weight_version == o.max_weight_version == 3 for o in outs)


def _interrupt_once(client, servers, between_pieces, wait_until):
    """Generate SEEDED with the client; abort after 10 steps, run `between_pieces`, resume."""

    async def scenario():
        engine = servers[0].engine
        start = engine.stats.decode_steps
        task = asyncio.ensure_future(client.generate("p", PROMPT, SEEDED))
        await wait_until(lambda: engine.stats.decode_steps >= start + 10)
        aborted = await client.abort_all()
        await between_pieces()
        await client.resume()
        return aborted, await task

    return asyncio.run(scenario())


def test_partial_rollout_resumed_equals_uninterrupted_when_weights_do_not_change(servers, wait_until):
    client = FullyAsyncLLMServerClient(servers[:1])
    uninterrupted = asyncio.run(client.generate("u", PROMPT, SEEDED))

    async def nothing():
        await asyncio.sleep(0.05)

    aborted, resumed = _interrupt_once(client, servers, nothing, wait_until)
    assert aborted == 1
    assert resumed.token_ids == uninterrupted.token_ids and len(resumed.token_ids) == 50
    assert resumed.log_probs == pytest.approx(uninterrupted.log_probs, abs=1e-5)
    assert resumed.stop_reason == "length" and (resumed.min_weight_version, resumed.max_weight_version) == (0, 0)


def test_partial_rollout_across_a_weight_update_keeps_each_pieces_policy(
    servers, new_weights, new_model, log_prob_reference, wait_until
):
    client = FullyAsyncLLMServerClient(servers[:1])

    async def update():
        await client.update_weights(new_weights, version=1)

    _, out = _interrupt_once(client, servers, update, wait_until)
    assert len(out.token_ids) == 50 and (out.min_weight_version, out.max_weight_version) == (0, 1)
    old_lp = log_prob_reference(PROMPT, out.token_ids)
    new_lp = log_prob_reference(PROMPT, out.token_ids, model=new_model)
    # Some prefix was sampled by the old weights, the rest by the new; each log-prob matches its own.
    split = next(i for i, (lp, old) in enumerate(zip(out.log_probs, old_lp)) if abs(lp - old) > 1e-3)
    assert 10 <= split < 50
    assert out.log_probs[:split] == pytest.approx(old_lp[:split], abs=1e-4)
    assert out.log_probs[split:] == pytest.approx(new_lp[split:], abs=1e-4)
