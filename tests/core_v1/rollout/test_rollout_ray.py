"""Rollout replicas as Ray actors, driven end to end through the client."""

import asyncio

import pytest
import ray

from core_v1.rollout import FullyAsyncLLMServerClient, SamplingParams
from core_v1.rollout.replica import RolloutReplicaGroup

PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17], [30, 31, 32]]


@pytest.fixture(scope="module")
def group(ray_runtime, tiny_model_path):  # ray_runtime: ray.init(num_cpus=2), tests/conftest.py
    group = RolloutReplicaGroup(tiny_model_path, num_replicas=2, num_cpus=1, engine_kwargs={"device": "cpu"})
    yield group
    group.shutdown()


def test_replica_actors_generate_and_route_like_local_servers(group, greedy_reference):
    client = group.client()
    greedy = SamplingParams(temperature=0, max_tokens=16)

    async def scenario():
        outs = await asyncio.gather(*(client.generate(f"g{i}", p, greedy) for i, p in enumerate(PROMPTS)))
        loads = await asyncio.gather(*(r.get_num_running.remote() for r in group.replicas))
        return outs, loads

    outs, loads = asyncio.run(scenario())
    for prompt, out in zip(PROMPTS, outs):
        assert out.token_ids == greedy_reference(prompt, 16)
    assert loads == [0, 0]
    assert client._sticky["g0"] is not client._sticky["g1"]  # spread over both actors


def test_requests_of_one_turn_share_a_call_and_fail_alone(group, greedy_reference):
    """A step's requests reach a Ray replica as one streaming call (`generate_batch`); a request
    that is refused raises for its caller only, and the others of its call come back whole.
    (Before the partial-rollout test below, which loads other weights into the replicas.)"""
    from core_v1.rollout.types import RolloutError

    client = group.client()
    greedy = SamplingParams(temperature=0, max_tokens=8)
    prompts = PROMPTS * 4
    sent = []
    for replica in client._replicas:

        async def counted(requests, futures, original=replica._batched._call):
            sent.append(len(requests))
            await original(requests, futures)

        replica._batched._call = counted

    async def scenario():
        calls = [client.generate(f"t{i}", p, greedy) for i, p in enumerate(prompts)]
        calls.append(client.generate("bad", ["not", "tokens"], greedy))
        return await asyncio.gather(*calls, return_exceptions=True)

    *outs, bad = asyncio.run(scenario())
    for prompt, out in zip(prompts, outs):
        assert out.token_ids == greedy_reference(prompt, 8)
    assert isinstance(bad, RolloutError) and "prompt_ids must be a list of token ids" in str(bad)
    assert sorted(sent) == [8, 9]  # two replicas, one call each for the turn's 17 requests


def test_partial_rollout_through_ray_actors_across_a_weight_update(group, new_weights):
    client = group.client(partial_rollout=True)
    assert isinstance(client, FullyAsyncLLMServerClient)
    params = {"temperature": 1.0, "seed": 4, "max_tokens": 200, "ignore_eos": True}

    async def steps():
        return [s["decode_steps"] for s in await asyncio.gather(*(r.get_engine_stats.remote() for r in group.replicas))]

    async def scenario():
        start = await steps()
        tasks = [asyncio.ensure_future(client.generate(f"p{i}", p, params)) for i, p in enumerate(PROMPTS[:2])]
        while min(await steps()) < min(start) + 5 or sum(client.in_flight()) < 2:  # both mid-flight
            await asyncio.sleep(0.01)
        aborted = await client.abort_all()
        await client.sleep()
        await client.update_weights(new_weights, version=2)
        await client.wake_up()
        await client.resume()
        return aborted, await asyncio.gather(*tasks)

    aborted, outs = asyncio.run(scenario())
    versions = ray.get([r.get_weight_version.remote() for r in group.replicas])
    assert versions == [2, 2]
    assert all(len(o.token_ids) == 200 and len(o.log_probs) == 200 for o in outs)
    assert aborted == 2
    assert all((o.min_weight_version, o.max_weight_version) == (0, 2) for o in outs)
