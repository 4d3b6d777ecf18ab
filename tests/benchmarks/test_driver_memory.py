"""benchmarks/driver_memory.py: the sampler reports peaks for the driver and for other processes,
the report prints the ratios, and one tiny training on two CPU rank actors reports a peak for the
driver and one per rank (numbers, not thresholds: this is not a timed test)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks import driver_memory as bench


def test_sampler_reports_the_driver_and_each_rank_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(32 << 20); time.sleep(30)"])
    try:
        with bench.PeakRss([child.pid]) as peaks:
            peaks.label = "work"
            block = bytearray(16 << 20)  # touched: the driver's RSS holds it
            peaks.sample()
        del block
    finally:
        child.kill()
        child.wait()
    assert peaks.driver_peak > 16 << 20
    assert peaks.stage_peaks["work"] > 16 << 20 and "start" in peaks.stage_peaks
    assert len(peaks.rank_peaks) == 1 and peaks.rank_peaks[0] > 0


def test_report_prints_ratios_against_the_first_size():
    small = bench.Measurement(
        16,
        32,
        driver_start=500,
        driver_peak=550,
        driver_maxrss=555,
        rank_peaks=[600, 640],
        driver_stage_peaks={"gen": 540.0},
        store_bytes=[0],
    )
    large = bench.Measurement(
        128,
        256,
        driver_start=500,
        driver_peak=561,
        driver_maxrss=570,
        rank_peaks=[1400, 1280],
        driver_stage_peaks={"gen": 555.0},
        store_bytes=[0],
    )
    assert bench.ratios(small, large) == pytest.approx(
        {"driver_peak": 561 / 550, "driver_maxrss": 570 / 555, "rank_peak": 1400 / 640}
    )
    text = bench.report([small, large])
    assert "128 vs 16: driver peak 1.020 (+11.0 MiB = 50.3 KiB per added row)" in text
    assert "largest rank peak 2.188" in text and "gen 555.0" in text and "per step [0]" in text


@pytest.fixture
def ray_four_cpus():
    from tests.conftest import local_ray

    with local_ray(num_cpus=4):  # 1 replica + 2 ranks need 3 logical CPUs; they share the machine's cores
        yield


@pytest.mark.slow
def test_tiny_two_rank_training_reports_driver_and_rank_peaks(tmp_path, ray_four_cpus):
    workload = bench.Workload(n=2, prompt_length=8, response_length=4, vocab=128, steps=1, ranks=2)
    assets = bench.make_assets(tmp_path / "assets", workload, [2])
    result = bench.measure(2, assets, tmp_path / "run", workload)
    assert result.rows == 4
    assert result.driver_peak >= result.driver_start > 0 and result.driver_maxrss > 0
    assert len(result.rank_peaks) == 2 and all(peak > 0 for peak in result.rank_peaks)  # ranks are processes apart
    assert {"gen", "old_log_prob", "update_actor"} <= set(result.driver_stage_peaks)
    # The ranks are Ray actors: the driver moves no trajectory tensor through the store (the quickstart
    # preset's rollout correction runs on rank 0).
    assert result.store_bytes == [0]
    assert "2 vs 2: driver peak 1.000" in bench.report([result, result])
