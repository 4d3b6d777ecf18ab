"""Metrics sinks, each with its real package: the run is written, then read back with that package's
own reader (tensorboard's EventAccumulator, MlflowClient, the W&B and SwanLab run-file readers)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from core_v1.plot import main as plot_main
from core_v1.utils.tracking import LoggerUnavailableError, Tracking, read_metrics

STEPS = {1: {"critic/score/mean": 0.25, "actor/pg_loss": -0.5}, 2: {"critic/score/mean": 0.75, "actor/pg_loss": 0.125}}


def _log_two_steps(tmp_path: Path, logger: str) -> None:
    tracking = Tracking([logger], str(tmp_path), "proj", "exp", config={"data": {"train_batch_size": 4}})
    for step, metrics in STEPS.items():
        tracking.log(metrics, step=step)
    tracking.close()


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


def test_console_prints_about_twenty_lines_plus_first_last_and_validations():
    printed = []
    tracking = Tracking(["console"], "unused", "p", "e", console_writer=printed.append, total_steps=400)
    for step in range(1, 401):
        tracking.log({"critic/score/mean": 0.5, **({"val/score/mean": 0.5} if step == 33 else {})}, step=step)
    steps = [int(line.split(":")[0].split()[1]) for line in printed]
    assert steps == sorted({1, 33, *range(20, 401, 20)})


def test_console_lines_go_above_the_progress_bar_not_through_it(capsys):
    from tqdm import tqdm

    tracking = Tracking(["console"], "unused", "p", "e", total_steps=4)
    bar = tqdm(total=4, desc="training", file=sys.stdout, mininterval=0)
    for step in range(1, 5):
        tracking.log({"critic/score/mean": step / 4}, step=step)
        bar.update(1)
    bar.close()
    lines = [line for line in capsys.readouterr().out.split("\n") if "critic/score/mean" in line]
    assert len(lines) == 4
    # After the last carriage return of each line only the metrics remain: the bar was cleared first.
    assert all(line.split("\r")[-1].startswith("step ") for line in lines), lines


def test_tensorboard_event_files_read_back(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _log_two_steps(tmp_path, "tensorboard")
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("critic/score/mean")] == [(1, 0.25), (2, 0.75)]
    assert [(e.step, e.value) for e in events.Scalars("actor/pg_loss")] == [(1, -0.5), (2, 0.125)]


def test_mlflow_file_store_reads_back_with_mlflow_client(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    _log_two_steps(tmp_path, "mlflow")
    client = MlflowClient(uri)
    [run] = client.search_runs([client.get_experiment_by_name("proj").experiment_id])
    assert run.info.run_name == "exp" and run.data.params["data.train_batch_size"] == "4"
    history = client.get_metric_history(run.info.run_id, "critic/score/mean")
    assert [(m.step, m.value) for m in history] == [(1, 0.25), (2, 0.75)]


def test_a_sink_that_cannot_start_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", (tmp_path / "mlruns").as_uri())
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)  # mlflow refuses its file store without it
    with pytest.raises(LoggerUnavailableError, match="mlflow could not start.*MLFLOW_ALLOW_FILE_STORE=true") as error:
        Tracking(["mlflow"], str(tmp_path), "proj", "exp")
    assert "\n" not in str(error.value)


def test_wandb_offline_run_reads_back(tmp_path, monkeypatch):
    # W&B ships no Python reader for its run file; SwanLab's W&B converter has one (leveldb-log framing).
    from swanlab.converter.wb.wbdatastore import WBDataStoreReader
    from wandb.proto.wandb_internal_pb2 import Record

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    _log_two_steps(tmp_path, "wandb")
    [run_file] = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    history, run_names = [], []
    with WBDataStoreReader() as reader:
        reader.open(run_file)
        while (data := reader.scan()) is not None:
            record = Record()
            record.ParseFromString(data)
            if record.HasField("history"):
                history.append(
                    {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
                )
            if record.HasField("run"):
                run_names.append((record.run.project, record.run.display_name))
    assert ("proj", "exp") in run_names
    assert [(h["_step"], h["critic/score/mean"], h["actor/pg_loss"]) for h in history] == [
        (1, 0.25, -0.5),
        (2, 0.75, 0.125),
    ]


def test_swanlab_offline_run_reads_back(tmp_path, monkeypatch):
    from swanlab.proto.swanlab.record.v1.record_pb2 import Record
    from swanlab.sdk.internal.core_python.store import DataStoreReader

    monkeypatch.setenv("SWANLAB_MODE", "offline")
    monkeypatch.delenv("SWANLAB_LOG_DIR", raising=False)
    _log_two_steps(tmp_path, "swanlab")
    [run_file] = (tmp_path / "swanlab").glob("run-*/run-*.swanlab")
    reader = DataStoreReader()
    reader.open(run_file)
    scalars = []
    for data in reader:
        record = Record()
        record.ParseFromString(data)
        if record.HasField("scalar"):
            scalars.append((record.scalar.key, record.scalar.step, record.scalar.value.number))
    reader.close()
    assert sorted(scalars) == [
        ("actor/pg_loss", 1, -0.5),
        ("actor/pg_loss", 2, 0.125),
        ("critic/score/mean", 1, 0.25),
        ("critic/score/mean", 2, 0.75),
    ]


def test_plot_writes_a_png(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("\n".join(json.dumps({"step": s, "critic/score/mean": s / 10}) for s in range(1, 6)))
    assert plot_main([str(metrics), str(tmp_path / "curves.png")]) == 0
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_of_missing_file_is_a_clean_error(tmp_path, capsys):
    assert plot_main([str(tmp_path / "nope.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
