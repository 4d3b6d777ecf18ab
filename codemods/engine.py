"""The migration engine: one text or one file from V0 to V1, and a run over many files.

`codemods.migrate` is its command line; `codemods.verify` and the benchmarks call it directly.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from codemods.files import Candidate, UnreadableFileError, discover, read_text, write_atomically
from codemods.findings import Finding, MigrationResult, Severity
from codemods.rules import PYTHON, SHELL, YAML, RuleSelection

EXIT_CLEAN, EXIT_CHANGED, EXIT_ERROR = 0, 1, 2


def _engine(kind: str) -> Callable[[str, RuleSelection], MigrationResult]:
    # Engines are imported on first use: a run over YAML files never loads libcst or tree-sitter.
    if kind == SHELL:
        from codemods.shell import migrate_shell

        return migrate_shell
    if kind == YAML:
        from codemods.yaml_config import migrate_yaml

        return migrate_yaml
    from codemods.python_code import migrate_python

    return migrate_python


def migrate_text(text: str, kind: str, selection: RuleSelection = RuleSelection()) -> MigrationResult:
    """Migrate one text of a known kind (`sh`, `yaml`, `py`); the library entry point."""
    if kind not in (SHELL, YAML, PYTHON):
        raise ValueError(f"unknown file kind {kind!r}; expected one of sh, yaml, py")
    return _engine(kind)(text, selection)


@dataclass
class FileOutcome:
    """One file's result as the CLI reports it."""

    path: Path
    kind: str | None
    status: str  # "changed", "unchanged" or "error"
    findings: tuple[Finding, ...] = ()
    diff: str = ""

    def to_json(self) -> dict:
        return {
            "path": str(self.path),
            "kind": self.kind,
            "status": self.status,
            "findings": [finding.to_json() for finding in self.findings],
        }


@dataclass
class RunSummary:
    outcomes: list[FileOutcome] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if any(o.status == "error" for o in self.outcomes):
            return EXIT_ERROR
        return EXIT_CHANGED if any(o.status == "changed" for o in self.outcomes) else EXIT_CLEAN

    def manual_per_rule(self) -> Counter:
        return Counter(f.rule for o in self.outcomes for f in o.findings if f.severity is Severity.MANUAL)

    def to_json(self) -> dict:
        return {
            "files": [o.to_json() for o in self.outcomes],
            "summary": {
                "scanned": len(self.outcomes),
                "changed": sum(o.status == "changed" for o in self.outcomes),
                "errors": sum(o.status == "error" for o in self.outcomes),
                "manual_per_rule": dict(sorted(self.manual_per_rule().items())),
                "exit_code": self.exit_code,
            },
        }


def migrate_file(candidate: Candidate, selection: RuleSelection, write: bool) -> FileOutcome:
    """Migrate one file; write it (atomically) only when `write` and it changed without error."""
    path = candidate.path
    if candidate.kind is None:
        why = (
            "no such file or directory"
            if not path.exists()
            else "unknown file kind (expected .sh/.bash, .yaml/.yml, .py, or a shell shebang)"
        )
        return FileOutcome(path, None, "error", (Finding("input", 1, Severity.ERROR, why),))
    try:
        text = read_text(path)
    except UnreadableFileError as error:
        return FileOutcome(path, candidate.kind, "error", (Finding("input", 1, Severity.ERROR, str(error)),))
    try:
        result = migrate_text(text, candidate.kind, selection)
    except Exception as error:  # a bug in a rule must not stop the other files; name it and move on
        message = f"internal error ({type(error).__name__}: {error}); left untouched (a codemods bug: please report)"
        return FileOutcome(path, candidate.kind, "error", (Finding("internal", 1, Severity.ERROR, message),))
    if result.failed:
        return FileOutcome(path, candidate.kind, "error", result.findings)
    if not result.changed:
        return FileOutcome(path, candidate.kind, "unchanged", result.findings)
    diff = "".join(
        difflib.unified_diff(
            text.splitlines(keepends=True),
            result.migrated.splitlines(keepends=True),
            fromfile=f"{path} (V0)",
            tofile=f"{path} (migrated)",
        )
    )
    if write:
        write_atomically(path, result.migrated)
    return FileOutcome(path, candidate.kind, "changed", result.findings, diff)


def run(paths: list[Path], selection: RuleSelection, write: bool) -> RunSummary:
    """Migrate every file under `paths`; one file's error never stops the others."""
    summary = RunSummary()
    for candidate in discover(paths):
        summary.outcomes.append(migrate_file(candidate, selection, write))
    return summary
