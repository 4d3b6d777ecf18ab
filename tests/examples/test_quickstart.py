"""The README's quickstart: the preset learns to the bar (over a fifth of its length).

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


# The preset over 80 steps, its cosine schedule completed within them (the async and V0 learning
# tests run it the same way). Mean score of the first three steps -> of the last three, seeds 1-3
# (2026-12-05): sync 0.070 -> 0.602, 0.074 -> 0.601, 0.064 -> 0.572; colocate_async 0.071 -> 0.576,
# 0.072 -> 0.603, 0.062 -> 0.579; separate_async 0.071 -> 0.568, 0.072 -> 0.594, 0.054 -> 0.562.
# Over 60 steps the last three reached only 0.44-0.47. The 200 steps these tests ran before (the
# bar 0.8) reached 0.83-0.94 at 2.4 times the cost, on the same rise (0.46-0.52 at step 40, 0.61-0.66
# at step 60, all three modes and seeds); 80 steps show the same thing, the preset learning the task
# from the untrained model's 0.07. A higher rate does not buy a shorter run: 100 steps at 1e-3 ended
# at 0.79 with seed 3, and at 2e-3 seed 3 collapsed at step 23 and stayed near 0.35.
LEARNING_STEPS = 80
BAR_FINAL, BAR_GAIN = 0.45, 0.35  # the last three steps' mean score: at least, and above the first three's


def reached_the_bar(scores: list[float]) -> bool:
    first, last = sum(scores[:3]) / 3, sum(scores[-3:]) / 3
    return last >= BAR_FINAL and last >= first + BAR_GAIN


@pytest.mark.slow
# ~35 s alone on 2 cores; beside another learning run (xdist) on a busy machine several times that,
# so this test has twice pyproject's timeout (a guard against hangs).
@pytest.mark.timeout(1200)
def test_quickstart_learns_to_the_bar(quickstart_model, ray_runtime, tmp_path):
    config = load_config(
        # On Ray, as `python -m examples.quickstart` runs it.
        quickstart_overrides(quickstart_model, tmp_path, LEARNING_STEPS, "trainer.test_freq=-1", placement="ray"),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    scores = [row["critic/score/mean"] for row in _rows(tmp_path)]
    assert len(scores) == LEARNING_STEPS
    assert reached_the_bar(scores), [round(score, 2) for score in scores]
