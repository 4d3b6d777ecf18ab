"""`python -m codemods.migrate --verify` on verl's own launch scripts and YAML configs, per tag.

    python benchmarks/verify_verl_scripts.py VERL [--tags v0.5.0 v0.6.0 ...] [--show N] [--report OUT.json]

VERL is a bare git mirror of verl (each tag's tree, or `main`'s, is exported to a temporary folder
with `git archive`, as `benchmarks/verl_scripts.py` does, and its `SCRIPT_FOLDERS` are verified) or
a checkout (read as it is). Every trainer launch of every `.sh` file, and every YAML trainer config, is verified: the
old arguments as V0 reads them against the migrated ones (the codemod in memory) as V1 reads them.
Scripts are read as bash runs them from verl's root: `$(pwd)` is that root and a variable nobody
sets is "". Nothing of verl is copied into this project.

The report gives, per tag, the number of launches, of each verdict (equivalent, intended
differences, unexpected differences, unreadable, not expanded, ...) and of migrated launches that
run on rlbridge; the intended differences grouped by rule; the launches whose old arguments cannot
be read, grouped by reason; the migrated launches that do not run here, grouped by the reason
their run ends with; and every unexpected difference. The exit code is 1 when any launch shows an
unexpected difference.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from benchmarks.verl_scripts import SCRIPT_FOLDERS, is_bare_mirror, scripts_of  # noqa: E402
from codemods.verify import Verifier, VerifyOptions  # noqa: E402
from codemods.verify_judge import (  # noqa: E402
    INTENDED,
    NO,
    NOT_EXPANDED,
    REFUSED_BY_V1,
    UNEXPECTED,
    UNREADABLE,  # noqa: E402
    LaunchVerdict,
)
from codemods.verify_report import counts, running  # noqa: E402

DEFAULT_TAGS = ("v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0", "v0.7.1", "v0.8.0", "v0.9.0", "main")


@dataclass
class TagVerdicts:
    tag: str
    verdicts: list[LaunchVerdict] = field(default_factory=list)
    seconds: float = 0.0

    def count(self, verdict: str) -> int:
        return sum(v.verdict == verdict for v in self.verdicts)


def verify_tag(verl: Path, tag: str | None) -> TagVerdicts:
    """Every launch and YAML trainer config of one tag's script folders, verified."""
    started = time.perf_counter()
    with scripts_of(verl, tag) as root:
        folders = [root / folder for folder in SCRIPT_FOLDERS if (root / folder).is_dir()]
        with Verifier(VerifyOptions(cwd=root, unset_as_empty=True)) as verifier:
            verdicts = verifier.verify_paths(folders)
        for verdict in verdicts:  # paths inside the temporary export mean nothing after it
            verdict.file = verdict.file.relative_to(root)
            verdict.detail, verdict.wont_run, verdict.old_wont_run = (
                text.replace(str(root), "<verl>") for text in (verdict.detail, verdict.wont_run, verdict.old_wont_run)
            )
    return TagVerdicts(tag or str(verl), verdicts, time.perf_counter() - started)


def grouped(reason: str) -> str:
    """A refusal with values stripped, so that one missing feature counts as one group."""
    text = re.sub(r"=\S+", "=...", reason)
    return re.sub(r"'[^']*/[^']*'", "'PATH'", text)


def format_report(reports: Sequence[TagVerdicts], show: int) -> str:
    lines = []
    for report in reports:
        total = counts(report.verdicts)
        lines.append(
            f"{report.tag}: {len(report.verdicts)} launches in {report.seconds:.0f}s: "
            + ", ".join(f"{n} {name}" for name, n in total.items())
            + f"; {running(report.verdicts)} migrated launches run on rlbridge"
        )
        rules = Counter(d.rule for v in report.verdicts if v.verdict == INTENDED for d in v.differences)
        for rule, n in rules.most_common():
            lines.append(f"    intended      {n:4d}  {rule}")
        groups = (
            ("unreadable", lambda v: v.verdict in (UNREADABLE, REFUSED_BY_V1), lambda v: v.detail),
            ("does not run", lambda v: v.runs == NO, lambda v: v.wont_run),
            ("not expanded", lambda v: v.verdict == NOT_EXPANDED, lambda v: v.detail),
        )
        for name, chosen, reason in groups:
            found = Counter(grouped(reason(v)) for v in report.verdicts if chosen(v))
            for text, n in found.most_common(show):
                lines.append(f"    {name:12s}  {n:4d}  {text[:160]}")
        for verdict in report.verdicts:
            if verdict.verdict == UNEXPECTED:
                lines.append(f"    UNEXPECTED {verdict.file}:{verdict.line}")
                lines += [f"        {d.describe()}" for d in verdict.differences if d.rule is None]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verl", type=Path, help="a bare git mirror of verl, or a checkout")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS), help="tags to read from a bare mirror")
    parser.add_argument("--show", type=int, default=10, help="how many reason groups to list per tag, per kind")
    parser.add_argument("--report", type=Path, help="write every verdict as JSON here")
    args = parser.parse_args(argv)
    if not args.verl.exists():
        parser.error(f"no such folder: {args.verl}")
    tags = args.tags if is_bare_mirror(args.verl) else [None]
    reports = [verify_tag(args.verl, tag) for tag in tags]
    print(format_report(reports, args.show))
    if args.report is not None:
        args.report.write_text(
            json.dumps({r.tag: [v.to_json() for v in r.verdicts] for r in reports}, indent=1, default=str) + "\n"
        )
    return 1 if any(r.count(UNEXPECTED) for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
