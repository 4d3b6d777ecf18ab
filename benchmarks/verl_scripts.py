"""verl's own launch scripts through `trainer.dry_run=true`: how many does rlbridge accept?

    python benchmarks/verl_scripts.py VERL [--tags v0.5.0 v0.6.1 v0.7.1] [--mode v1|v0] [--show N]

VERL is a verl checkout (its `examples/` and `recipe/` are read as they are) or a bare git mirror
of verl (each `--tag`'s `examples/` and `recipe/` are exported to a temporary folder with
`git archive`). Nothing of verl is copied into this project.

`--mode v1` (default): the scripts are copied to a temporary folder, migrated there with
`python -m codemods.migrate`, and every trainer launch in them is dry-run as written (V1).
`--mode v0`: the scripts are read unchanged and every launch is dry-run with
`trainer.use_v1=false` added. Launches are found and expanded by `shims.dry_run_report` (the
same reading of scripts as the migration tool); a launch whose words only running bash could
tell is counted as "not expanded". Model and data paths are replaced by the same stand-ins for
every launch (`STAND_INS`), as the user's files are not here.

The report gives, per tag, the launches found, how many passed, failed or were not expanded, the
acceptance rate (passed / launches), and every failure's reason grouped (key values stripped),
most frequent first. The exit code is 1 when a dry run ended in a traceback (a bug of ours).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from shims.dry_run_report import Outcome, ScriptLaunch, dry_run, read_launches, replace_paths  # noqa: E402

SCRIPT_FOLDERS = ("examples", "recipe")
DEFAULT_TAGS = ("v0.5.0", "v0.6.1", "v0.7.1")
# Model and data paths are the user's machine's; the dry run checks the config, so every script gets
# the same stand-ins (the plan says they are not here, which is no refusal).
STAND_INS = {"model": "models/verl-model", "train": "data/train.parquet", "val": "data/val.parquet"}


@dataclass
class TagReport:
    """The outcome of every launch found in one tag's scripts."""

    tag: str
    scripts: int = 0
    outcomes: list[tuple[ScriptLaunch, Outcome]] = field(default_factory=list)

    def count(self, kind: str) -> int:
        return sum(outcome.kind == kind for _, outcome in self.outcomes)

    @property
    def acceptance(self) -> float:
        return self.count("passes") / len(self.outcomes) if self.outcomes else 0.0

    def reasons(self) -> Counter:
        return Counter(group_reason(outcome) for _, outcome in self.outcomes if outcome.kind != "passes")


def group_reason(outcome: Outcome) -> str:
    """The reason with values stripped, so that one missing feature counts as one group."""
    text = re.sub(r"=\S+", "=...", outcome.reason)
    text = re.sub(r"\(\d+\)", "(N)", text)
    text = re.sub(r"'[^']*/[^']*'", "'PATH'", text)
    return f"{outcome.kind}: {text}"


# --------------------------------------------------------------------------- verl's scripts


@contextlib.contextmanager
def scripts_of(verl: Path, tag: str | None) -> Iterator[Path]:
    """A folder holding `examples/` and `recipe/` of `verl` (at `tag` for a bare mirror)."""
    if not is_bare_mirror(verl):
        yield verl
        return
    with tempfile.TemporaryDirectory(prefix=f"verl-{tag}-") as tmp:
        present = subprocess.run(["git", "-C", str(verl), "ls-tree", "--name-only", tag], check=True,
                                 capture_output=True, text=True).stdout.split()
        folders = [f for f in SCRIPT_FOLDERS if f in present]
        archive = subprocess.run(["git", "-C", str(verl), "archive", tag, *folders], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        yield Path(tmp)


def is_bare_mirror(path: Path) -> bool:
    return (path / "HEAD").is_file() and (path / "objects").is_dir()


def shell_scripts(root: Path) -> list[Path]:
    return sorted(p for folder in SCRIPT_FOLDERS if (root / folder).is_dir()
                  for p in (root / folder).rglob("*.sh") if p.is_file())


def migrate_copy(root: Path, into: Path) -> Path:
    """A copy of `root`'s script folders, migrated with `python -m codemods.migrate` (output hidden)."""
    for folder in SCRIPT_FOLDERS:
        if (root / folder).is_dir():
            shutil.copytree(root / folder, into / folder, symlinks=True)
    from codemods.migrate import main as migrate

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        migrate([str(into / folder) for folder in SCRIPT_FOLDERS if (into / folder).is_dir()])
    return into


# --------------------------------------------------------------------------- running


def dry_run_scripts(root: Path, tag: str, extra: Sequence[str] = ()) -> TagReport:
    report = TagReport(tag)
    for script in shell_scripts(root):
        report.scripts += 1
        # As bash runs them from verl's root: `$(pwd)` is the root and an unset variable is "".
        for launch in read_launches(script, cwd=str(root), unset_as_empty=True):
            if launch.not_expanded is not None:
                report.outcomes.append((launch, Outcome("not expanded", launch.not_expanded)))
            else:
                argv = replace_paths(launch.argv, STAND_INS["model"], STAND_INS["train"], STAND_INS["val"])
                report.outcomes.append((launch, dry_run([*argv, *extra])))
    return report


def run_tag(verl: Path, tag: str | None, mode: str) -> TagReport:
    label = tag or str(verl)
    with scripts_of(verl, tag) as root:
        if mode == "v0":
            return dry_run_scripts(root, label, ["trainer.use_v1=false"])
        with tempfile.TemporaryDirectory(prefix="verl-migrated-") as tmp:
            report = dry_run_scripts(migrate_copy(root, Path(tmp)), label)
    return report


def format_report(reports: Sequence[TagReport], mode: str, show: int) -> str:
    lines = [f"mode {mode}"]
    for report in reports:
        lines.append(f"{report.tag}: {report.scripts} scripts, {len(report.outcomes)} launches: "
                     f"{report.count('passes')} passed, {report.count('fails')} failed, "
                     f"{report.count('not expanded')} not expanded, {report.count('traceback')} tracebacks; "
                     f"accepted {report.acceptance:.1%}")
        for reason, count in report.reasons().most_common(show):
            lines.append(f"    {count:4d}  {reason}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verl", type=Path, help="a verl checkout or a bare git mirror of verl")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS), help="tags to read from a bare mirror")
    parser.add_argument("--mode", choices=("v1", "v0"), default="v1",
                        help="v1: migrate, then dry-run as written; v0: unchanged, with trainer.use_v1=false")
    parser.add_argument("--show", type=int, default=30, help="how many refusal groups to list per tag")
    args = parser.parse_args(argv)
    if not args.verl.exists():
        parser.error(f"no such folder: {args.verl}")
    tags = args.tags if is_bare_mirror(args.verl) else [None]
    reports = [run_tag(args.verl, tag, args.mode) for tag in tags]
    print(format_report(reports, args.mode, args.show))
    return 1 if any(r.count("traceback") for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
