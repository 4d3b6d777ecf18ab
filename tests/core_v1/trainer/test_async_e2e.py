"""Each async mode trains the quickstart (its preset, its model size, its data) to the sync bar,
adding only what a user adds on the command line, and logs the staleness metrics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1

MODES = {
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": ["trainer.v1.trainer_mode=separate_async",
                       "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo"],
}


@pytest.fixture(scope="module")
def quickstart_assets(tmp_path_factory) -> dict[str, Path]:
    """Exactly what `python -m examples.quickstart` prepares, in a temporary folder."""
    from examples.quickstart.prepare import prepare

    root = tmp_path_factory.mktemp("quickstart")
    prepare(root / "data", root / "model")
    return {"data": root / "data", "model": root / "model"}


def _train(assets: dict[str, Path], out: Path, mode_overrides: list[str]) -> list[dict]:
    config = load_config([f"data.train_files={assets['data'] / 'train.parquet'}",
                          f"data.val_files={assets['data'] / 'val.parquet'}",
                          f"actor_rollout_ref.model.path={assets['model']}", f"trainer.default_local_dir={out}",
                          "trainer.progress_bar=false", "trainer.logger=[jsonl]", *mode_overrides],
                         config_name="quickstart")
    assert run_v1(config) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("mode", list(MODES))
def test_async_mode_trains_the_quickstart_to_the_sync_bar(quickstart_assets, ray_runtime, tmp_path, mode):
    rows = _train(quickstart_assets, tmp_path, MODES[mode])
    scores = [row["critic/score/mean"] for row in rows]
    first, last = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    assert last >= first + 0.4 and last >= 0.8, f"{mode} scores: {[round(s, 2) for s in scores]}"
    for key in ("training/off_policy/trajectory_staleness/mean", "training/off_policy/trajectory_staleness/max",
                "training/off_policy/trajectory_spans/mean", "training/off_policy/evicted_samples"):
        assert all(key in row for row in rows), key
    # Generation ran ahead: after the first step, batches are a step older than in sync.
    assert max(row["training/off_policy/trajectory_spans/mean"] for row in rows) >= 2
    threshold = load_config([f"data.train_files={quickstart_assets['data'] / 'train.parquet'}"],
                            config_name="quickstart").trainer.v1.sampler.max_off_policy_threshold
    assert max(row["training/off_policy/trajectory_spans/max"] for row in rows) <= threshold
