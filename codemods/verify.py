"""`python -m codemods.migrate --verify PATH`: does the migrated script mean what the old one meant?

For every trainer launch of every launch script under PATH (and every YAML trainer config), the
old arguments are read as the V0 trainer reads them (`trainer.use_v1=false`) and the migrated
ones -- the codemod applied in memory; the user's files are never written -- as
`python -m core_v1.main_ppo` reads them. Both readings (`codemods.verify_read`) become one
normalised view of the settings that decide what is trained (`codemods.verify_view`), and the
views are compared setting by setting. Each launch gets one verdict:

- `equivalent`: the same view.
- `intended differences`: every difference is one a codemod rule makes on purpose, named with its
  reason: a setting the rename table adds with the old meaning (`multi-turn-agent-loop` sets the
  tool agent), or a key left for a person (a `TODO(migrate:RULE)` marker: V1 refuses it until
  then, and the launch is compared without it).
- `unexpected differences`: any other difference, or V1 refusing what V0 accepted, is a bug of
  the codemod or the shims; the exit code is then 1.
- `refused by V0`: V0 itself does not run the old arguments (its one error line is shown).
- `not expanded`: a word of the launch only running bash would tell (the reason names it).

Launches are found and their words expanded as `shims.dry_run_report` does (the codemod's shell
engine: tree-sitter-bash, arrays and string variables; Hydra's override parser); the old and the
migrated script's launches are paired in order. A launch with `--config-path` reads its YAML as
written on the V0 side and migrated (in a temporary copy) on the V1 side.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from codemods.files import SKIPPED_DIRECTORIES, UnreadableFileError, discover, read_text
from codemods.findings import Finding, Severity
from codemods.rules import SHELL, YAML, RuleSelection
from codemods.verify_read import Reading, read_as_v0, read_as_v1
from codemods.verify_view import plain, setting

EQUIVALENT = "equivalent"
INTENDED = "intended differences"
UNEXPECTED = "unexpected differences"
REFUSED_BY_V0 = "refused by V0"
REFUSED_BY_V1 = "refused by V1"  # an old launch that already ran rlbridge's V1 entry
NOT_EXPANDED = "not expanded"
NOT_MIGRATED = "not migrated"  # the codemod could not migrate the file (its error is shown)
VERDICTS = (EQUIVALENT, INTENDED, UNEXPECTED, REFUSED_BY_V0, REFUSED_BY_V1, NOT_EXPANDED, NOT_MIGRATED)
_CONFIG_PATH_FLAGS = ("--config-path", "-cp")


@dataclass(frozen=True)
class Difference:
    """One setting the two readings disagree on; `rule` names the codemod rule that made it (None:
    unexpected), `reason` says why."""

    setting: str
    old: Any
    new: Any
    rule: Optional[str] = None
    reason: str = ""

    def describe(self) -> str:
        why = f"  [{self.rule}: {self.reason}]" if self.rule else "  [no rule makes this: unexpected]"
        return f"{self.setting}: {_shown(self.old)} -> {_shown(self.new)}{why}"

    def to_json(self) -> dict:
        return {"setting": self.setting, "old": self.old, "new": self.new, "rule": self.rule, "reason": self.reason}


@dataclass
class LaunchVerdict:
    """The verdict on one launch (or one YAML trainer config): where, what, and why."""

    file: Path
    line: int
    verdict: str
    differences: list[Difference] = field(default_factory=list)
    detail: str = ""  # V0's error line, why a launch is not expanded, or the codemod's error
    trainer: str = ""  # the trainer the migrated arguments select (V1, or V0 when kept there)

    @property
    def count(self) -> int:
        return len(self.differences)

    def to_json(self) -> dict:
        return {"file": str(self.file), "line": self.line, "verdict": self.verdict, "count": self.count,
                "trainer": self.trainer, "detail": self.detail,
                "differences": [d.to_json() for d in self.differences]}


# --------------------------------------------------------------------------- one launch
@dataclass(frozen=True)
class Migrated:
    """The codemod's work on one launch: the migrated arguments and what its rules said."""

    argv: tuple[str, ...]
    findings: tuple[Finding, ...]
    selection: RuleSelection


