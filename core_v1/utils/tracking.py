"""Metrics sinks (`trainer.logger`): console, jsonl, tensorboard, wandb, mlflow, swanlab.

`jsonl` appends one JSON object per step to `<trainer.default_local_dir>/metrics.jsonl`; it is
the file tests, benchmarks and `plot_metrics` read. `console` writes a line of the main metrics
above the progress bar (`tqdm.write`, so the bar stays whole) for the first step, about twenty
steps spread over the run, the last step and every validation. The other sinks are the real
packages, imported only when asked for, each configured the way its own documentation says:

- tensorboard: event files under `<default_local_dir>/tensorboard`.
- wandb: `WANDB_MODE` (`offline` keeps the run on disk), `WANDB_API_KEY`, ...; run files under
  `<default_local_dir>/wandb` unless `WANDB_DIR` is set.
- mlflow: `MLFLOW_TRACKING_URI` (a server, or `file:///path` with `MLFLOW_ALLOW_FILE_STORE=true`).
- swanlab: `SWANLAB_MODE` (`offline` keeps the run on disk), `SWANLAB_API_KEY`; run files under
  `<default_local_dir>/swanlab` unless `SWANLAB_LOG_DIR` is set.

A sink that is not installed or cannot start ends the run before training with one line naming
the sink, the cause and the fix (`LoggerUnavailableError`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

from core_v1.errors import UserError

CONSOLE_KEYS = (
    "critic/score/mean",
    "reward/exact/mean",
    "response_length/mean",
    "actor/pg_loss",
    "actor/entropy",
    "timing_s/step",
    "perf/throughput",
    "training/off_policy/trajectory_staleness/mean",
    "val/score/mean",
)
CONSOLE_LINES = 20  # console lines over a whole run, besides the first and last step and validations

_FIXES = {
    "wandb": "set WANDB_MODE=offline to keep the run on disk, or WANDB_API_KEY to log online",
    "mlflow": "set MLFLOW_TRACKING_URI to your server, or to file:///path with MLFLOW_ALLOW_FILE_STORE=true",
    "swanlab": "set SWANLAB_MODE=offline to keep the run on disk, or SWANLAB_API_KEY to log online",
    "tensorboard": "check that trainer.default_local_dir is writable",
}


class LoggerUnavailableError(UserError, RuntimeError):
    """A sink in `trainer.logger` is not installed or cannot start; the message names the fix."""


def _plain(value: Any) -> Any:
    if isinstance(value, numbers.Number) and not isinstance(value, bool):
        value = float(value) if not isinstance(value, int) else value
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if hasattr(value, "item"):
        return _plain(value.item())
    return value


def _logged_step(line: bytes) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return -1  # not a row of ours: kept


class Tracking:
    def __init__(
        self,
        loggers: Iterable[str],
        local_dir: str,
        project: str,
        experiment: str,
        config: Optional[dict] = None,
        console_writer: Optional[Callable[[str], None]] = None,
        total_steps: Optional[int] = None,
    ):
        self.loggers = list(loggers)
        self.local_dir = Path(local_dir)
        self.project, self.experiment = project, experiment  # the names each sink below is started with
        if dataclasses.is_dataclass(config):
            config = dataclasses.asdict(config)  # the run's typed config: recorded as the run's parameters
        self._console = console_writer or _write_above_progress_bar
        self._console_every = max(1, math.ceil(total_steps / CONSOLE_LINES)) if total_steps else 1
        self._total_steps = total_steps
        self._jsonl = None
        self._sinks: dict[str, Any] = {}
        if "jsonl" in self.loggers or "file" in self.loggers:
            self.local_dir.mkdir(parents=True, exist_ok=True)
            self._jsonl = open(self.local_dir / "metrics.jsonl", "a", encoding="utf-8")
        for name in ("tensorboard", "wandb", "mlflow", "swanlab"):
            if name in self.loggers:
                self._sinks[name] = _start(name, self.local_dir, project, experiment, config)

    def log(self, metrics: dict[str, Any], step: int) -> None:
        clean = {k: _plain(v) for k, v in metrics.items()}
        if self._jsonl is not None:
            self._jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self._jsonl.flush()  # a crash must not lose finished steps
        numeric = {k: v for k, v in clean.items() if isinstance(v, (int, float))}
        for name, sink in self._sinks.items():
            _LOG[name](sink, numeric, step)
        if "console" in self.loggers and self._console_due(step, numeric):
            shown = " ".join(f"{k}={numeric[k]:.4g}" for k in CONSOLE_KEYS if k in numeric)
            self._console(f"step {step}: {shown}")

    def forget_steps_after(self, step: int) -> None:
        """Drop the `metrics.jsonl` rows of steps after `step`: a resumed run logs them again. The
        file is cut in place (the append handle stays valid); the other sinks keep what they got."""
        if self._jsonl is None:
            return
        path, kept = self.local_dir / "metrics.jsonl", 0
        with open(path, "rb") as file:
            for line in file:
                if not line.endswith(b"\n") or _logged_step(line) > step:  # a torn last row goes too
                    break
                kept += len(line)
        os.truncate(path, kept)

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        for name, sink in self._sinks.items():
            _CLOSE[name](sink)
        self._sinks = {}

    def _console_due(self, step: int, numeric: dict[str, Any]) -> bool:
        return (
            step <= 1
            or step % self._console_every == 0
            or step == self._total_steps
            or any(k.startswith("val/") for k in numeric)
        )


def _write_above_progress_bar(line: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(line)  # clears the bar, writes the line, redraws the bar below it


def _start(name: str, local_dir: Path, project: str, experiment: str, config: Optional[dict]) -> Any:
    """The started sink `name`; a missing package or a failed start is one user-error line."""
    module = _import(_MODULES[name], name)
    try:
        return _STARTERS[name](module, local_dir, project, experiment, config)
    except Exception as cause:
        first_line = (str(cause).strip().splitlines() or [""])[0]
        raise LoggerUnavailableError(
            f"trainer.logger: {name} could not start ({type(cause).__name__}: "
            f"{first_line}); {_FIXES[name]}, or drop it from trainer.logger"
        ) from None


def _start_tensorboard(module, local_dir, project, experiment, config):
    return module.SummaryWriter(str(local_dir / "tensorboard"))


def _start_wandb(wandb, local_dir, project, experiment, config):
    folder = Path(os.environ.get("WANDB_DIR") or local_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return wandb.init(project=project, name=experiment, config=config, dir=str(folder))


def _start_mlflow(mlflow, local_dir, project, experiment, config):
    mlflow.set_experiment(project)
    run = mlflow.start_run(run_name=experiment)
    if config:
        mlflow.log_params({k: str(v)[:500] for k, v in _flatten(config).items()})
    return run


def _start_swanlab(swanlab, local_dir, project, experiment, config):
    folder = Path(os.environ.get("SWANLAB_LOG_DIR") or local_dir / "swanlab")
    folder.mkdir(parents=True, exist_ok=True)
    return swanlab.init(project=project, name=experiment, config=config, log_dir=str(folder))


def _log_mlflow(run, numeric, step):
    import mlflow

    # mlflow allows only alphanumerics, _ - . space : / in metric names
    mlflow.log_metrics({k.replace("@", "_at_"): v for k, v in numeric.items()}, step=step, run_id=run.info.run_id)


def _log_tensorboard(writer, numeric, step):
    for key, value in numeric.items():
        writer.add_scalar(key, value, step)


def _end_wandb(run):
    import wandb

    run.finish()
    wandb.teardown()  # waits for wandb's service process to write out the run files


def _end_mlflow(run):
    import mlflow

    mlflow.end_run()


_MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb", "mlflow": "mlflow", "swanlab": "swanlab"}
_STARTERS = {
    "tensorboard": _start_tensorboard,
    "wandb": _start_wandb,
    "mlflow": _start_mlflow,
    "swanlab": _start_swanlab,
}
_LOG = {
    "tensorboard": _log_tensorboard,
    "wandb": lambda run, m, step: run.log(m, step=step),
    "mlflow": _log_mlflow,
    "swanlab": lambda run, m, step: run.log(m, step=step),
}
_CLOSE = {
    "tensorboard": lambda writer: writer.close(),
    "wandb": _end_wandb,
    "mlflow": _end_mlflow,
    "swanlab": lambda run: run.finish(),
}


def _flatten(tree: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def require_sinks(loggers: Iterable[str]) -> None:
    """Import the package of every sink `loggers` names, starting none (the run's pre-start check)."""
    for name in loggers:
        if name in _MODULES:
            _import(_MODULES[name], name)


def _import(module: str, package: str):
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise LoggerUnavailableError(
            f"trainer.logger asks for {package}, which is not installed; "
            f"`pip install {package}` or drop it from trainer.logger"
        ) from None


def read_metrics(path: str | os.PathLike) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def plot_metrics(
    metrics_file: str | os.PathLike,
    out_png: str | os.PathLike,
    keys: Iterable[str] = ("critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/entropy"),
) -> str:
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
