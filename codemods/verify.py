"""`python -m codemods.migrate --verify PATH`: does the migrated script mean what the old one meant?

For every trainer launch of every launch script under PATH (and every YAML trainer config), the
old arguments are read as the V0 trainer reads them (`trainer.use_v1=false`) and the migrated
ones -- the codemod applied in memory; the user's files are never written -- as
`python -m core_v1.main_ppo` reads them. Both readings (`codemods.verify_read`) become one
normalised view of the settings that decide what is trained (`codemods.verify_view`), and the
views are compared setting by setting, whether or not the trainers would run them. Each launch
gets one verdict:

- `equivalent`: the same view.
- `intended differences`: every difference is one a codemod rule makes on purpose, named with its
  reason: a setting the rename table adds with the old meaning (`multi-turn-agent-loop` sets the
  tool agent), or a key left for a person (a `TODO(migrate:RULE)` marker: V1 refuses it until
  then, and the launch is compared without it).
- `unexpected differences`: any other difference, or V1 refusing to run what V0 runs, is a bug of
  the codemod or the shims; the exit code is then 1.
- `unreadable`: the old arguments cannot be read into a config at all (the error line is shown;
  `refused by V1` for an old launch that already ran rlbridge's V1 entry).
- `not expanded`: a word of the launch only running bash would tell (the reason names it).

Beside the verdict, `runs` says where the migrated launch runs (V1, V0, or `no` with the line its
run ends with, and the old launch's when V0 would not run it either), and `compared_without` names
the keys rlbridge does not support that both readings left out (`codemods.verify_judge`).

Launches are found and their words expanded as `codemods.dry_run_report` does (the codemod's shell
engine: tree-sitter-bash, arrays and string variables; Hydra's override parser); the old and the
migrated script's launches are paired in order. A launch with `--config-path` reads its YAML as
written on the V0 side and migrated (in a temporary copy) on the V1 side. A YAML trainer config
found on its own is verified as `--config-path=<its folder> --config-name=<its name>`. Readings
run from the folder the scripts run from (`VerifyOptions.cwd`), where relative files are found.

This module finds the launches; `codemods.verify_judge` judges one, `codemods.verify_report`
prints the verdicts.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

from codemods.files import SKIPPED_DIRECTORIES, UnreadableFileError, discover, read_text
from codemods.findings import Finding, Severity
from codemods.rules import SHELL, YAML, RuleSelection
from codemods.verify_judge import NOT_EXPANDED, NOT_MIGRATED, UNEXPECTED, Difference, LaunchVerdict, Migrated, judge
from codemods.verify_report import exit_code, format_report, report_json

_CONFIG_PATH_FLAGS = ("--config-path", "-cp")


# --------------------------------------------------------------------------- one file
@dataclass
class VerifyOptions:
    """How scripts are read: `cwd` is the folder they run from (for `$(pwd)` and relative
    `--config-path`); `unset_as_empty` expands a variable nobody sets to "" as bash does (else the
    launch is `not expanded`); `selection` the codemod rules to apply."""

    selection: RuleSelection = field(default_factory=RuleSelection)
    cwd: Optional[Path] = None
    unset_as_empty: bool = False


class Verifier:
    """Verifies files; migrated copies of `--config-path` folders live in one temporary folder."""

    def __init__(self, options: VerifyOptions):
        self.options = options
        self.cwd = (options.cwd or Path.cwd()).resolve()
        self._tmp = tempfile.TemporaryDirectory(prefix="rlbridge-verify-")
        self._config_dirs: dict[Path, tuple[Path, tuple[Finding, ...]]] = {}

    def close(self) -> None:
        self._tmp.cleanup()

    def __enter__(self) -> "Verifier":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def verify_paths(self, paths: Sequence[Path]) -> list[LaunchVerdict]:
        verdicts = []
        for candidate in discover(list(paths)):
            if candidate.kind == SHELL:
                verdicts += self.verify_script(candidate.path)
            elif candidate.kind == YAML:
                verdicts += self.verify_yaml(candidate.path)
            elif candidate.kind is None and candidate.explicit:
                why = (
                    "no such file or directory" if not candidate.path.exists() else "not a launch script or YAML config"
                )
                verdicts.append(LaunchVerdict(candidate.path, 1, NOT_MIGRATED, detail=why))
        return verdicts

    # ----------------------------------------------------------------------- scripts
    def verify_script(self, path: Path) -> list[LaunchVerdict]:
        from codemods.engine import migrate_text
        from codemods.dry_run_report import read_launches

        try:
            text = read_text(path)
        except UnreadableFileError as error:
            return [LaunchVerdict(path, 1, NOT_MIGRATED, detail=str(error))]
        result = migrate_text(text, SHELL, self.options.selection)
        if result.failed:
            error = next(f for f in result.findings if f.severity is Severity.ERROR)
            return [LaunchVerdict(path, error.line, NOT_MIGRATED, detail=error.message)]
        copy = Path(tempfile.mkdtemp(dir=self._tmp.name)) / path.name  # the migrated text, read like the old
        copy.write_text(result.migrated, encoding="utf-8")
        reading = {"cwd": str(self.cwd), "unset_as_empty": self.options.unset_as_empty}
        old_launches, new_launches = read_launches(path, **reading), read_launches(copy, **reading)
        entries = _entries(text)
        if len(entries) != len(old_launches):  # the launches could not be matched to their entries
            entries = [""] * len(old_launches)
        verdicts = [
            self._verify_launch(path, old, new, result.findings, entry)
            for old, new, entry in zip(old_launches, new_launches, entries)
        ]
        for old in old_launches[len(new_launches) :]:
            verdicts.append(
                LaunchVerdict(
                    path,
                    old.line,
                    UNEXPECTED,
                    [Difference("launch", "present", "lost")],
                    detail="the migrated script lost this launch",
                )
            )
        return verdicts

    def _verify_launch(self, path: Path, old, new, findings: tuple[Finding, ...], entry: str) -> LaunchVerdict:
        if old.not_expanded is not None:
            return LaunchVerdict(path, old.line, NOT_EXPANDED, detail=old.not_expanded)
        if new.not_expanded is not None:
            return LaunchVerdict(
                path,
                old.line,
                UNEXPECTED,
                [Difference("launch", "expanded", "not expanded")],
                detail=f"the migrated launch cannot be expanded: {new.not_expanded}",
            )
        old_argv = self._absolute_config_path(_with_entry_config(old.argv, entry))
        new_argv, yaml_findings = self._migrated_config_path(self._absolute_config_path(new.argv))
        migrated = Migrated(tuple(new_argv), (*findings, *yaml_findings), self.options.selection)
        return _judged(path, old.line, old_argv, migrated, self.cwd, entry)

    def _absolute_config_path(self, argv: Sequence[str]) -> list[str]:
        """A relative `--config-path` read from the folder the script runs from."""
        return _map_config_path(
            argv, lambda value: value if Path(value).expanduser().is_absolute() else str(self.cwd / value)
        )

    def _migrated_config_path(self, argv: list[str]) -> tuple[list[str], tuple[Finding, ...]]:
        """`--config-path` pointing at a migrated copy of that folder's YAML files (for V1)."""
        found: list[tuple[Finding, ...]] = []

        def migrated(value: str) -> str:
            directory = Path(value).expanduser()
            if not directory.is_dir():
                return value
            copy, findings = self._migrated_config_dir(directory.resolve())
            found.append(findings)
            return str(copy)

        argv = _map_config_path(argv, migrated)
        return argv, tuple(f for findings in found for f in findings)

    def _migrated_config_dir(self, directory: Path) -> tuple[Path, tuple[Finding, ...]]:
        from codemods.engine import migrate_text

        if directory not in self._config_dirs:
            copy = Path(self._tmp.name) / "configs" / str(len(self._config_dirs))
            findings: list[Finding] = []
            for source in _yaml_files(directory):
                target = copy / source.relative_to(directory)
                target.parent.mkdir(parents=True, exist_ok=True)
                text = read_text(source)
                result = migrate_text(text, YAML, self.options.selection)
                target.write_text(text if result.failed else result.migrated, encoding="utf-8")
                findings += result.findings
            copy.mkdir(parents=True, exist_ok=True)
            self._config_dirs[directory] = (copy, tuple(findings))
        return self._config_dirs[directory]

    # ----------------------------------------------------------------------- YAML configs
    def verify_yaml(self, path: Path) -> list[LaunchVerdict]:
        """A YAML trainer config on its own: `--config-path=<its folder> --config-name=<its name>`."""
        if not _is_trainer_config(path):
            return []
        argv = ["--config-path", str(path.parent.resolve()), "--config-name", path.stem]
        new_argv, findings = self._migrated_config_path(list(argv))
        return [_judged(path, 1, argv, Migrated(tuple(new_argv), findings, self.options.selection), self.cwd)]