def judge(old_argv: Sequence[str], migrated: Migrated, old_entry: str = "") -> tuple[str, list[Difference], str, str]:
    """(verdict, differences, detail, trainer) for one launch's old and migrated arguments. The old
    ones are read as V0 reads them, unless the launch already ran rlbridge's entry (`old_entry`):
    then as that entry reads them."""
    from shims.rename_table import V1_ENTRYPOINT

    old = read_as_v1(old_argv) if old_entry == V1_ENTRYPOINT else read_as_v0(old_argv)
    if old.refused is not None:
        return REFUSED_BY_V0 if old.trainer == "V0" else REFUSED_BY_V1, [], old.refused, ""
    left = _left_for_a_person(migrated.findings)
    argv, stripped = _without_keys(migrated.argv, left)
    new, defaulted = _read_migrated(argv, old.view)
    differences = [Difference(key, _value_of(key, old_argv), "left for a person (marker)", left[key].rule,
                              left[key].message) for key in stripped]
    differences += [Difference(key, old.view[key], "refused: no default on V1", _ENTRYPOINT_RULE,
                               _changed_default_reason(key)) for key in defaulted]
    if new.refused is not None:
        differences.append(_refusal(new, left))
    else:
        effects = _declared_effects(old_argv, migrated.selection)
        differences += [_attribute(name, old.view[name], new.view[name], effects, left, stripped)
                        for name in old.view if old.view[name] != new.view[name]]
    if any(d.rule is None for d in differences):
        verdict = UNEXPECTED
    else:
        verdict = INTENDED if differences else EQUIVALENT
    return verdict, differences, "", new.trainer


# The rule that moves a launch onto V1's entry, and with it onto V1's defaults.
_ENTRYPOINT_RULE = "entrypoint"
_MISSING_KEY = re.compile(r"missing mandatory value.*\(key ([\w.]+)\)")


def _changed_defaults() -> dict[str, str]:
    """Keys verl's V0 config gave a default that rlbridge's V1 schema does not (V0 fills them in)."""
    from legacy_v0.config import _VERL_DEFAULTS

    return _VERL_DEFAULTS


def _changed_default_reason(key: str) -> str:
    return (f"verl's V0 config defaults {key} to {_changed_defaults()[key]}, which the old launch relied on; "
            "rlbridge's V1 has no default for it: set it in the script")


def _relies_on_default(key: str, old_value: Any) -> bool:
    default = _changed_defaults().get(key)
    return default is not None and old_value in (default, [default])


def _read_migrated(argv: list[str], old_view: dict[str, Any]) -> tuple[Reading, list[str]]:
    """V1's reading of the migrated arguments. Where it refuses only because a key verl's V0
    defaulted is not set, and the old launch relied on that default, it is read again with the
    default given (so the rest still compares); those keys are returned."""
    defaulted: list[str] = []
    while True:
        new = read_as_v1(argv)
        missing = _MISSING_KEY.search(new.refused or "")
        key = missing.group(1) if missing else None
        if key is None or key in defaulted or not _relies_on_default(key, old_view.get(key)):
            return new, defaulted
        defaulted.append(key)
        argv = [*argv, f"{key}='{_changed_defaults()[key]}'"]  # quoted: Hydra reads a bare ~ otherwise


def _refusal(new: Reading, left: dict[str, Finding]) -> Difference:
    """V1 refusing what V0 runs: intended only when it refuses a key the codemod left marked."""
    named = [key for key in left if key in new.refused]
    if named:
        finding = left[named[0]]
        return Difference("V1 reading", "runs", f"refused: {new.refused}", finding.rule, finding.message)
    return Difference("V1 reading", "runs", f"refused: {new.refused}")


_MARKED_KEY = re.compile(r"[+~]*([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)")


def _left_for_a_person(findings: Iterable[Finding]) -> dict[str, Finding]:
    """Keys a manual finding (a `TODO(migrate:RULE)` marker) leaves for a person: each such
    message starts with the key it is about."""
    left = {}
    for finding in findings:
        match = _MARKED_KEY.match(finding.message) if finding.severity is Severity.MANUAL else None
        if match is not None:
            left.setdefault(match.group(1), finding)
    return left


def _without_keys(argv: Sequence[str], keys: dict[str, Finding]) -> tuple[list[str], list[str]]:
    """The arguments without the overrides of `keys` (a person decides those), and the keys dropped."""
    kept, dropped = [], []
    for token in argv:
        key = _override_key(token)
        if key in keys:
            dropped.append(key)
        else:
            kept.append(token)
    return kept, list(dict.fromkeys(dropped))


def _override_key(token: str) -> Optional[str]:
    from codemods.shell import _overrides_parser

    if token.startswith("-"):
        return None
    try:
        return _overrides_parser().parse_override(token).key_or_group
    except Exception:  # noqa: BLE001 - a token Hydra cannot read: the readings report it
        return None


