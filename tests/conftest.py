"""Shared fixtures: a tiny local model and the quickstart data (made once per session), and a
Ray runtime started per module (other test modules start and stop their own)."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path

import pytest
import torch

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_verl_import_hook_left():
    """A run naming verl's modules installs `shims.verl_imports`' hook for the rest of its process;
    each test starts without one left by another."""
    yield
    hook = sys.modules.get("shims.verl_imports")
    if hook is not None:
        hook.uninstall()


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory) -> dict[str, Path]:
    """`{"model": dir, "train": parquet, "val": parquet}` for the quickstart task."""
    from examples.quickstart.prepare import NUMBER_WORDS, write_data
    from examples.tiny_model import make_tiny_model

    root = tmp_path_factory.mktemp("assets")
    train, val = write_data(root / "data")
    model = make_tiny_model(root / "model", NUMBER_WORDS, hidden_size=32, num_layers=2)
    return {"model": model, "train": train, "val": val}


@contextlib.contextmanager
def local_ray():
    """A Ray runtime for the enclosed runs, unless one is already up (then it is left alone)."""
    import ray
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


@pytest.fixture(scope="module")
def ray_runtime():
    with local_ray():
        yield


def quickstart_overrides(assets: dict[str, Path], out_dir: Path, steps: int | None, *extra: str) -> list[str]:
    """Overrides that point the quickstart preset at `assets`; `steps=None` keeps the preset's count."""
    step_override = [] if steps is None else [f"trainer.total_training_steps={steps}"]
    return [f"data.train_files={assets['train']}", f"data.val_files={assets['val']}",
            f"actor_rollout_ref.model.path={assets['model']}", f"trainer.default_local_dir={out_dir}",
            *step_override, "trainer.progress_bar=false", *extra]