def _judged(
    path: Path, line: int, old_argv: Sequence[str], migrated: Migrated, cwd: Path, entry: str = ""
) -> LaunchVerdict:
    """`judge`'s verdict, read from `cwd` as the script runs (a relative reward-function path is
    found there); a traceback in a reading (a bug of ours) is an unexpected difference of that
    launch, and the other launches are still verified."""
    try:
        with contextlib.chdir(cwd):
            return judge(path, line, old_argv, migrated, entry)
    except Exception as error:  # noqa: BLE001 - reported, with its type, as a bug
        bug = f"internal error ({type(error).__name__}: {error}); a bug of rlbridge: please report"
        return LaunchVerdict(path, line, UNEXPECTED, [Difference("reading", "read", bug)])


def _entries(text: str) -> list[str]:
    """The entry module of each launch `codemods.dry_run_report.read_launches` finds, in its order
    (a part of the script the parser cannot read does not hide the launches it can: verl's
    recipe/entropy scripts)."""
    from codemods.shell import find_launches, parse_bash

    source = text.encode("utf-8")
    return [launch.module for launch in find_launches(parse_bash(source), source)]


def _with_entry_config(argv: Sequence[str], entry: str) -> list[str]:
    """The old launch as verl composed it: an entry with a config of its own (a recipe's `@hydra.main`,
    `rename_table.EntrypointRow.config`) reads that config, and a relative `--config-path` beside the
    module, when the launch names none."""
    from shims.rename_table import resolve_entrypoint

    row = resolve_entrypoint(entry) if entry else None
    if row is None or row.config is None:
        return list(argv)
    folder = "/".join(entry.split(".")[:-1])
    argv = _map_config_path(argv, lambda value: value if value.startswith(("/", "~")) else f"{folder}/{value}")
    flags = {token.split("=", 1)[0] for token in argv}
    added = [] if flags & {"--config-path", "-cp"} else [f"--config-path={folder}/{row.config[0]}"]
    added += [] if flags & {"--config-name", "-cn"} else [f"--config-name={row.config[1]}"]
    return [*added, *argv]