def _value_of(key: str, argv: Sequence[str]) -> Any:
    """The value `key` is given in `argv` (the last one wins, as in Hydra), as text."""
    values = [token.split("=", 1)[1] for token in argv if "=" in token and _override_key(token) == key]
    return values[-1] if values else None


@dataclass(frozen=True)
class _Effect:
    """A setting a rule adds on purpose (the rename table's `also_set`)."""

    rule: str
    key: str
    value: str
    reason: str


def _declared_effects(old_argv: Sequence[str], selection: RuleSelection) -> list[_Effect]:
    from codemods.shell import _hydra_value
    from shims import rename_table

    effects = []
    for token in old_argv:
        key = _override_key(token)
        action = None if key is None else rename_table.resolve_config_key(key, _hydra_value(token))
        if action is not None and selection.enabled(action.rule):
            effects += [_Effect(action.rule, k, v, action.message) for k, v in action.also_set]
    return effects


def _attribute(name: str, old: Any, new: Any, effects: list[_Effect], left: dict[str, Finding],
               stripped: list[str]) -> Difference:
    """The difference on one setting, with the rule that makes it on purpose, if any does."""
    keys = setting(name).keys
    for effect in effects:
        if effect.key in keys and str(new).lower() == effect.value.lower():
            return Difference(name, old, new, effect.rule, effect.reason or f"sets {effect.key}={effect.value}")
    for key in stripped:
        if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys):
            return Difference(name, old, new, left[key].rule, f"follows from {key}, left for a person (above)")
    for key in keys:
        if _relies_on_default(key, old):
            return Difference(name, old, new, _ENTRYPOINT_RULE, _changed_default_reason(key))
    return Difference(name, old, new)


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
                why = "no such file or directory" if not candidate.path.exists() else "not a launch script or YAML config"
                verdicts.append(LaunchVerdict(candidate.path, 1, NOT_MIGRATED, detail=why))
        return verdicts

    # ----------------------------------------------------------------------- scripts
    def verify_script(self, path: Path) -> list[LaunchVerdict]:
        from codemods.migrate import migrate_text
        from shims.dry_run_report import read_launches

        try:
            text = read_text(path)
        except UnreadableFileError as error:
            return [LaunchVerdict(path, 1, NOT_MIGRATED, detail=str(error))]
        result = migrate_text(text, SHELL, self.options.selection)
        if result.failed:
            error = next(f for f in result.findings if f.severity is Severity.ERROR)
            return [LaunchVerdict(path, error.line, NOT_MIGRATED, detail=error.message)]
        copy = Path(self._tmp.name) / "scripts" / f"{len(self._config_dirs)}-{path.name}"
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(result.migrated, encoding="utf-8")
        reading = {"cwd": str(self.cwd), "unset_as_empty": self.options.unset_as_empty}
        old_launches, new_launches = read_launches(path, **reading), read_launches(copy, **reading)
        entries = _entries(text) or [""] * len(old_launches)
        verdicts = [self._verify_launch(path, old, new, result.findings, entry)
                    for old, new, entry in zip(old_launches, new_launches, entries)]
        for old in old_launches[len(new_launches):]:
            verdicts.append(LaunchVerdict(path, old.line, UNEXPECTED, [Difference("launch", "present", "lost")],
                                          detail="the migrated script lost this launch"))
        return verdicts

    def _verify_launch(self, path: Path, old, new, findings: tuple[Finding, ...], entry: str) -> LaunchVerdict:
        if old.not_expanded is not None:
            return LaunchVerdict(path, old.line, NOT_EXPANDED, detail=old.not_expanded)
        if new.not_expanded is not None:
            return LaunchVerdict(path, old.line, UNEXPECTED, [Difference("launch", "expanded", "not expanded")],
                                 detail=f"the migrated launch cannot be expanded: {new.not_expanded}")
        old_argv = self._absolute_config_path(old.argv)
        new_argv, yaml_findings = self._migrated_config_path(self._absolute_config_path(new.argv))
        migrated = Migrated(tuple(new_argv), (*findings, *yaml_findings), self.options.selection)
        verdict, differences, detail, trainer = judge(old_argv, migrated, entry)
        return LaunchVerdict(path, old.line, verdict, differences, detail, trainer)

    def _absolute_config_path(self, argv: Sequence[str]) -> list[str]:
        """A relative `--config-path` read from the folder the script runs from."""
        return _map_config_path(argv, lambda value: value if Path(value).expanduser().is_absolute()
                                else str(self.cwd / value))

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
        from codemods.migrate import migrate_text

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
        verdict, differences, detail, trainer = judge(argv, Migrated(tuple(new_argv), findings,
                                                                     self.options.selection))
        return [LaunchVerdict(path, 1, verdict, differences, detail, trainer)]


