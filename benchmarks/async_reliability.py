"""Does async learning depend on luck? Each async mode trains the CPU quickstart `--runs` times, one
seed each, as the end-to-end test does (tests/core_v1/trainer/test_async_e2e.py: the preset, its
model and data, the mode's overrides) but over the preset's whole length by default (the test runs
80 steps to a lower bar), and counts how many runs reach the full run's bar.

Printed per run: the seed, the final score (mean `critic/score/mean` of the last three steps), the
first score (of the first three), whether the run reached the bar (final >= 0.8 and >= first + 0.4),
and what decides it: the staleness of the trained trajectories (mean over steps of the per-step
mean, and the largest), the share of off-policy response tokens, the share of tokens whose IS
weight was clipped, the policy's entropy at the end, the share of prompt groups without learning
signal at the end (all samples scored alike: an entropy collapse onto one answer), and the wall
time. Then, per mode, `k/N reached the sync bar`.

A quickstart run takes about 2-3 minutes on a quiet 2-core machine, so the default 2 x 10 runs take
about an hour; on a shared machine run it in the background:

    nice -n 10 python -m benchmarks.async_reliability [--runs 10] [--first-seed 1]
        [--modes colocate_async separate_async] [--out DIR] [--jobs K [--cores-per-run C]] [key=value ...]

`--jobs K` runs K at once, each in its own process (and Ray runtime) pinned to its own
`--cores-per-run` cores (default 2, the CI machine's size) of the cores this process may use; on a
16-core machine `--jobs 8` takes the 20 runs in about 7 minutes. Lines are printed as runs end.

Extra `key=value` overrides go to every run (e.g. `actor_rollout_ref.actor.optim.lr=1e-3` to probe
the margin). Each run's metrics stay in `DIR/<mode>/seed<N>/metrics.jsonl`, and one summary line per
run is appended to `DIR/summary.jsonl`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

MODE_OVERRIDES = {
    "sync": ["trainer.v1.trainer_mode=sync"],
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
    ],
}
ASYNC_MODES = ("colocate_async", "separate_async")
BAR_FINAL, BAR_GAIN = 0.8, 0.4  # the quickstart's bar: final score, and gain over the first steps


def quickstart_bar(scores: list[float]) -> tuple[float, float, bool]:
    """(first, final, reached): means of the first and last three steps' scores, and whether the
    run reached the bar of a full-length quickstart run."""
    first, final = statistics.mean(scores[:3]), statistics.mean(scores[-3:])
    return first, final, final >= BAR_FINAL and final >= first + BAR_GAIN


def train_quickstart(assets: Path, out: Path, mode: str, seed: int | None, extra: list[str]) -> list[dict]:
    """One quickstart run through the real entrypoint; returns its metrics rows."""
    from core_v1.config import load_config
    from core_v1.main_ppo import run_v1

    seed_override = [] if seed is None else [f"trainer.seed={seed}"]
    config = load_config(
        [
            f"data.train_files={assets / 'data' / 'train.parquet'}",
            f"data.val_files={assets / 'data' / 'val.parquet'}",
            f"actor_rollout_ref.model.path={assets / 'model'}",
            f"trainer.default_local_dir={out}",
            "trainer.progress_bar=false",
            "trainer.logger=[jsonl]",
            *seed_override,
            *MODE_OVERRIDES[mode],
            *extra,
        ],
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def summarize(rows: list[dict]) -> dict:
    """The numbers printed for one run (see the module docstring)."""

    def over_steps(key: str, reduce=statistics.mean) -> float:
        values = [row[key] for row in rows if key in row]
        return float(reduce(values)) if values else float("nan")

    first, final, reached = quickstart_bar([row["critic/score/mean"] for row in rows])
    tail = rows[-3:]
    return {
        "first": first,
        "final": final,
        "reached": reached,
        "staleness_mean": over_steps("training/off_policy/trajectory_staleness/mean"),
        "staleness_max": over_steps("training/off_policy/trajectory_staleness/max", max),
        "off_policy_tokens": over_steps("training/off_policy/off_policy_token_fraction"),
        "is_clipped": over_steps("rollout_corr/rollout_is_clipped_fraction"),
        "entropy_end": statistics.mean(row.get("actor/entropy", float("nan")) for row in tail),
        "no_signal_end": statistics.mean(
            row.get("critic/score/zero_variance_group_fraction", float("nan")) for row in tail
        ),
    }


HEADER = (
    f"{'mode':<15}{'seed':>5}{'final':>7}{'first':>7}  bar {'stale':>6}{'max':>4}{'offpol':>7}"
    f"{'isclip':>7}{'entropy':>8}{'nosig':>6}{'min':>6}"
)


def format_run(mode: str, seed: int, summary: dict, seconds: float) -> str:
    return (
        f"{mode:<15}{seed:>5}{summary['final']:>7.3f}{summary['first']:>7.3f}  "
        f"{'yes' if summary['reached'] else 'NO ':<4}{summary['staleness_mean']:>6.2f}"
        f"{summary['staleness_max']:>4.0f}{summary['off_policy_tokens']:>7.2f}{summary['is_clipped']:>7.3f}"
        f"{summary['entropy_end']:>8.3f}{summary['no_signal_end']:>6.2f}{seconds / 60:>6.1f}"
    )


def run_here(out: Path, runs: list[tuple[str, int]], overrides: list[str]) -> dict[tuple[str, int], bool]:
    """Runs one after another in this process's Ray runtime; returns whether each reached the bar."""
    import ray
    import torch

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)  # what the test suite's runtime asks
    reached = {}
    for mode, seed in runs:
        started = time.perf_counter()
        try:
            rows = train_quickstart(out / "assets", out / mode / f"seed{seed}", mode, seed, overrides)
        except Exception:  # a crashed run counts as not reaching the bar; the others still run
            print(f"{mode:<15}{seed:>5}  crashed:\n{traceback.format_exc()}", flush=True)
            reached[mode, seed] = False
            continue
        summary = summarize(rows)
        seconds = time.perf_counter() - started
        reached[mode, seed] = summary["reached"]
        print(format_run(mode, seed, summary, seconds), flush=True)
        line = (
            json.dumps(
                {
                    "mode": mode,
                    "seed": seed,
                    "seconds": seconds,
                    "overrides": overrides,
                    "scores": [row["critic/score/mean"] for row in rows],
                    **summary,
                }
            )
            + "\n"
        )
        # One write call in append mode, so that runs ending at once (--jobs) never interleave lines.
        sink = os.open(out / "summary.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(sink, line.encode())
        finally:
            os.close(sink)
    return reached


def finished_runs(out: Path, since_byte: int = 0) -> dict[tuple[str, int], dict]:
    """The runs summary.jsonl records from byte `since_byte` on (an earlier use of DIR wrote before it)."""
    path = out / "summary.jsonl"
    if not path.exists():
        return {}
    with path.open("rb") as source:
        source.seek(since_byte)
        rows = [json.loads(line) for line in source.read().decode().splitlines()]
    return {(row["mode"], row["seed"]): row for row in rows}


def run_pinned(
    out: Path, runs: list[tuple[str, int]], overrides: list[str], jobs: int, cores_per_run: int
) -> dict[tuple[str, int], bool]:
    """Each run in a child process of this benchmark pinned to its own cores, `jobs` at once; a line
    per run as it ends (from summary.jsonl; a crashed run's output is in `DIR/<mode>/seed<N>.log`)."""
    cores = sorted(os.sched_getaffinity(0))
    slots = [cores[i : i + cores_per_run] for i in range(0, len(cores) - cores_per_run + 1, cores_per_run)][:jobs]
    if not slots:
        sys.exit(f"error: --cores-per-run {cores_per_run} is more than the {len(cores)} cores this process may use")
    summary = out / "summary.jsonl"
    since_byte = summary.stat().st_size if summary.exists() else 0
    pending, running, free_slots = list(runs), {}, slots
    while pending or running:
        while pending and free_slots:
            mode, seed = run = pending.pop(0)
            slot = free_slots.pop()
            log = out / mode / f"seed{seed}.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("w") as sink:
                child = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.async_reliability",
                        "--runs",
                        "1",
                        "--first-seed",
                        str(seed),
                        "--modes",
                        mode,
                        "--out",
                        str(out),
                        "--child",
                        *overrides,
                    ],
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                    preexec_fn=lambda cpus=slot: os.sched_setaffinity(0, cpus),
                )
            running[child] = slot, run
        time.sleep(1)
        for child in [c for c in running if c.poll() is not None]:
            slot, (mode, seed) = running.pop(child)
            free_slots.append(slot)
            row = finished_runs(out, since_byte).get((mode, seed))
            print(
                format_run(mode, seed, row, row["seconds"])
                if row
                else f"{mode:<15}{seed:>5}  crashed: see {out / mode}/seed{seed}.log",
                flush=True,
            )
    done = finished_runs(out, since_byte)
    return {run: run in done and done[run]["reached"] for run in runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=1, help="seeds first-seed .. first-seed + runs - 1")
    parser.add_argument("--modes", nargs="+", default=list(ASYNC_MODES), choices=list(MODE_OVERRIDES))
    parser.add_argument("--out", type=Path, default=None, help="where runs and summary.jsonl go (default: a temp dir)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, each pinned to its own cores")
    parser.add_argument("--cores-per-run", type=int, default=2)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # one of run_pinned's
    parser.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = parser.parse_args()

    from examples.quickstart.prepare import prepare

    out = args.out or Path(tempfile.mkdtemp(prefix="async_reliability_"))
    prepare(out / "assets" / "data", out / "assets" / "model")
    runs = [(mode, seed) for mode in args.modes for seed in range(args.first_seed, args.first_seed + args.runs)]
    if args.child:
        run_here(out, runs, args.overrides)
        return
    print(f"runs in {out}; overrides: {args.overrides or 'none'}", flush=True)
    print(HEADER, flush=True)
    outcome = (
        run_pinned(out, runs, args.overrides, args.jobs, args.cores_per_run)
        if args.jobs > 1
        else run_here(out, runs, args.overrides)
    )
    reached = {mode: [outcome[mode, seed] for m, seed in runs if m == mode] for mode in args.modes}
    for mode, outcomes in reached.items():
        print(
            f"{mode}: {sum(outcomes)}/{len(outcomes)} reached the sync bar "
            f"(final >= {BAR_FINAL} and >= first + {BAR_GAIN})",
            flush=True,
        )


if __name__ == "__main__":
    main()
