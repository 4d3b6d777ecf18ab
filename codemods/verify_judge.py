"""The verdict on one launch for `--verify`: the two readings compared, each difference traced.

`judge(path, line, old_argv, migrated)` reads the old arguments as V0 does and the migrated ones
as V1 does (`codemods.verify_read`), compares their views (`codemods.verify_view`) setting by
setting whenever both can be read, and names for each difference the codemod rule that makes it
on purpose:

- a setting the rename table adds with the old meaning (a row's `also_set`: the
  `multi-turn-agent-loop` rule sets the tool agent), or the launch's entry row adds (the
  `entrypoint` rule runs verl's one-step-off trainer as `trainer.v1.trainer_mode=separate_async`);
- a key the codemod left for a person (a manual finding, i.e. a `TODO(migrate:RULE)` marker): the
  migrated launch is read without it (V1 refuses it until a person decides) and what follows from
  it is traced to it too;

Any other difference has no rule: it is unexpected (a bug). Whether each launch would *run* is
judged beside its meaning:

- keys the key table refuses (`not supported on rlbridge: KEY=...`) are left out on both sides and
  named on the verdict (`compared_without`, with the reason); the launch then does not run here;
- V1 refusing to run what V0 runs is an unexpected difference (unless it refuses a key left for a
  person); when V0 would not run the old launch either, it is not: the verdict says the launch
  does not run here, with both reasons (`wont_run`, `old_wont_run`);
- V0 refusing what V1 runs (a tool agent loop, say) is the migration working, and noted.

Launches whose old arguments cannot be read at all (a value Hydra cannot parse, an empty value
from an unset variable, a config that fails validation) are `unreadable` (`refused by V1` for a
launch that already ran rlbridge's V1 entry), with the error line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from codemods.findings import Finding, Severity
from codemods.rules import RuleSelection
from codemods.verify_read import Reading, override_key, read_as_v0, read_as_v1, v1_home
from codemods.verify_view import plain, setting
from shims.config import RefusedKey

EQUIVALENT = "equivalent"
INTENDED = "intended differences"
UNEXPECTED = "unexpected differences"
UNREADABLE = "unreadable"  # the old arguments cannot be read into a config (the error line is shown)
REFUSED_BY_V1 = "refused by V1"  # the same, for an old launch that already ran rlbridge's V1 entry
NOT_EXPANDED = "not expanded"
NOT_MIGRATED = "not migrated"  # the codemod could not migrate the file (its error is shown)
VERDICTS = (EQUIVALENT, INTENDED, UNEXPECTED, UNREADABLE, REFUSED_BY_V1, NOT_EXPANDED, NOT_MIGRATED)
COMPARED = (EQUIVALENT, INTENDED, UNEXPECTED)  # the verdicts on meaning: both sides were read
NO = "no"  # `LaunchVerdict.runs` of a migrated launch that does not run here


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
    detail: str = ""  # why the old arguments are unreadable, why a launch is not expanded, or the codemod's error
    trainer: str = ""  # the trainer the migrated arguments select (V1, or V0 when kept there)
    runs: str = ""  # where the migrated launch runs: its trainer, or NO ("" when not compared)
    wont_run: str = ""  # when it does not run here: the error line its run ends with
    old_wont_run: str = ""  # the error line the old launch's run ends with, when it would not run either
    compared_without: list[RefusedKey] = field(default_factory=list)  # refused keys both sides were read without

    @property
    def count(self) -> int:
        return len(self.differences)

    def to_json(self) -> dict:
        return {
            "file": str(self.file),
            "line": self.line,
            "verdict": self.verdict,
            "count": self.count,
            "trainer": self.trainer,
            "runs": self.runs,
            "detail": self.detail,
            "wont_run": self.wont_run,
            "old_wont_run": self.old_wont_run,
            "compared_without": [{"key": k.key, "reason": k.reason} for k in self.compared_without],
            "differences": [d.to_json() for d in self.differences],
        }


# --------------------------------------------------------------------------- one launch
@dataclass(frozen=True)
class Migrated:
    """The codemod's work on one launch: the migrated arguments and what its rules said."""

    argv: tuple[str, ...]
    findings: tuple[Finding, ...]
    selection: RuleSelection


