"""The example user worker (examples/v0_custom_worker) is the one the V0 trainer calls."""

from __future__ import annotations

import json

from examples.v0_custom_worker.__main__ import main
from tests.legacy_v0.conftest import small_run_overrides


def test_the_trainer_calls_the_subclass_compute_log_prob(tiny_assets, tmp_path):
    history = main(small_run_overrides(tiny_assets, tmp_path, 2), prepare_assets=False)
    assert len(history) == 2
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    for metrics in (*history, *logged):
        assert 0.0 <= metrics["custom/low_prob_token_frac"] <= 1.0
        assert metrics["custom/old_log_prob_mean"] < 0.0
