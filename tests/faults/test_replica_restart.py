"""A rollout replica SIGKILLed mid-run comes back: Ray restarts it, the supervisor sends it the
trainer's current weights through the run's weight sync, and the requests it lost are sent again.
With the default single replica the run waits for it (in each trainer mode) and finishes with
every step trained and logged once; a replica that keeps dying ends the run with one `error:` line."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
import ray

pytestmark = pytest.mark.slow

_BATCH, _STEPS = 8, 4
_MODES = {
    "sync": [],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "trainer.v1.separate_async.parameter_sync_step=1",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
    ],
}


def _pid(replica) -> int:
    return ray.get(replica.identity.remote())["pid"]


def _kill_when_busy(replica, timeout_s: float = 60) -> int:
    """SIGKILL `replica` as soon as it holds requests; returns how many it held."""
    deadline = time.monotonic() + timeout_s
    while (running := ray.get(replica.get_num_running.remote())) == 0:
        assert time.monotonic() < deadline, "the replica never got a request"
        time.sleep(0.005)
    os.kill(_pid(replica), signal.SIGKILL)
    return running


def _kill_each_time_it_is_back(replica, times: int, timeout_s: float = 120) -> None:
    """SIGKILL `replica`, wait for Ray to start it again, and so on `times` times."""
    for _ in range(times):
        pid = _pid(replica)
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout_s
        while True:
            assert time.monotonic() < deadline, "the replica did not come back"
            try:
                if _pid(replica) != pid:
                    break
            except ray.exceptions.RayActorError:
                pass
            time.sleep(0.1)


def _killer(mode_cls: type, kills: int) -> type:
    """`mode_cls` that SIGKILLs replica 0 at step 2: once while it holds requests of that step, or
    `kills` times in a row."""

    class KillsTheReplica(mode_cls):
        def on_sample_begin(self):
            if self.global_steps == 2:
                replica = self.components.rollout_client.replica(0)
                if kills == 1:
                    KillsTheReplica.requests_lost = _kill_when_busy(replica)
                else:
                    _kill_each_time_it_is_back(replica, kills)
            KillsTheReplica.last = self
            return super().on_sample_begin()

        def fit(self):
            try:
                return super().fit()
            finally:  # the run's closers shut the store down once fit returns
                KillsTheReplica.store_stats = self.components.store.stats("train")
                replica = self.components.rollout_client.replica(0)
                KillsTheReplica.versions = (
                    ray.get(replica.get_weight_version.remote()),
                    self.checkpoint_manager.weight_version,
                )

    return KillsTheReplica


def _overrides(tiny_assets, tmp_path, mode: str, kills: int) -> list[str]:
    from core_v1.trainer import TRAINER_MODES, get_trainer_cls, register_trainer
    from tests.conftest import quickstart_overrides_on_ray

    name = f"kills_the_replica_{kills}x_{mode}"
    if name not in TRAINER_MODES:
        register_trainer(name)(_killer(get_trainer_cls(mode), kills))
    return quickstart_overrides_on_ray(
        tiny_assets,
        tmp_path,
        _STEPS,
        *_MODES[mode],
        f"trainer.v1.trainer_mode={name}",
        "trainer.test_freq=-1",
        f"data.train_batch_size={_BATCH}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={_BATCH}",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.num_cpus_per_replica=0.5",
        # One sequence at a time, so that requests wait on the replica when the killer looks.
        "actor_rollout_ref.rollout.max_num_seqs=1",
    )


@pytest.mark.parametrize("mode", list(_MODES))
def test_a_killed_replica_comes_back_and_the_run_loses_nothing(tiny_assets, ray_runtime, tmp_path, mode):
    from core_v1.config import load_config
    from core_v1.main_ppo import run_v1
    from core_v1.trainer import get_trainer_cls

    config = load_config(_overrides(tiny_assets, tmp_path, mode, kills=1), config_name="quickstart")
    assert config.actor_rollout_ref.rollout.num_replicas == 1
    assert run_v1(config) == 0  # the run waited for the restart instead of failing

    trainer_cls = get_trainer_cls(f"kills_the_replica_1x_{mode}")
    assert trainer_cls.requests_lost > 0  # it died with work on it
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, _STEPS + 1))
    assert all(r["rollout/failed_samples"] == 0 for r in rows)  # its requests were sent again, none failed
    assert rows[-1]["rollout/replica_restarts"] == 1
    [restart_s] = [r["timing_s/replica_restart"] for r in rows if "timing_s/replica_restart" in r]
    print(f"{mode}: replica restarted in {restart_s:.2f} s")
    client = trainer_cls.last.components.rollout_client
    assert (client.lost_replicas, client.num_replicas) == (0, 1)  # back, not dropped
    replica_version, trainer_version = trainer_cls.versions
    assert replica_version == trainer_version >= _STEPS - 1  # it ends the run on the trainer's weights
    stats = trainer_cls.store_stats
    assert stats.balanced and stats.evicted_total == 0
    if mode == "sync":
        assert stats.live == 0 and stats.consumed == stats.put  # each group trained, once
        # on-policy throughout: the requests resent to the restarted replica were sampled with the
        # current weights (a replica back on model.path's weights would tag them with an older version)
        assert all(r["training/off_policy/trajectory_staleness/mean"] == 0 for r in rows)
    else:  # every group submitted is trained or in flight; the ledger is checked at each step too
        assert rows[-1]["training/accounting/trained_groups"] == _BATCH * _STEPS
        assert (
            rows[-1]["training/accounting/submitted_groups"]
            == _BATCH * _STEPS + rows[-1]["training/accounting/in_flight_groups"]
        )


def test_a_replica_that_keeps_dying_ends_the_run_with_one_line(tiny_assets, ray_runtime, tmp_path, capsys):
    from core_v1.main_ppo import main

    # One restart allowed (the default is 3: each restart loads the model in a fresh process again).
    overrides = [*_overrides(tiny_assets, tmp_path, "sync", kills=2), "actor_rollout_ref.rollout.max_restarts=1"]
    code = main(["--config-name=quickstart", *overrides])
    err = capsys.readouterr().err
    assert code == 2
    [line] = [line for line in err.splitlines() if line.startswith("error:")]
    assert "rollout replica 0 was given up: it died 2 times within 600 s" in line
    assert "actor_rollout_ref.rollout.max_restarts=1" in line and "killed from outside" in line
    assert "Traceback" not in err
    print(line)  # the run's last word, for the record (pytest -s)


# ------------------------------------------------------------------------------------------- V0
def _v0_killer_runner(kills: int = 1) -> type:
    """A V0 task runner whose actor-rollout worker SIGKILLs its replica at the second batch: during
    its generation, as soon as the replica holds requests, or `kills` times in a row before it."""
    import threading

    from legacy_v0.task_runner import TaskRunner
    from legacy_v0.trainer import Role
    from legacy_v0.workers import ActorRolloutRefWorker

    class KillsItsReplica(ActorRolloutRefWorker):
        batches = 0

        def generate_sequences(self, prompts):
            KillsItsReplica.batches += 1
            if KillsItsReplica.batches == 2:
                replica = self._replicas.replicas[0]
                if kills == 1:
                    threading.Thread(
                        daemon=True, target=lambda: setattr(KillsItsReplica, "requests_lost", _kill_when_busy(replica))
                    ).start()
                else:
                    _kill_each_time_it_is_back(replica, kills)
            return super().generate_sequences(prompts)

    class KillerTaskRunner(TaskRunner):
        worker = KillsItsReplica

        def add_actor_rollout_worker(self, config):
            self.role_worker_mapping[Role.ActorRollout] = KillsItsReplica
            return KillsItsReplica

    return KillerTaskRunner


def _v0_config(tiny_assets, tmp_path, *extra: str):
    from core_v1.config import load_config
    from tests.conftest import quickstart_overrides_on_ray

    return load_config(
        quickstart_overrides_on_ray(
            tiny_assets,
            tmp_path,
            _STEPS,
            "trainer.use_v1=false",
            "trainer.test_freq=-1",
            "trainer.logger=[jsonl]",
            f"data.train_batch_size={_BATCH}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={_BATCH}",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.rollout.num_cpus_per_replica=0.5",
            *extra,
        ),
        config_name="quickstart",
    )


def test_a_killed_v0_replica_comes_back(tiny_assets, ray_runtime, tmp_path):
    from legacy_v0.task_runner import run_ppo

    runner = _v0_killer_runner()
    history = run_ppo(_v0_config(tiny_assets, tmp_path), task_runner_class=runner)

    assert runner.worker.requests_lost > 0  # it died with work on it
    assert len(history) == _STEPS
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, _STEPS + 1))  # every step trained and logged once
    assert all(r["rollout/failed_samples"] == 0 for r in rows)
    assert all(r["response_length/mean"] > 0 for r in rows)
    assert rows[-1]["rollout/replica_restarts"] == 1
    [restart_s] = [r["timing_s/replica_restart"] for r in rows if "timing_s/replica_restart" in r]
    print(f"V0: replica restarted in {restart_s:.2f} s")


def test_a_v0_replica_that_keeps_dying_ends_the_run(tiny_assets, ray_runtime, tmp_path):
    """As V1's (the same supervisor), with a budget of one restart so that two kills do it."""
    from core_v1.errors import is_user_error
    from core_v1.rollout.supervisor import ReplicaCrashLoopError
    from legacy_v0.task_runner import run_ppo

    config = _v0_config(tiny_assets, tmp_path, "actor_rollout_ref.rollout.max_restarts=1")
    with pytest.raises(
        ReplicaCrashLoopError,
        match="rollout replica 0 was given up: it died 2 times within 600 s, "
        "more than actor_rollout_ref.rollout.max_restarts=1",
    ) as raised:
        run_ppo(config, task_runner_class=_v0_killer_runner(kills=2))
    assert is_user_error(raised.value)  # the entrypoint prints it as one error line
