"""`trainer.v1.placement=local`: the replica, the agent loops and the transfer store in the driver
process. A run logs the numbers it logs with them as Ray actors (the suite's runs rely on it), to
float rounding: the engine's log-probs move in the last bits with the batch a request shared
(arrival timing) and with the threads that sum them (CI's rollout diagnostics differed by 1e-7). A
layout it cannot hold is one error line."""

from __future__ import annotations

import json

import pytest

from core_v1.agent_loop.manager import AgentLoopManager
from core_v1.config import load_config
from core_v1.main_ppo import main, run_v1
from core_v1.rollout.server import LLMServer
from core_v1.transfer_store import TransferStore
from tests.conftest import quickstart_overrides

STEPS = 3
_CLOCK = ("timing_s/", "perf/")


def _run(assets, out, placement: str, built: list) -> list[dict]:
    config = load_config(
        quickstart_overrides(
            assets,
            out,
            STEPS,
            "algorithm.adv_estimator=gae",  # a critic: its value head draws from the RNG after the replicas load
            "data.train_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            f"trainer.test_freq={STEPS}",
            "trainer.logger=[jsonl]",
            placement=placement,
        ),
        config_name="quickstart",
    )
    original = AgentLoopManager.__init__

    def recording_init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self)

    AgentLoopManager.__init__ = recording_init
    try:
        assert run_v1(config) == 0
    finally:
        AgentLoopManager.__init__ = original
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _comparable(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if not k.startswith(_CLOCK)} for row in rows]


@pytest.mark.slow
def test_a_local_run_logs_the_numbers_of_the_same_run_on_ray(tiny_assets, ray_runtime, tmp_path):
    on_ray, local = [], []
    ray_rows = _run(tiny_assets, tmp_path / "ray", "ray", on_ray)
    local_rows = _run(tiny_assets, tmp_path / "local", "local", local)
    assert len(ray_rows) == len(local_rows) == STEPS
    for local_row, ray_row in zip(_comparable(local_rows), _comparable(ray_rows)):
        assert local_row.keys() == ray_row.keys()
        assert local_row == pytest.approx(ray_row, rel=1e-5, abs=1e-6)
    assert "val/score/mean" in local_rows[-1] and "critic/vf_loss" in local_rows[0]
    # What ran where: Ray actors for the one, objects of this process for the other.
    assert on_ray[0].backend == "ray" and local[0].backend == "local"
    assert isinstance(local[0].store, TransferStore) and not isinstance(on_ray[0].store, TransferStore)
    assert all(isinstance(worker.client.replica(0), LLMServer) for worker in local[0].workers)


def test_a_layout_of_two_ranks_is_one_error_line(capsys, tiny_assets, tmp_path):
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 1, "trainer.n_gpus_per_node=2"),
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err[-1].startswith("error: trainer.v1.placement=local runs one training rank, in the driver")
    assert "set trainer.v1.placement=ray" in err[-1]


def test_the_dry_run_plan_says_the_replica_is_in_the_driver(capsys, tiny_assets, tmp_path):
    overrides = quickstart_overrides(tiny_assets, tmp_path, 1, "trainer.dry_run=true")
    assert main(["--config-name=quickstart", *overrides]) == 0
    engines = next(line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("engines:"))
    assert "1 replica(s) in the driver process with the agent loops and the store" in engines
