"""Shared fixtures: a tiny local model and the quickstart data (made once per session), and one
Ray runtime per test process, started by the first test that needs it, shared by the next ones and
shut down when no test has used it for a while (`RAY_IDLE_S`).

The suite runs on pytest-xdist workers (pyproject's addopts); tests/scheduling.py orders and
groups the tests for them and keeps `serial` tests alone on the machine."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.scheduling import (
    pytest_collection_modifyitems,  # noqa: F401
    pytest_configure,  # noqa: F401
    pytest_runtest_protocol,  # noqa: F401
    pytest_xdist_make_scheduler,  # noqa: F401
)

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# No test downloads: a Hub id (a preset's default model path) fails at once instead of after ~23 s
# of retries on a machine without network (huggingface_hub reads it once, when first imported).
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# Two xdist workers share the machine's cores: one torch thread in each test process and in each
# process a test starts (a one-rank run's trainer keeps a user's OMP_NUM_THREADS: core_v1.device).
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(1)
# Bytecode caches for the checkout's modules (__pycache__, gitignored). With PYTHONDONTWRITEBYTECODE
# set, as on the dev machine, every process of the suite (the xdist workers, each Ray actor,
# each launched run) compiled every project and test module it imports from source again: collecting
# the suite took 15 CPU-s instead of 9.5, and each actor a few tenths of a second more.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False


@pytest.fixture(autouse=True)
def _no_verl_import_hook_left():
    """A run naming verl's modules installs `shims.verl_imports`' hook for the rest of its process;
    each test starts without one left by another."""
    yield
    hook = sys.modules.get("shims.verl_imports")
    if hook is not None:
        hook.uninstall()


def pytest_sessionfinish(session):
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> dict[str, Path]:
    """`{"model": dir, "train": parquet, "val": parquet}` for the quickstart task."""
    from examples.quickstart.prepare import NUMBER_WORDS, write_data
    from examples.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("assets")
    train, val = write_data(root / "data")
    model = make_tiny_model(root / "model", NUMBER_WORDS, hidden_size=32, num_layers=2)
    return {"model": model, "train": train, "val": val}


def shared_ray(num_cpus: int = 2) -> None:
    """Make sure Ray is up with at least `num_cpus` logical CPUs. A runtime already up (started by
    an earlier test, or by a run's own `ray.init`) is reused: starting Ray costs 7-10 s on 2 cores,
    more than most of the runs that need it. One too small is restarted with `num_cpus`."""
    import ray

    if ray.is_initialized():
        if ray.cluster_resources().get("CPU", 0) >= num_cpus:
            return
        ray.shutdown()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)


def shut_down_ray_if_leaked(wait_s: float = 10.0) -> None:
    """Shut Ray down if something the last tests started still holds CPUs (a replica or training
    rank that was not stopped) once `wait_s` has passed, so that it cannot starve the next test;
    the next `shared_ray` starts a fresh runtime."""
    import ray

    if not ray.is_initialized():
        return
    deadline = time.monotonic() + wait_s
    while ray.available_resources().get("CPU", 0) < ray.cluster_resources().get("CPU", 0):
        if time.monotonic() > deadline:
            ray.shutdown()
            return
        time.sleep(0.1)


@contextlib.contextmanager
def local_ray(num_cpus: int = 2):
    """Ray for the enclosed runs (`shared_ray`); what they leave holding CPUs is cleared after."""
    shared_ray(num_cpus)
    _RayUse.users += 1
    try:
        yield
    finally:
        _RayUse.users -= 1
        _RayUse.last_used = time.monotonic()
        shut_down_ray_if_leaked()


# An idle Ray runtime is not free: its GCS, raylet, monitors and prestarted workers take ~0.15 of a
# core on 2 cores, and each test process keeps one. So a runtime that no test has used for
# RAY_IDLE_S is shut down before the next test; the next that needs Ray starts it again, which costs
# its processes ~6.5 CPU-s, what ~45 s of idling costs.
RAY_IDLE_S = 45.0


class _RayUse:
    """This test process's use of its Ray runtime: open `local_ray` contexts (a Ray fixture is set
    up), when a test last used it, and whether it was up when the current test began."""

    users = 0
    last_used = float("-inf")
    up_at_setup = False


def _ray_is_up() -> bool:
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before the test's fixtures: shut down a runtime that nothing holds and nothing used lately."""
    if _ray_is_up() and _RayUse.users == 0 and time.monotonic() - _RayUse.last_used > RAY_IDLE_S:
        sys.modules["ray"].shutdown()
    _RayUse.up_at_setup = _ray_is_up()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A test used Ray if a Ray fixture was set up or the test started Ray itself (a run's `ray.init`)."""
    try:
        return (yield)
    finally:
        if _RayUse.users or (_ray_is_up() and not _RayUse.up_at_setup):
            _RayUse.last_used = time.monotonic()


@pytest.fixture(scope="module")
def ray_runtime():
    with local_ray():
        yield


def quickstart_overrides(
    assets: dict[str, Path], out_dir: Path, steps: int | None, *extra: str, placement: str = "local"
) -> list[str]:
    """Overrides that point the quickstart preset at `assets`; `steps=None` keeps the preset's count.

    A V1 run's replica, agent loops and store run in the test process (`trainer.v1.placement=local`):
    the same numbers as Ray actors (tests/core_v1/trainer/test_placement.py) at a fraction of the
    start-up, which most runs of the suite are. A test of what the processes do (data plane, faults,
    restarts, ranks, async learning, start-up and shutdown) passes `placement="ray"`."""
    step_override = [] if steps is None else [f"trainer.total_training_steps={steps}"]
    return [
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['val']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"trainer.default_local_dir={out_dir}",
        *step_override,
        "trainer.progress_bar=false",
        f"trainer.v1.placement={placement}",
        *extra,
    ]


def quickstart_overrides_on_ray(assets: dict[str, Path], out_dir: Path, steps: int | None, *extra: str) -> list[str]:
    """`quickstart_overrides` with the replica, the agent loops and the store as Ray actors."""
    return quickstart_overrides(assets, out_dir, steps, *extra, placement="ray")
