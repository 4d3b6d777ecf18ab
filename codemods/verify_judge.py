"""The verdict on one launch for `--verify`: the two readings compared, each difference traced.

`judge(old_argv, migrated)` reads the old arguments as V0 does and the migrated ones as V1 does
(`codemods.verify_read`), compares their views (`codemods.verify_view`) setting by setting, and
names for each difference the codemod rule that makes it on purpose:

- a setting the rename table adds with the old meaning (a row's `also_set`: the
  `multi-turn-agent-loop` rule sets the tool agent);
- a key the codemod left for a person (a manual finding, i.e. a `TODO(migrate:RULE)` marker): the
  migrated launch is read without it (V1 refuses it until a person decides) and what follows from
  it is traced to it too;
- a default verl's V0 config had and rlbridge's V1 lacks (`legacy_v0.config._VERL_DEFAULTS`: the
  data and model paths), which the old launch relied on: the `entrypoint` rule, which moves the
  launch onto V1, brings that change; V1 refuses until the script sets it, and the launch is read
  again with verl's value so that the rest still compares.

Any other difference, or V1 refusing what V0 runs, has no rule: it is unexpected (a bug).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from codemods.findings import Finding, Severity
from codemods.rules import RuleSelection
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


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(plain(value), default=str)


