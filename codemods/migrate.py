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
import json
import sys
from pathlib import Path

from codemods.engine import EXIT_CLEAN, EXIT_ERROR, RunSummary, run

# The library's names stay importable from the CLI module, where callers first found them.
from codemods.engine import EXIT_CHANGED, FileOutcome, migrate_file, migrate_text  # noqa: F401
from codemods.findings import Severity
from codemods.rules import RULES, RuleSelection, UnknownRuleError


def _print_outcomes(summary: RunSummary, show_diff: bool, out, err) -> None:
    for outcome in summary.outcomes:
        if show_diff and outcome.diff:
            out.write(outcome.diff)
        for finding in outcome.findings:
            if finding.severity is not Severity.INFO:
                err.write(
                    f"{outcome.path}:{finding.line}: {finding.severity.value} [{finding.rule}] {finding.message}\n"
                )


def _print_summary(summary: RunSummary, write: bool, err) -> None:
    data = summary.to_json()["summary"]
    verb = "changed" if write else "would change"
    err.write(
        f"\n{'files scanned':<28}{data['scanned']:>6}\n{'files ' + verb:<28}{data['changed']:>6}\n"
        f"{'files with errors':<28}{data['errors']:>6}\n"
    )
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
    parser = argparse.ArgumentParser(
        prog="python -m codemods.migrate",
        description="Rewrite V0-era launch scripts, YAML configs and Python code to V1.",
    )
    parser.add_argument("paths", nargs="*", type=Path, help="files or directories (recursed)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--diff", action="store_true", help="print a unified diff; write nothing")
    mode.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything would change")
    mode.add_argument(
        "--verify",
        action="store_true",
        help="write nothing; compare each launch's old arguments (as V0 reads them) with the migrated "
        "ones (as V1 reads them): equivalent, intended differences, or unexpected (exit 1)",
    )
    parser.add_argument("--only", action="append", metavar="RULE", help="run only this rule (repeatable)")
    parser.add_argument("--skip", action="append", metavar="RULE", help="do not run this rule (repeatable)")
    parser.add_argument("--list-rules", action="store_true", help="list every rule and exit")
    parser.add_argument(
        "--report", type=Path, metavar="FILE", help="write findings (with --verify: the verdicts) as JSON to FILE"
    )
    parser.add_argument(
        "--unset-as-empty",
        action="store_true",
        help="with --verify: a shell variable neither the script nor the environment sets expands "
        "to '' as bash does (default: that launch is reported as not expanded)",
    )
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
