"""`python -m codemods.migrate PATH [PATH ...]`: rewrite V0-era scripts, configs and code to V1.

    python -m codemods.migrate run_grpo.sh            # rewrite in place (atomically)
    python -m codemods.migrate --diff scripts/        # show what would change, write nothing
    python -m codemods.migrate --check .              # CI: exit 1 if anything would change
    python -m codemods.migrate --list-rules
    python -m codemods.migrate --only entrypoint --report report.json my_script.sh
    python -m codemods.migrate --verify scripts/ --report verify.json   # old (V0) vs migrated (V1) meaning

Exit codes: 0 nothing to do, 1 changed (or, with --diff/--check, would change), 2 an error in at
least one file (that file is named and left untouched; the others are still migrated).
Markers `TODO(migrate:RULE)` are left where a person must decide; the summary at the end counts
them per rule. `--verify` writes nothing: it reads every launch as V0 reads the old arguments and
as V1 reads the migrated ones and compares what they train (`codemods.verify`); its exit code is
1 when a launch shows an unexpected difference, 2 when a file could not be migrated, else 0.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from codemods.files import Candidate, UnreadableFileError, discover, read_text, write_atomically
from codemods.findings import Finding, MigrationResult, Severity
from codemods.rules import PYTHON, RULES, SHELL, YAML, RuleSelection, UnknownRuleError

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
        return {"path": str(self.path), "kind": self.kind, "status": self.status,
                "findings": [finding.to_json() for finding in self.findings]}


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
        return {"files": [o.to_json() for o in self.outcomes],
                "summary": {"scanned": len(self.outcomes),
                            "changed": sum(o.status == "changed" for o in self.outcomes),
                            "errors": sum(o.status == "error" for o in self.outcomes),
                            "manual_per_rule": dict(sorted(self.manual_per_rule().items())),
                            "exit_code": self.exit_code}}


def migrate_file(candidate: Candidate, selection: RuleSelection, write: bool) -> FileOutcome:
    """Migrate one file; write it (atomically) only when `write` and it changed without error."""
    path = candidate.path
    if candidate.kind is None:
        why = "no such file or directory" if not path.exists() else \
            "unknown file kind (expected .sh/.bash, .yaml/.yml, .py, or a shell shebang)"
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
    diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), result.migrated.splitlines(keepends=True),
                                        fromfile=f"{path} (V0)", tofile=f"{path} (migrated)"))
    if write:
        write_atomically(path, result.migrated)
    return FileOutcome(path, candidate.kind, "changed", result.findings, diff)


def run(paths: list[Path], selection: RuleSelection, write: bool) -> RunSummary:
    """Migrate every file under `paths`; one file's error never stops the others."""
    summary = RunSummary()
    for candidate in discover(paths):
        summary.outcomes.append(migrate_file(candidate, selection, write))
    return summary


def _print_outcomes(summary: RunSummary, show_diff: bool, out, err) -> None:
    for outcome in summary.outcomes:
        if show_diff and outcome.diff:
            out.write(outcome.diff)
        for finding in outcome.findings:
            if finding.severity is not Severity.INFO:
                err.write(f"{outcome.path}:{finding.line}: {finding.severity.value} [{finding.rule}] "
                          f"{finding.message}\n")


def _print_summary(summary: RunSummary, write: bool, err) -> None:
    data = summary.to_json()["summary"]
    verb = "changed" if write else "would change"
    err.write(f"\n{'files scanned':<28}{data['scanned']:>6}\n{'files ' + verb:<28}{data['changed']:>6}\n"
              f"{'files with errors':<28}{data['errors']:>6}\n")
    manual = data["manual_per_rule"]
    if manual:
        err.write(f"{'manual items (rule)':<28}{sum(manual.values()):>6}\n")
        for rule, count in manual.items():
            err.write(f"  {rule:<26}{count:>6}\n")


def _list_rules(out) -> None:
    out.write(f"{'rule':<26} {'kinds':<8} {'type':<10} description\n")
    for name in RULES:
        rule = RULES.get(name)
        kind = "mechanical" if rule.mechanical else "manual"
        out.write(f"{rule.id:<26} {','.join(rule.kinds):<8} {kind:<10} {rule.description}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m codemods.migrate",
                                     description="Rewrite V0-era launch scripts, YAML configs and Python code to V1.")
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (recursed)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff; write nothing")
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    mode.add_argument("--verify", action="store_true",
                      help="write nothing; compare each launch's old arguments (as V0 reads them) with the migrated "
                           "ones (as V1 reads them): equivalent, intended differences, or unexpected (exit 1)")
    parser.add_argument("--only", action="append", metavar="RULE", help="run only this rule (repeatable)")
    parser.add_argument("--skip", action="append", metavar="RULE", help="do not run this rule (repeatable)")
    parser.add_argument("--list-rules", action="store_true", help="list every rule and exit")
    parser.add_argument("--report", type=Path, metavar="FILE",
                        help="write findings (with --verify: the verdicts) as JSON to FILE")
    parser.add_argument("--unset-as-empty", action="store_true",
                        help="with --verify: a shell variable neither the script nor the environment sets expands "
                             "to '' as bash does (default: that launch is reported as not expanded)")
    return parser


def main(argv: list[str] | None = None, out=None, err=None) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_rules:
        _list_rules(out)
        return EXIT_CLEAN
    if not args.paths:
        parser.error("give at least one PATH (a file or a directory), or --list-rules")
    try:
        selection = RuleSelection.from_ids(args.only, args.skip)
    except UnknownRuleError as error:
        err.write(f"error: {error}\n")
        return EXIT_ERROR
    if args.verify:
        from codemods.verify import VerifyOptions, run_verify  # lazy: it loads both trainers' config readers

        return run_verify(args.paths, VerifyOptions(selection, unset_as_empty=args.unset_as_empty), out, args.report)
    write = not (args.diff or args.check)
    summary = run(args.paths, selection, write)
    _print_outcomes(summary, args.diff, out, err)
    if args.report is not None:
        args.report.write_text(json.dumps(summary.to_json(), indent=2) + "\n", encoding="utf-8")
    _print_summary(summary, write, err)
    return summary.exit_code


if __name__ == "__main__":
    sys.exit(main())
