"""`--verify`'s output: the exit code, the per-launch details, the table, and the JSON report.

Each launch has its verdict on meaning, and where its migrated form runs (`runs`): its trainer
(V1, or V0 for a launch the codemod keeps there), or `no` with the reason in its details (the
error line its run ends with, and the old launch's when V0 would not run it either).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

from codemods.verify_judge import (
    COMPARED,
    NO,
    NOT_MIGRATED,
    REFUSED_BY_V1,
    UNEXPECTED,
    UNREADABLE,
    VERDICTS,
    LaunchVerdict,
)


def exit_code(verdicts: Sequence[LaunchVerdict]) -> int:
    """1 when any launch has unexpected differences, 2 when a file could not be migrated, else 0."""
    if any(v.verdict == UNEXPECTED for v in verdicts):
        return 1
    return 2 if any(v.verdict == NOT_MIGRATED for v in verdicts) else 0


def counts(verdicts: Sequence[LaunchVerdict]) -> dict[str, int]:
    found = Counter(v.verdict for v in verdicts)
    return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def running(verdicts: Sequence[LaunchVerdict]) -> int:
    """How many migrated launches run on rlbridge (V1 or V0)."""
    return sum(v.runs not in ("", NO) for v in verdicts)


def report_json(verdicts: Sequence[LaunchVerdict]) -> dict:
    return {
        "launches": [v.to_json() for v in verdicts],
        "summary": {
            "launches": len(verdicts),
            **counts(verdicts),
            "run_on_rlbridge": running(verdicts),
            "exit_code": exit_code(verdicts),
        },
    }


def format_details(verdict: LaunchVerdict, root: Optional[Path] = None) -> list[str]:
    kept = {"V0": " (migrated launch runs on V0)", NO: " (does not run here)"}.get(verdict.runs, "")
    lines = [f"{_where(verdict, root)}: {verdict.verdict}{kept}"]
    if verdict.detail:
        lines.append(f"    {verdict.detail}")
    if verdict.runs == NO:
        lines.append(f"    does not run here: {verdict.wont_run}")
        if verdict.old_wont_run == verdict.wont_run:
            lines.append("    nor does the old launch, with the same line")
        elif verdict.old_wont_run:
            lines.append(f"    nor does the old launch: {verdict.old_wont_run}")
    elif verdict.old_wont_run:
        lines.append(
            f"    the old launch does not run here ({verdict.old_wont_run}); the migrated one runs on {verdict.runs}"
        )
    lines += [f"    compared without {key.key}: {key.reason}" for key in verdict.compared_without]
    lines += [f"    {difference.describe()}" for difference in verdict.differences]
    return lines


def format_table(verdicts: Sequence[LaunchVerdict], root: Optional[Path] = None) -> list[str]:
    rows = [(str(_relative(v.file, root)), str(v.line), v.verdict, v.runs or "-", str(v.count)) for v in verdicts]
    header = ("file", "line", "verdict", "runs", "count")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    last = len(header) - 1
    lines = [
        "  ".join(
            cell.ljust(width) if i < last else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        for row in [header, *rows]
    ]
    total = counts(verdicts)
    lines.append("")
    lines.append(
        f"{len(verdicts)} launch(es): "
        + ", ".join(f"{n} {name}" for name, n in total.items() if n or name in COMPARED)
        + f"; {running(verdicts)} run on rlbridge"
    )
    return lines


def format_report(verdicts: Sequence[LaunchVerdict], paths: Sequence[Path]) -> str:
    """One file: every launch with its differences. A directory: the table, then the details of
    the launches that need a look (unexpected differences, files not migrated, launches whose old
    arguments cannot be read, and migrated launches that do not run here, with the reason)."""
    single_file = len(paths) == 1 and paths[0].is_file()
    root = None if single_file else (paths[0] if len(paths) == 1 else None)
    lines: list[str] = []
    if single_file:
        for verdict in verdicts:
            lines += format_details(verdict)
        if not verdicts:
            lines.append(f"{paths[0]}: no trainer launch found")
        return "\n".join(lines)
    lines += format_table(verdicts, root)
    flagged = [
        v for v in verdicts if v.verdict in (UNEXPECTED, NOT_MIGRATED, UNREADABLE, REFUSED_BY_V1) or v.runs == NO
    ]
    if flagged:
        lines.append("")
        for verdict in flagged:
            lines += format_details(verdict, root)
    return "\n".join(lines)


def _where(verdict: LaunchVerdict, root: Optional[Path]) -> str:
    return f"{_relative(verdict.file, root)}:{verdict.line}"


def _relative(path: Path, root: Optional[Path]) -> Path:
    if root is not None and root.is_dir():
        try:
            return path.relative_to(root)
        except ValueError:
            return path
    return path