def _map_config_path(argv: Sequence[str], change) -> list[str]:
    out, index = list(argv), 0
    while index < len(out):
        token = out[index]
        flag = next((f for f in _CONFIG_PATH_FLAGS if token == f or token.startswith(f + "=")), None)
        if flag is not None and token == flag and index + 1 < len(out):
            out[index + 1] = change(out[index + 1])
            index += 1
        elif flag is not None and token != flag:
            out[index] = f"{flag}={change(token[len(flag) + 1 :])}"
        index += 1
    return out


def _yaml_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.suffix in (".yaml", ".yml")
        and p.is_file()
        and not SKIPPED_DIRECTORIES & set(p.relative_to(directory).parts)
    )


def _is_trainer_config(path: Path) -> bool:
    from ruamel.yaml import YAML as RoundTrip

    from codemods.yaml_config import looks_like_trainer_config

    try:
        data = RoundTrip(typ="safe", pure=True).load(read_text(path))
    except Exception:  # noqa: BLE001 - not YAML we can read: the migration reports it, not this
        return False
    return looks_like_trainer_config(data)


def run_verify(paths: Sequence[Path], options: VerifyOptions, out, report: Optional[Path] = None) -> int:
    """The `--verify` command: print the verdicts, write `report` as JSON, return the exit code."""
    with Verifier(options) as verifier:
        verdicts = verifier.verify_paths(paths)
    out.write(format_report(verdicts, paths) + "\n")
    if report is not None:
        report.write_text(json.dumps(report_json(verdicts), indent=2, default=str) + "\n", encoding="utf-8")
    return exit_code(verdicts)
