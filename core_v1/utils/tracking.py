"""Metrics sinks (`trainer.logger`): console, jsonl, tensorboard, wandb, mlflow.

`jsonl` appends one JSON object per step to `<trainer.default_local_dir>/metrics.jsonl`; it is
the file tests, benchmarks and `plot_metrics` read. Optional sinks import their library only when
asked for, and say how to install it when it is missing.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Iterable, Optional

CONSOLE_KEYS = ("critic/score/mean", "reward/exact/mean", "response_length/mean", "actor/pg_loss", "actor/entropy", "timing_s/step",
                "perf/throughput", "training/off_policy/trajectory_staleness/mean", "val/score/mean")


class LoggerUnavailableError(RuntimeError):
    pass


def _plain(value: Any) -> Any:
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        value = float(value) if not isinstance(value, int) else value
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


class Tracking:
    def __init__(self, loggers: Iterable[str], local_dir: str, project: str, experiment: str,
                 config: Optional[dict] = None, console_writer=None):
        self.loggers = list(loggers)
        self.local_dir = Path(local_dir)
        self._console = console_writer or print
        self._jsonl = None
        self._tb = self._wandb = self._mlflow = None
        if "jsonl" in self.loggers or "file" in self.loggers:
            self.local_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = open(self.local_dir / "metrics.jsonl", "a", encoding="utf-8")
        if "tensorboard" in self.loggers:
            self._tb = _import("torch.utils.tensorboard", "tensorboard").SummaryWriter(str(self.local_dir / "tensorboard"))
        if "wandb" in self.loggers:
            self._wandb = _import("wandb", "wandb")
            self._wandb.init(project=project, name=experiment, config=config)
        if "mlflow" in self.loggers:
            self._mlflow = _import("mlflow", "mlflow")
            self._mlflow.set_experiment(project)
            self._mlflow.start_run(run_name=experiment)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        clean = {k: _plain(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()  # a crash must not lose finished steps
        numeric = {k: v for k, v in clean.items() if isinstance(v, (int, float))}
        if self._tb is not None:
            for key, value in numeric.items():
                self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log(numeric, step=step)
        if self._mlflow is not None:
            self._mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in numeric.items()}, step=step)
        if "console" in self.loggers:
            shown = " ".join(f"{k}={numeric[k]:.4g}" for k in CONSOLE_KEYS if k in numeric)
            self._console(f"step {step}: {shown}")

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()
        if self._mlflow is not None:
            self._mlflow.end_run()


def _import(module: str, package: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise LoggerUnavailableError(f"trainer.logger asks for {package}, which is not installed; "
                                     f"`pip install {package}` or drop it from trainer.logger") from None


def read_metrics(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def plot_metrics(metrics_file: str | os.PathLike, out_png: str | os.PathLike,
                 keys: Iterable[str] = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/entropy")) -> str:
    """Draw a finished run's curves to a PNG (needs matplotlib: `pip install rlbridge[plot]`)."""
    plt = _import("matplotlib.pyplot", "matplotlib")
    rows = read_metrics(metrics_file)
    keys = [k for k in keys if any(k in r for r in rows)]
    fig, axes = plt.subplots(len(keys), 1, figsize=(7, 2.4 * len(keys)), squeeze=False)
    for ax, key in zip(axes[:, 0], keys):
        points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        ax.plot([p[0] for p in points], [p[1] for p in points])
        ax.set_ylabel(key, fontsize=8)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(out_png)
    return str(out_png)
