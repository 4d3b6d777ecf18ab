"""Metrics sinks: jsonl lines per step, non-finite values, and the PNG plot."""

from __future__ import annotations

import json
import math

from core_v1.plot import main as plot_main
from core_v1.utils.tracking import Tracking, read_metrics


def test_jsonl_appends_one_object_per_step(tmp_path):
    printed = []
    tracking = Tracking(["console", "jsonl"], str(tmp_path), "p", "e", console_writer=printed.append)
    tracking.log({"critic/score/mean": 0.5, "actor/pg_loss": math.nan, "perf/throughput": 10}, step=1)
    tracking.log({"critic/score/mean": 0.75}, step=2)
    tracking.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["actor/pg_loss"] is None  # NaN is not valid JSON; it is written as null
    assert printed[0].startswith("step 1: critic/score/mean=0.5")


def test_plot_writes_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps({"step": s, "critic/score/mean": s / 10}) for s in range(1, 6)))
    assert plot_main([str(metrics), str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_missing_file_is_a_clean_error(tmp_path, capsys):
    assert plot_main([str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