def judge(path: Path, line: int, old_argv: Sequence[str], migrated: Migrated, old_entry: str = "") -> LaunchVerdict:
    """The verdict on one launch's old and migrated arguments. The old ones are read as V0 reads
    them, unless the launch already ran rlbridge's entry (`old_entry`): then as that entry does."""
    from shims.rename_table import V1_ENTRYPOINT

    read_old = read_as_v1 if old_entry == V1_ENTRYPOINT else read_as_v0
    old = read_old(old_argv)
    if old.view is None:
        return LaunchVerdict(
            path, line, REFUSED_BY_V1 if old_entry == V1_ENTRYPOINT else UNREADABLE, detail=old.refused
        )
    left = _left_for_a_person(migrated.findings)
    argv, stripped = _without_keys(migrated.argv, left)
    new = read_as_v1(argv)
    old_view, new_view = _comparable_views(
        old, new, lambda without: read_old(old_argv, without).view, lambda without: read_as_v1(argv, without).view
    )
    differences = [
        Difference(key, _value_of(key, old_argv), "left for a person (marker)", left[key].rule, left[key].message)
        for key in stripped
    ]
    if new_view is None:
        differences.append(_refusal(new, left))
    else:
        effects = _declared_effects(old_argv, migrated.selection, old_entry)
        differences += [
            _attribute(name, old_view[name], new_view[name], effects, left, stripped)
            for name in old_view
            if old_view[name] != new_view[name]
        ]
        if new.wont_run is not None and old.runs:
            differences.append(_refusal(new, left))
    if any(d.rule is None for d in differences):
        verdict = UNEXPECTED
    else:
        verdict = INTENDED if differences else EQUIVALENT
    wont_run = new.refused or new.wont_run
    if wont_run is None and stripped:  # it was read changed: does it run as written?
        wont_run = _wont_run_as_written(migrated.argv)
    return LaunchVerdict(
        path,
        line,
        verdict,
        differences,
        trainer=new.trainer,
        runs=NO if wont_run else new.trainer,
        wont_run=wont_run or "",
        old_wont_run=old.wont_run or "",
        compared_without=_compared_without(old, new, stripped),
    )


def _comparable_views(old: Reading, new: Reading, old_view_without: Callable, new_view_without: Callable):
    """The two views to compare: each side read again without the refused keys only the other
    side left out (so that one key refused on one side only does not show as a difference); a
    re-reading that fails keeps the first view."""
    old_view, new_view = old.view, new.view
    if new_view is None:
        return old_view, new_view
    if _homes(new.without) - _homes(old.without):
        old_view = old_view_without(new.without) or old_view
    if _homes(old.without) - _homes(new.without):
        new_view = new_view_without(old.without) or new_view
    return old_view, new_view


def _homes(keys: Iterable[RefusedKey]) -> set[str]:
    return {v1_home(key.key) for key in keys}


def _compared_without(old: Reading, new: Reading, marked: list[str]) -> list[RefusedKey]:
    """The refused keys the readings left out, named as the old launch wrote them where it did;
    a key left for a person is a difference of its own (above), not repeated here."""
    seen = {v1_home(key) for key in marked}
    found = []
    for key in [*old.without, *new.without]:
        if v1_home(key.key) not in seen:
            seen.add(v1_home(key.key))
            found.append(key)
    return found


def _wont_run_as_written(argv: Sequence[str]) -> Optional[str]:
    """Why the migrated launch as written (with its marked keys, without verl's defaults) does not
    run; None when it runs."""
    as_written = read_as_v1(argv)
    return None if as_written.runs else as_written.refused or as_written.wont_run


def _refusal(new: Reading, left: dict[str, Finding]) -> Difference:
    """V1 not reading what V0 reads, or refusing to run what V0 runs: intended only when it
    refuses a key the codemod left marked."""
    old, line = ("reads", f"unreadable: {new.refused}") if new.view is None else ("runs", f"refused: {new.wont_run}")
    named = [key for key in left if key in line]
    if named:
        finding = left[named[0]]
        return Difference("V1 reading", old, line, finding.rule, finding.message)
    return Difference("V1 reading", old, line)


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
        key = override_key(token)
        if key in keys:
            dropped.append(key)
        else:
            kept.append(token)
    return kept, list(dict.fromkeys(dropped))


def _value_of(key: str, argv: Sequence[str]) -> Any:
    """The value `key` is given in `argv` (the last one wins, as in Hydra), as text."""
    values = [token.split("=", 1)[1] for token in argv if "=" in token and override_key(token) == key]
    return values[-1] if values else None


@dataclass(frozen=True)
class _Effect:
    """A setting a rule adds on purpose (the rename table's `also_set`)."""

    rule: str
    key: str
    value: str
    reason: str


def _declared_effects(old_argv: Sequence[str], selection: RuleSelection, entry: str = "") -> list[_Effect]:
    """What the rules set on purpose: the rename table rows of the old keys, and the entry's row
    (verl's one-step-off trainer becomes `trainer.v1.trainer_mode=separate_async`)."""
    from codemods.shell import _hydra_value
    from shims import rename_table

    row = rename_table.resolve_entrypoint(entry) if entry else None
    effects = (
        [_Effect(row.rule, k, v, row.message or f"{entry} -> {row.new}") for k, v in row.also_set]
        if row is not None and row.new is not None and selection.enabled(row.rule)
        else []
    )
    for token in old_argv:
        key = override_key(token)
        action = None if key is None else rename_table.resolve_config_key(key, _hydra_value(token))
        if action is not None and selection.enabled(action.rule):
            effects += [_Effect(action.rule, k, v, action.message) for k, v in action.also_set]
    return effects


def _attribute(
    name: str, old: Any, new: Any, effects: list[_Effect], left: dict[str, Finding], stripped: list[str]
) -> Difference:
    """The difference on one setting, with the rule that makes it on purpose, if any does."""
    keys = setting(name).keys
    for effect in effects:
        if effect.key in keys and str(new).lower() == effect.value.lower():
            return Difference(name, old, new, effect.rule, effect.reason or f"sets {effect.key}={effect.value}")
    for key in stripped:
        if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in keys):
            return Difference(name, old, new, left[key].rule, f"follows from {key}, left for a person (above)")
    return Difference(name, old, new)


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(plain(value), default=str)
