"""A rollout replica whose process is SIGKILLed mid-generation is dropped; its requests finish on
the live replica with the tokens an undisturbed run gives (same seeds), and nothing is lost."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
import ray

from core_v1.rollout.client import AllReplicasLostError
from core_v1.rollout.replica import RolloutReplicaGroup
from core_v1.rollout.types import SamplingParams

pytestmark = pytest.mark.slow

_REQUESTS = 12


def _params(seed: int) -> SamplingParams:
    return SamplingParams(max_tokens=48, temperature=1.0, seed=seed, ignore_eos=True)


async def _generate_all(client, prompt_ids):
    return await asyncio.gather(*(client.generate(f"r{i}", prompt_ids, _params(i)) for i in range(_REQUESTS)))


def _pid(replica) -> int:
    return ray.get(replica.__ray_call__.remote(lambda self: os.getpid()))


def test_requests_of_a_killed_replica_finish_on_the_live_one(tiny_assets, ray_runtime):
    prompt_ids = [5, 6, 7, 8]
    reference_group = RolloutReplicaGroup(str(tiny_assets["model"]), 1, engine_kwargs={"device": "cpu"})
    try:
        expected = asyncio.run(_generate_all(reference_group.client(), prompt_ids))
    finally:
        reference_group.shutdown()

    group = RolloutReplicaGroup(str(tiny_assets["model"]), 2, engine_kwargs={"device": "cpu"}, num_cpus=0.5)
    client = group.client()
    victim = _pid(group.replicas[0])

    async def kill_while_generating():
        work = asyncio.ensure_future(_generate_all(client, prompt_ids))
        while client.in_flight()[0] == 0:
            await asyncio.sleep(0.01)
        os.kill(victim, signal.SIGKILL)
        return await work

    try:
        outputs = asyncio.run(kill_while_generating())
        assert client.lost_replicas == 1 and client.num_replicas == 1
        assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
        asyncio.run(client.sleep())  # control calls skip the dead replica
        asyncio.run(client.wake_up())
    finally:
        group.shutdown()


def test_losing_every_replica_is_one_clear_error(tiny_assets, ray_runtime):
    group = RolloutReplicaGroup(str(tiny_assets["model"]), 1, engine_kwargs={"device": "cpu"}, num_cpus=0.5)
    client = group.client()
    os.kill(_pid(group.replicas[0]), signal.SIGKILL)
    with pytest.raises(AllReplicasLostError, match="every rollout replica died"):
        asyncio.run(client.generate("r", [5, 6], _params(0)))
    group.shutdown()
