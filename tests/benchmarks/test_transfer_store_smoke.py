"""benchmarks/transfer_store.py runs end to end at small sizes (real Ray store actor and object
store): it prints the wake cost of every backend and predicate at both sizes with their ratios,
the small-put costs and, where the transferqueue package is installed, the side-by-side figures."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "transfer_store.py"
MS = r"([\d.]+)"


def run_benchmark(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_wake_and_put_costs_are_reported_for_every_backend_and_predicate():
    out = run_benchmark("--parts", "wake,put", "--wake-repeats", "1", "--wake-rows", "300", "1200")
    for backend in ("in-process", "ray"):
        for predicate in ("sync sample", "async sample"):
            for form in ("indexed", "scan"):
                line = re.search(rf"{backend} +{predicate} +{form} +{MS} +{MS} +{MS}x", out)
                assert line, out
                small, large, ratio = map(float, line.groups())
                assert small > 0 and abs(large / small - ratio) < 0.01 + 0.01 * ratio, out
    assert re.search(rf"one 1-row put {MS}; 16 one-row aputs in one turn {MS} \({MS}x one 16-row put", out), out


@pytest.mark.slow
def test_side_by_side_with_transferqueue_at_small_sizes():
    if importlib.util.find_spec("transfer_queue") is None:
        pytest.skip("transferqueue is not installed (pip install 'rlbridge[bench]')")
    out = run_benchmark(
        "--parts",
        "transferqueue",
        "--runs",
        "1",
        "--repeats",
        "1",
        "--one-mb-rows",
        "4",
        "--agent-rows",
        "64",
        "--writer-actors",
        "2",
    )
    for name in ("1 MB rows", "agent"):
        line = re.search(rf"{name} \(.*\): transfer store {MS} GB/s .*; TransferQueue {MS} GB/s .*; ratio {MS}x", out)
        assert line and all(float(value) > 0 for value in line.groups()), out
