"""The quickstart's step time on two source trees, side by side: did a change make steps slower?

Each tree (a checkout of rlbridge, e.g. a `git worktree` of the commit before a change, and this
one) trains the quickstart task (its preset, data and tiny model, made here once and shared) for
`--steps` steps through its own `python -m core_v1.main_ppo`, with 1 and with 2 CPU training ranks.
The trees alternate run by run (old, new, old, new, ...) so that a machine busy with other work
slows both alike; each configuration runs `--repeats` times. Printed: each run's median
`timing_s/step` (the first step, warm-up, left out), then per rank count the median over repeats
and the ratio new / old.

Run: git worktree add /tmp/rlbridge-old <commit>
     python -m benchmarks.step_time --old /tmp/rlbridge-old [--new .] [--steps 12] [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def make_assets(root: Path) -> dict[str, Path]:
    sys.path.insert(0, str(REPO_ROOT))
    from examples.quickstart.prepare import NUMBER_WORDS, write_data
    from examples.tiny_model import make_tiny_model

    train, val = write_data(root / "data")
    return {
        "model": Path(make_tiny_model(root / "model", NUMBER_WORDS, hidden_size=32, num_layers=2)),
        "train": train,
        "val": val,
    }


def run_tree(tree: Path, assets: dict[str, Path], out: Path, steps: int, ranks: int) -> float:
    """Median `timing_s/step` of one quickstart run in `tree` (steps 2..), in its own process."""
    command = [
        sys.executable,
        "-m",
        "core_v1.main_ppo",
        "--config-name=quickstart",
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['val']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"trainer.default_local_dir={out}",
        f"trainer.total_training_steps={steps}",
        f"trainer.n_gpus_per_node={ranks}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.save_freq=-1",
        "trainer.logger=[jsonl]",
        "trainer.progress_bar=false",
    ]
    env = {**os.environ, "PYTHONPATH": str(tree), "TOKENIZERS_PARALLELISM": "false"}
    subprocess.run(command, cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return statistics.median(row["timing_s/step"] for row in rows if row["step"] > 1)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, type=Path)
    parser.add_argument("--new", default=REPO_ROOT, type=Path)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args(argv)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    times: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="step_time_") as tmp:
        assets = make_assets(Path(tmp) / "assets")
        for repeat in range(args.repeats):
            for ranks in args.ranks:
                for name, tree in trees.items():
                    out = Path(tmp) / f"{name}_{ranks}_{repeat}"
                    seconds = run_tree(tree, assets, out, args.steps, ranks)
                    times.setdefault((name, ranks), []).append(seconds)
                    print(f"{name} tree, {ranks} rank(s), run {repeat + 1}: {seconds:.3f} s/step", flush=True)
    summary = {}
    for ranks in args.ranks:
        old, new = (statistics.median(times[(name, ranks)]) for name in ("old", "new"))
        summary[ranks] = new / old
        print(f"{ranks} rank(s): old {old:.3f} s/step, new {new:.3f} s/step, new / old {new / old:.3f}")
    return summary


if __name__ == "__main__":
    main()
