"""The README's quickstart: the preset learns to the bar (over half its length).

That one seed gives one curve is checked by tests/faults/test_killed_trainer.py: there two fresh
runs of the quickstart preset with one seed (the uninterrupted run and the one killed after step 2)
log the same numbers: every metric but the clock's, exactly in sync and to the IS weights' float
noise in the reproducible async modes (the engine's own log-prob diagnostics to float noise)."""

from __future__ import annotations

import json

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from tests.conftest import quickstart_overrides


def _rows(path):
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def quickstart_model(tmp_path_factory):
    """The quickstart's own model and data (the preset's sizes), made as a fresh checkout would."""
    from examples.quickstart.prepare import prepare

    root = tmp_path_factory.mktemp("quickstart")
    prepare(root / "data", root / "model")
    return {"model": root / "model", "train": root / "data" / "train.parquet", "val": root / "data" / "val.parquet"}


# The preset at half its length (its cosine schedule over 200 steps), as the V0 and async learning
# tests run it. Last three of 200 steps: 0.936 with the default seed (1), 0.877 and 0.834 with seeds
# 2 and 3. Shorter runs at a higher rate learned faster but not on every seed (100 steps at 1e-3:
# seed 3 ended at 0.79; at 2e-3 it collapsed at step 23 and stayed near 0.35).
LEARNING_STEPS = 200


@pytest.mark.slow
# ~125 s alone on 2 cores; beside another learning run (xdist) on a busy machine several times that,
# so this test has twice pyproject's timeout (a guard against hangs).
@pytest.mark.timeout(1200)
def test_quickstart_learns_to_the_bar(quickstart_model, ray_runtime, tmp_path):
    config = load_config(
        quickstart_overrides(quickstart_model, tmp_path, LEARNING_STEPS, "trainer.test_freq=-1"),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    scores = [row["critic/score/mean"] for row in _rows(tmp_path)]
    first, last = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    assert last >= 0.8, scores
    assert last - first >= 0.4, scores
