"""A V0 worker subclass (examples/v0_custom_worker) trains on V1, inside two training ranks: its
`compute_log_prob` override is called once per step on each rank, with a DataProto of that
rank's rows, and the metrics it returns are logged with the step."""

from __future__ import annotations

import json

import pytest

from examples.v0_custom_worker.__main__ import main
from tests.legacy_v0.conftest import small_run_overrides


@pytest.mark.slow
def test_v0_worker_override_runs_in_v1_ranks(tiny_assets, ray_four_cpus, tmp_path):
    history = main(
        ["--v1", *small_run_overrides(tiny_assets, tmp_path, 2, "trainer.n_gpus_per_node=2", placement="ray")],
        prepare_assets=False,
    )
    logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in logged] == [1, 2]
    for step, metrics in enumerate(history, start=1):
        # Each rank's worker counts its own calls; the logged value is their mean over the ranks.
        assert metrics["custom/audited_batches"] == step
        assert 0.0 <= metrics["custom/low_prob_token_frac"] <= 1.0
        assert metrics["custom/old_log_prob_mean"] < 0.0
        assert "actor/pg_loss" in metrics
