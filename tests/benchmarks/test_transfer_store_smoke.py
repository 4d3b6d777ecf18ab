"""benchmarks/transfer_store.py runs end to end on a tiny batch (real Ray store actor and object
store): it prints the three rates with their ratios and its round-trip check passes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "transfer_store.py"
RATE = r"([\d.]+) GB/s"


def test_tiny_run_reports_every_path_against_the_plain_copy():
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, str(SCRIPT), "--rows", "4", "--row-mb", "0.05", "--warmup", "1",
                             "--repeats", "2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "4 x 0.050 MB float32 = 0.2 MB per batch" in out, out  # over the size the actor call carries
    plain = float(re.search(rf"plain copy +{RATE}", out).group(1))
    local = re.search(rf"in-process +{RATE} .* ratio ([\d.]+) of plain copy", out)
    assert plain > 0 and local and float(local.group(1)) > 0, out
    for path in "ray", r"ray \(copy\)":
        remote = re.search(rf"\n{path} +{RATE} .* ratio ([\d.]+) of plain copy, ([\d.]+) of in-process", out)
        assert remote and float(remote.group(1)) > 0, out
        assert abs(float(remote.group(3)) - float(remote.group(1)) / float(local.group(1))) < 0.01 + 0.01 * float(
            remote.group(3)), out
    assert "verify       passed: the Ray store returned the rows put, in put order and reversed" in out, out
