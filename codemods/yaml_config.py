"""YAML engine: move and rename legacy keys in trainer config files with a ruamel.yaml round trip.

A YAML file is treated as a trainer config when its top level has verl's sections
(`actor_rollout_ref`, `algorithm`, `critic`, `reward_model`, `custom_reward_function`, or `data`
with `trainer`); anything else (CI files, agent-loop lists, tool configs) is left alone. Each leaf
key's dotted path (and scalar value) is looked up in `shims.rename_table`; a mechanical row moves
the leaf to its new path (creating the new sections where the old one stood), a delete row removes
it, a manual row leaves a `# TODO(migrate:RULE): ...` comment above the key. End-of-line comments
travel with a moved key; comment lines that followed it stay where they were.

ruamel.yaml re-prints the whole file, so a file it would not reproduce byte for byte is reported
and left untouched rather than reformatted: only our change may differ.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import CommentMark, YAMLError
from ruamel.yaml.tokens import CommentToken
from ruamel.yaml.util import load_yaml_guess_indent

from codemods.findings import Finding, MigrationResult, Severity, marker_text
from codemods.rules import ALL_RULES, RuleSelection
from shims import rename_table
from shims.rename_table import Action, KeyAction

_TRAINER_SECTIONS = frozenset({"actor_rollout_ref", "algorithm", "critic", "reward_model", "custom_reward_function"})
_EOL = 2  # index of the end-of-line comment token in ruamel's per-key comment list


@dataclass(frozen=True)
class _Leaf:
    path: tuple[str, ...]
    line: int
    value: object


def _make_yaml(text: str) -> YAML:
    _, mapping_indent, sequence_offset = load_yaml_guess_indent(text)
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap long lines
    yaml.indent(mapping=mapping_indent or 2, sequence=(mapping_indent or 2) + (sequence_offset or 0),
                offset=sequence_offset or 0)
    return yaml


def _dump(yaml: YAML, data) -> str:
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


def looks_like_trainer_config(data) -> bool:
    """True for a mapping with verl trainer-config sections at its top level."""
    if not isinstance(data, dict):
        return False
    keys = set(data)
    return bool(keys & _TRAINER_SECTIONS) or {"data", "trainer"} <= keys


def migrate_yaml(text: str, selection: RuleSelection = ALL_RULES) -> MigrationResult:
    """Migrate one YAML config; a file that cannot be loaded or round-tripped comes back unchanged."""
    try:
        yaml = _make_yaml(text)
        data = yaml.load(text)
    except YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        return _error(text, line, f"not valid YAML ({getattr(error, 'problem', None) or error}); left untouched")
    if not looks_like_trainer_config(data):
        return MigrationResult(text, text)
    planned = _plan(data, selection)
    if not planned:
        return MigrationResult(text, text)
    if _dump(yaml, data) != text:
        return _error(text, planned[0][0].line,
                      "ruamel.yaml would not reproduce this file byte for byte (unusual indentation or "
                      "flow style), so it is left untouched; migrate these keys by hand: "
                      + ", ".join(".".join(leaf.path) for leaf, _ in planned))
    editor = _Editor(data, text)
    for leaf, action in planned:
        editor.apply(leaf, action)
    editor.keep_on_v0(selection)
    migrated = _dump(yaml, data) if editor.changed else text
    try:
        YAML(typ="safe").load(migrated)
    except YAMLError:
        return _error(text, 1, "the rewritten YAML would not load; left untouched (a codemods bug: please report)")
    return MigrationResult(text, migrated, tuple(sorted(editor.findings, key=lambda f: f.line)))


def _error(text: str, line: int, message: str) -> MigrationResult:
    return MigrationResult(text, text, (Finding("parse", line, Severity.ERROR, message),))


def _leaves(mapping: CommentedMap, prefix: tuple[str, ...] = ()):
    """Every non-mapping value (and every empty mapping) with its dotted path, depth first."""
    for key, value in mapping.items():
        path = (*prefix, str(key))
        if isinstance(value, CommentedMap) and len(value):
            yield from _leaves(value, path)
        else:
            line = mapping.lc.key(key)[0] + 1 if hasattr(mapping, "lc") else 1
            yield _Leaf(path, line, value)


def _scalar_text(value) -> str | None:
    if isinstance(value, (dict, list)):
        return None
    return rename_table.normalize_value(value)


def _plan(data: CommentedMap, selection: RuleSelection) -> list[tuple[_Leaf, KeyAction | None]]:
    """(leaf, action) for each leaf a rule acts on; action None marks a V0-only feature leaf."""
    planned = []
    for leaf in _leaves(data):
        key, value = ".".join(leaf.path), _scalar_text(leaf.value)
        action = rename_table.resolve_config_key(key, value)
        if action is not None and selection.enabled(action.rule):
            planned.append((leaf, action))
        feature = rename_table.v0_only_feature(key)
        if feature is not None and selection.enabled(feature.rule) and feature.is_on(value) \
                and not _has_path(data, rename_table.KEEP_ON_V0_KEY.split(".")):
            planned.append((leaf, None))
    return planned


def _has_path(data: CommentedMap, path) -> bool:
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


class _Editor:
    """Applies planned actions to the loaded document and collects findings."""

    def __init__(self, data: CommentedMap, text: str):
        self.data = data
        self.text = text
        self.findings: list[Finding] = []
        self.changed = False
        self._v0_reasons: list[tuple[int, rename_table.V0OnlyFeature]] = []

    def apply(self, leaf: _Leaf, action: KeyAction | None) -> None:
        key = ".".join(leaf.path)
        if action is None:
            self._v0_reasons.append((leaf.line, rename_table.v0_only_feature(key)))
            return
        if action.action is Action.MANUAL:
            self.findings.append(Finding(action.rule, leaf.line, Severity.MANUAL, f"{key}: {action.message}"))
            self._marker(leaf.path, marker_text(action.rule, f"{key}: {action.message}"))
            return
        parent = self._parent(leaf.path)
        if action.action is Action.DELETE:
            _detach(parent, leaf.path[-1])
            self._prune(leaf.path[:-1])
            self.findings.append(Finding(action.rule, leaf.line, Severity.WARNING, f"deleted {key}: {action.message}"))
            self.changed = True
            return
        severity = Severity.WARNING if action.action is Action.CAVEAT else Severity.INFO
        if action.new_key != key:
            anchor = list(self.data).index(leaf.path[0])  # a new section takes the old one's place
            eol = _detach(parent, leaf.path[-1])
            self._prune(leaf.path[:-1])
            self._insert(tuple(action.new_key.split(".")), leaf.value, eol, anchor=anchor)
            why = f": {action.message}" if action.action is Action.CAVEAT else ""
            self.findings.append(Finding(action.rule, leaf.line, severity, f"{key} -> {action.new_key}{why}"))
            self.changed = True
        elif action.message:
            self.findings.append(Finding(action.rule, leaf.line, severity, f"{key}: {action.message}"))
        for extra_key, extra_value in action.also_set:
            path = tuple(extra_key.split("."))
            if not _has_path(self.data, path):
                self._insert(path, extra_value, None, anchor=None)
                self.findings.append(Finding(action.rule, leaf.line, Severity.INFO, f"added {extra_key}: {extra_value}"))
                self.changed = True

    def keep_on_v0(self, selection: RuleSelection) -> None:
        """Add trainer.use_v1: false (once) with a marker per V0-only feature found."""
        if not self._v0_reasons:
            return
        path = tuple(rename_table.KEEP_ON_V0_KEY.split("."))
        self._insert(path, False, None, anchor=None)
        for line, feature in self._v0_reasons:
            message = (f"kept on V0 with {rename_table.KEEP_ON_V0_KEY}=false: {feature.reason}; "
                       f"remove it once V1 supports {feature.name}")
            self.findings.append(Finding(feature.rule, line, Severity.WARNING, message))
            self._marker(path, marker_text(feature.rule, message))
        self.changed = True

    def _node(self, path: tuple[str, ...]):
        node = self.data
        for part in path:
            node = node[part]
        return node

    def _parent(self, path: tuple[str, ...]) -> CommentedMap:
        return self._node(path[:-1])

    def _prune(self, path: tuple[str, ...]) -> None:
        """Remove mappings left empty by a move, innermost first."""
        while path and len(self._node(path)) == 0:
            _detach(self._parent(path), path[-1])
            path = path[:-1]

    def _insert(self, path: tuple[str, ...], value, eol: CommentToken | None, anchor: int | None) -> None:
        """Set `path` to `value`, creating sections; a new top-level section goes at index `anchor`
        (the end when None)."""
        node = self.data
        for depth, part in enumerate(path[:-1]):
            if part not in node:
                section = CommentedMap()
                if depth == 0 and anchor is not None:
                    node.insert(min(anchor, len(node)), part, section)
                else:
                    node[part] = section
            node = node[part]
        node[path[-1]] = value
        if eol is not None:
            node.ca.items[path[-1]] = [None, None, eol, None]

    def _marker(self, path: tuple[str, ...], text: str) -> None:
        if f"# {text}" in self.text:
            return
        parent = self._parent(path)
        column = (len(path) - 1) * self._indent()
        parent.yaml_set_comment_before_after_key(path[-1], before=text, indent=column)
        self.changed = True

    def _indent(self) -> int:
        _, mapping_indent, _ = load_yaml_guess_indent(self.text)
        return mapping_indent or 2


def _detach(mapping: CommentedMap, key: str) -> CommentToken | None:
    """Remove `key`; return its end-of-line comment and leave the comment lines after it in place."""
    position = list(mapping).index(key)
    tokens = mapping.ca.items.pop(key, None)
    del mapping[key]
    token = tokens[_EOL] if tokens and len(tokens) > _EOL else None
    if token is None:
        return None
    eol_text, newline, rest = token.value.partition("\n")
    if rest and position == 0:
        return token  # no earlier sibling to hold the lines after it: they travel with the key
    if rest:
        previous = list(mapping)[position - 1]
        slot = mapping.ca.items.setdefault(previous, [None, None, None, None])
        if slot[_EOL] is None:
            slot[_EOL] = CommentToken("\n" + rest, CommentMark(0), None)
        else:
            slot[_EOL].value += rest
    return CommentToken(eol_text + newline, token.start_mark, None) if eol_text.strip() else None
