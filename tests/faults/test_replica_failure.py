"""A rollout replica whose process is SIGKILLed mid-generation: at the client, without restarts, it
is dropped and its requests finish on the live replica with the tokens an undisturbed run gives
(same seeds); under the trainer (restarts on, the default) the live replica carries on while it
restarts, and nothing is lost (the run completes, every prompt group is accounted for). One
replica killed under each trainer mode: tests/faults/test_replica_restart.py."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

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


# ------------------------------------------------------------- a replica killed under the trainer
_BATCH, _STEPS = 8, 4
# The mode whose pool never stops: the other replica generates while the killed one restarts.
_MODES = {
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
    ],
}


def _tokens_generated(replica) -> int:
    return ray.get(replica.get_engine_stats.remote())["generated_tokens"]


def _wait_until_back(replica, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert time.monotonic() < deadline, "the killed replica did not come back"
        try:
            ray.get(replica.identity.remote())
            return
        except ray.exceptions.RayActorError:
            time.sleep(0.05)


def _replica_killer(mode_cls: type) -> type:
    """`mode_cls` that SIGKILLs replica 0 at step 2, as soon as it holds requests of that step,
    and counts the tokens replica 1 generates until replica 0 answers again."""

    class KillsAReplica(mode_cls):
        def on_sample_begin(self):
            if self.global_steps == 2:
                replica, other = (self.components.rollout_client.replica(i) for i in (0, 1))
                deadline = time.monotonic() + 60
                while (running := ray.get(replica.get_num_running.remote())) == 0:
                    assert time.monotonic() < deadline, "replica 0 never got a request"
                    time.sleep(0.005)
                before = _tokens_generated(other)
                os.kill(_pid(replica), signal.SIGKILL)
                _wait_until_back(replica)
                KillsAReplica.tokens_while_restarting = _tokens_generated(other) - before
                KillsAReplica.requests_on_the_killed_replica = running
            KillsAReplica.last = self
            return super().on_sample_begin()

        def fit(self):
            try:
                return super().fit()
            finally:  # the run's closers shut the store down once fit returns
                KillsAReplica.store_stats = self.components.store.stats("train")

    return KillsAReplica


@pytest.mark.parametrize("mode", list(_MODES))
def test_a_replica_killed_mid_run_restarts_while_the_other_carries_on(tiny_assets, ray_runtime, tmp_path, mode):
    from core_v1.config import load_config
    from core_v1.main_ppo import run_v1
    from core_v1.trainer import TRAINER_MODES, get_trainer_cls, register_trainer
    from tests.conftest import quickstart_overrides_on_ray

    name = f"kills_a_replica_{mode}"
    if name not in TRAINER_MODES:
        register_trainer(name)(_replica_killer(get_trainer_cls(mode)))
    trainer_cls = get_trainer_cls(name)
    config = load_config(
        quickstart_overrides_on_ray(
            tiny_assets,
            tmp_path,
            _STEPS,
            *_MODES[mode],
            f"trainer.v1.trainer_mode={name}",
            "trainer.test_freq=-1",
            f"data.train_batch_size={_BATCH}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={_BATCH}",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.num_replicas=2",
            "actor_rollout_ref.rollout.num_cpus_per_replica=0.5",
            # One sequence at a time, so that requests wait on each replica: a batched turn of the tiny
            # model ends in milliseconds, and the killer's poll once missed every request of step 2.
            "actor_rollout_ref.rollout.max_num_seqs=1",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0

    trainer = trainer_cls.last
    assert trainer_cls.requests_on_the_killed_replica > 0  # it died with work on it
    client = trainer.components.rollout_client
    assert (client.lost_replicas, client.num_replicas) == (0, 2)  # restarted, not dropped
    assert trainer_cls.tokens_while_restarting > 0  # the other one carried on meanwhile
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["rollout/replica_restarts"] == 1
    assert [r["step"] for r in rows] == list(range(1, _STEPS + 1))
    assert all(r["rollout/failed_samples"] == 0 for r in rows)  # no sample failed for it
    stats = trainer_cls.store_stats
    assert stats.balanced and stats.evicted_total == 0  # nothing evicted: every row trained or still live
    if mode == "sync":
        assert stats.live == 0 and stats.consumed == stats.put  # each group trained, once
    else:  # every group submitted is trained or in flight; the ledger is checked at each step too
        assert rows[-1]["training/accounting/trained_groups"] == _BATCH * _STEPS
        assert rows[-1]["training/accounting/evicted_groups"] == 0
        assert (
            rows[-1]["training/accounting/submitted_groups"]
            == _BATCH * _STEPS + rows[-1]["training/accounting/in_flight_groups"]
        )