def _entries(text: str) -> list[str]:
    """The entry module of each launch `shims.dry_run_report.read_launches` finds, in its order."""
    from codemods.shell import find_launches, parse_bash

    source = text.encode("utf-8")
    tree = parse_bash(source)
    return [] if tree.root_node.has_error else [launch.module for launch in find_launches(tree, source)]


def _map_config_path(argv: Sequence[str], change) -> list[str]:
    out, index = list(argv), 0
    while index < len(out):
        token = out[index]
        flag = next((f for f in _CONFIG_PATH_FLAGS if token == f or token.startswith(f + "=")), None)
        if flag is not None and token == flag and index + 1 < len(out):
            out[index + 1] = change(out[index + 1])
            index += 1
        elif flag is not None and token != flag:
            out[index] = f"{flag}={change(token[len(flag) + 1:])}"
        index += 1
    return out


def _yaml_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file()
                  and not SKIPPED_DIRECTORIES & set(p.relative_to(directory).parts))


def _is_trainer_config(path: Path) -> bool:
    from ruamel.yaml import YAML as RoundTrip

    from codemods.yaml_config import looks_like_trainer_config

    try:
        data = RoundTrip(typ="safe", pure=True).load(read_text(path))
    except Exception:  # noqa: BLE001 - not YAML we can read: the migration reports it, not this
        return False
    return looks_like_trainer_config(data)


# --------------------------------------------------------------------------- report
def exit_code(verdicts: Sequence[LaunchVerdict]) -> int:
    """1 when any launch has unexpected differences, 2 when a file could not be migrated, else 0."""
    if any(v.verdict == UNEXPECTED for v in verdicts):
        return 1
    return 2 if any(v.verdict == NOT_MIGRATED for v in verdicts) else 0


def counts(verdicts: Sequence[LaunchVerdict]) -> dict[str, int]:
    found = Counter(v.verdict for v in verdicts)
    return {verdict: found.get(verdict, 0) for verdict in VERDICTS}


def report_json(verdicts: Sequence[LaunchVerdict]) -> dict:
    return {"launches": [v.to_json() for v in verdicts],
            "summary": {"launches": len(verdicts), **counts(verdicts), "exit_code": exit_code(verdicts)}}


def format_details(verdict: LaunchVerdict, root: Optional[Path] = None) -> list[str]:
    kept = f" (migrated launch runs on {verdict.trainer})" if verdict.trainer == "V0" else ""
    lines = [f"{_where(verdict, root)}: {verdict.verdict}{kept}"]
    if verdict.detail:
        lines.append(f"    {verdict.detail}")
    lines += [f"    {difference.describe()}" for difference in verdict.differences]
    return lines


def format_table(verdicts: Sequence[LaunchVerdict], root: Optional[Path] = None) -> list[str]:
    rows = [(str(_relative(v.file, root)), str(v.line), v.verdict, str(v.count)) for v in verdicts]
    header = ("file", "line", "verdict", "count")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
    lines = ["  ".join(cell.ljust(width) if i < 3 else cell.rjust(width)
                       for i, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in [header, *rows]]
    total = counts(verdicts)
    lines.append("")
    lines.append(f"{len(verdicts)} launch(es): " + ", ".join(f"{n} {name}" for name, n in total.items() if n or
                                                              name in (EQUIVALENT, INTENDED, UNEXPECTED)))
    return lines


def format_report(verdicts: Sequence[LaunchVerdict], paths: Sequence[Path]) -> str:
    """One file: every launch with its differences. A directory: the table, then the details of
    the launches that need a look (unexpected differences, and files not migrated)."""
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
    flagged = [v for v in verdicts if v.verdict in (UNEXPECTED, NOT_MIGRATED)]
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


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(plain(value), default=str)


def run_verify(paths: Sequence[Path], options: VerifyOptions, out, report: Optional[Path] = None) -> int:
    """The `--verify` command: print the verdicts, write `report` as JSON, return the exit code."""
    with Verifier(options) as verifier:
        verdicts = verifier.verify_paths(paths)
    out.write(format_report(verdicts, paths) + "\n")
    if report is not None:
        report.write_text(json.dumps(report_json(verdicts), indent=2, default=str) + "\n", encoding="utf-8")
    return exit_code(verdicts)
