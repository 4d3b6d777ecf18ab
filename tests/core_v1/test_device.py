"""The driver's training rank on the CPU leaves the rollout replicas their cores."""

from __future__ import annotations

import os

import pytest
import torch

from core_v1.config import load_config
from core_v1.device import share_cores_with_the_replicas


@pytest.fixture
def torch_threads():
    """Restores torch's thread count (tests/conftest.py sets one) after the test."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _config(*overrides: str):
    return load_config(["trainer.device=cpu", *overrides], config_name="quickstart")


@pytest.mark.parametrize(
    "cores, overrides, threads",
    [
        (8, (), 7),  # the quickstart: one replica of one CPU
        (8, ("actor_rollout_ref.rollout.num_replicas=2", "actor_rollout_ref.rollout.num_cpus_per_replica=1.5"), 5),
        (2, ("actor_rollout_ref.rollout.num_replicas=2",), 1),  # never fewer than one
    ],
)
def test_the_trainer_gets_the_cores_the_replicas_leave(monkeypatch, torch_threads, cores, overrides, threads):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    assert share_cores_with_the_replicas(_config(*overrides)) == threads
    assert torch.get_num_threads() == threads


def test_a_users_omp_num_threads_is_left_alone(monkeypatch, torch_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    torch.set_num_threads(3)
    assert share_cores_with_the_replicas(_config()) is None
    assert torch.get_num_threads() == 3
