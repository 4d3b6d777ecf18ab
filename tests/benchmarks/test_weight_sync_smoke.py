"""benchmarks/weight_sync.py runs end to end on CPU with a tiny model (real Ray replica, real gloo
groups) and its correctness check passes; it refuses nccl where it cannot run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "weight_sync.py"


def _run(*args: str, timeout: float) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "RAY_AUTH_MODE": "disabled",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_tiny_cpu_run_reports_rates_and_passes_verification():
    result = _run("--tiny", "--warmup", "1", "--repeats", "2", "--threads", "1", timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert re.search(r"verify +passed: after syncing perturbed weights \(version 5\)", out), out
    sync_rate = float(re.search(r"sync +median .* -> ([\d.]+) GB/s", out).group(1))
    baseline_rate = float(re.search(r"baseline +plain torch\.distributed\.broadcast.* -> ([\d.]+) GB/s", out).group(1))
    assert sync_rate > 0 and baseline_rate > 0, out
    assert re.search(r"ratio +[\d.]+ of the baseline", out), out
    assert re.search(r"35,104 parameters, fp32", out) and "backend     gloo" in out, out


def test_nccl_without_two_gpus_is_refused_in_one_line():
    if torch.cuda.device_count() >= 2:
        pytest.skip("two GPUs are visible")
    result = _run("--tiny", "--backend", "nccl", timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: --backend nccl needs --device cuda and two GPUs (NCCL refuses two ranks on one device); "
        "with one GPU or on CPU use --backend gloo"
    ]
