"""YAML engine: move, rename and delete legacy keys in trainer config files by editing their lines.

A YAML file is treated as a trainer config when its top level has verl's sections
(`actor_rollout_ref`, `algorithm`, `critic`, `reward_model`, `custom_reward_function`, or `data`
with `trainer`). Each leaf key's dotted path (and scalar value) is looked up in `shims.rename_table`.
verl's tool and interaction configs (a top-level `tools:` or `interaction:` list) get their
`class_name: verl.*` values rewritten by the table's Python rows, as imports are (`class-name`);
anything else (CI files, agent-loop lists) is left alone.

ruamel.yaml reads the file (for every key's line and column); the file is then edited as lines, so
everything an edit does not touch keeps its bytes: each file's own indentation (per sequence, too),
`True`/`False`, `null` or `~`, quoting, blank lines and comments. What an edit does:

- a moved leaf (`reward_model.enable` -> `reward.reward_model.enable`) leaves its place with the
  comment lines directly above it and any lines of its value, and is written, re-keyed and
  re-indented, at the end of its new section; missing sections are created (a new top-level
  section where the old one stood); a section left empty by the moves goes with them;
- a deleted leaf goes with the comment lines directly above it;
- a manual leaf gets `# TODO(migrate:RULE): ...` on the line above it;
- a feature V1 lacks adds `trainer.use_v1: false` with a marker.

A leaf inside a flow mapping (`{a: 1, b: 2}`) is not edited in place: it gets a marker. The result
is loaded again and every move and deletion checked against it; a mismatch leaves the file
untouched with an error (a codemods bug), never a silently wrong config.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from codemods.findings import Finding, MigrationResult, Severity, marker_text
from codemods.rules import ALL_RULES, RuleSelection
from shims import rename_table
from shims.rename_table import Action, KeyAction

_TRAINER_SECTIONS = frozenset({"actor_rollout_ref", "algorithm", "critic", "reward_model", "custom_reward_function"})
_MISSING = object()


@dataclass(frozen=True)
class _Leaf:
    path: tuple[str, ...]
    line: int  # 0-based line of the key
    column: int
    value: object
    in_flow: bool  # the key sits in a flow mapping: not editable by lines


def looks_like_trainer_config(data) -> bool:
    """True for a mapping with verl trainer-config sections at its top level."""
    if not isinstance(data, dict):
        return False
    keys = set(data)
    return bool(keys & _TRAINER_SECTIONS) or {"data", "trainer"} <= keys


def migrate_yaml(text: str, selection: RuleSelection = ALL_RULES) -> MigrationResult:
    """Migrate one YAML config; a file that cannot be loaded comes back unchanged with an error."""
    try:
        data = YAML().load(text)
    except YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        return _error(text, line, f"not valid YAML ({getattr(error, 'problem', None) or error}); left untouched")
    if not looks_like_trainer_config(data):
        return _migrate_class_names(text, data, selection)
    editor = _Editor(text, data, selection)
    editor.plan()
    if not editor.has_edits():
        return MigrationResult(text, text, tuple(editor.sorted_findings()))
    migrated = editor.render()
    problem = _check(migrated, editor)
    if problem:
        return _error(text, 1, f"{problem}; left untouched (a codemods bug: please report)")
    return MigrationResult(text, migrated, tuple(editor.sorted_findings()))


CLASS_LISTS = ("tools", "interaction")  # verl's tool and interaction YAMLs: lists of {class_name: ...}


def _migrate_class_names(text: str, data, selection: RuleSelection) -> MigrationResult:
    """`class_name: verl.X` in a tool / interaction list -> the rlbridge path the rename table names,
    edited in its line (quotes kept); a class rlbridge lacks keeps its line under a marker."""
    if not isinstance(data, dict) or not selection.enabled("class-name"):
        return MigrationResult(text, text)
    lines = text.splitlines(keepends=True)
    findings, markers = [], {}
    for line, class_name in _verl_class_names(data):
        action = rename_table.resolve_python_name(class_name)
        if action is not None and action.new_name is not None:
            lines[line] = lines[line].replace(class_name, action.new_name, 1)
            findings.append(Finding("class-name", line + 1, Severity.INFO, f"{class_name} -> {action.new_name}"))
        else:
            message = f"{class_name}: {action.row.message if action is not None else _NOT_SHIPPED}"
            findings.append(Finding("class-name", line + 1, Severity.MANUAL, message))
            markers[line] = " " * _indentation(lines[line]) + f"# {marker_text('class-name', message)}\n"
    if not findings:
        return MigrationResult(text, text)
    for line in sorted(markers, reverse=True):
        if not line or lines[line - 1].strip() != markers[line].strip():  # idempotent: the marker is there
            lines.insert(line, markers[line])
    return MigrationResult(text, "".join(lines), tuple(findings))


_NOT_SHIPPED = "rlbridge does not ship verl's modules and has no equivalent of this class"


def _verl_class_names(data) -> list[tuple[int, str]]:
    """(0-based line, value) of every `class_name: verl...` entry in the file's class lists."""
    found = []
    for top in CLASS_LISTS:
        entries = data.get(top)
        if not isinstance(entries, CommentedSeq):
            continue
        for entry in entries:
            value = entry.get("class_name") if isinstance(entry, CommentedMap) else None
            if isinstance(value, str) and value.split(".")[0] == "verl":
                found.append((entry.lc.value("class_name")[0], value))
    return found


def _error(text: str, line: int, message: str) -> MigrationResult:
    return MigrationResult(text, text, (Finding("parse", line, Severity.ERROR, message),))


def _leaves(mapping: CommentedMap, prefix: tuple[str, ...] = (), in_flow: bool = False):
    """Every non-mapping value (and every empty mapping) with its dotted path, depth first."""
    flow = in_flow or mapping.fa.flow_style()
    for key, value in mapping.items():
        path = (*prefix, str(key))
        if isinstance(value, CommentedMap) and len(value):
            yield from _leaves(value, path, flow)
        else:
            line, column = mapping.lc.key(key)
            yield _Leaf(path, line, column, value, flow)


def _scalar_text(value) -> str | None:
    if isinstance(value, (dict, list)):
        return None
    return rename_table.normalize_value(value)


def _get(data, path: tuple[str, ...]):
    node = data
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return _MISSING
        node = node[part]
    return node


@dataclass
class _NewSection:
    """Lines to insert for one missing section (or the leaves added to an existing one)."""

    children: dict[str, "_NewSection"] = field(default_factory=dict)
    blocks: list[list[str]] = field(default_factory=list)  # leaf blocks, relative indentation 0


class _Editor:
    """Plans line edits for one file, then renders them."""

    def __init__(self, text: str, data: CommentedMap, selection: RuleSelection):
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.data = data
        self.selection = selection
        self.findings: list[Finding] = []
        self.deleted: set[int] = set()
        self.inserted: dict[int, list[str]] = {}  # before line i (len(lines) = at the end)
        self.markers: dict[int, list[str]] = {}  # marker lines above line i
        # existing section path -> (line to insert before, indentation, what to write there)
        self.additions: dict[tuple[str, ...], tuple[int, int, _NewSection]] = {}
        self.targets: set[tuple[str, ...]] = set()  # full paths being added
        self.expected: list[tuple[tuple[str, ...], object]] = []  # (path, value or _MISSING) after the edits
        self.removed_paths: set[tuple[str, ...]] = set()
        self.unit = _indent_unit(self.lines)
        self.rewrites_interpolations = False
        self.revalued = False  # a line's value was rewritten in place

    # ------------------------------------------------------------------ planning

    def plan(self) -> None:
        v0_features = []
        for leaf in list(_leaves(self.data)):
            key, value = ".".join(leaf.path), _scalar_text(leaf.value)
            action = rename_table.resolve_config_key(key, value)
            if action is not None and self.selection.enabled(action.rule):
                self._apply(leaf, action)
            feature = rename_table.v0_only_feature(key)
            if (
                feature is not None
                and self.selection.enabled(feature.rule)
                and feature.is_on(value)
                and _get(self.data, tuple(rename_table.KEEP_ON_V0_KEY.split("."))) is _MISSING
            ):
                v0_features.append((leaf, feature))
        self._prune_emptied_sections()
        self._plan_interpolations()
        if v0_features:
            self._keep_on_v0(v0_features)

    def _apply(self, leaf: _Leaf, action: KeyAction) -> None:
        key = ".".join(leaf.path)
        if action.action is Action.MANUAL:
            self._manual(leaf, action.rule, f"{key}: {action.message}")
            return
        if leaf.in_flow and (action.action is Action.DELETE or action.new_key != key or action.new_value is not None):
            self._manual(
                leaf,
                action.rule,
                f"{key}: {action.message or 'renamed to ' + str(action.new_key)} "
                "(inside a flow mapping: edit it by hand)",
            )
            return
        if action.action is Action.DELETE:
            self._remove(leaf.path, leaf.line, leaf.column)
            self.expected.append((leaf.path, _MISSING))
            self._find(action.rule, leaf, Severity.WARNING, f"deleted {key}: {action.message}")
            return
        severity = Severity.WARNING if action.action is Action.CAVEAT else Severity.INFO
        if action.new_value is not None and _revalue(self.lines[leaf.line], action.new_value) is None:
            self._manual(leaf, action.rule, f"{key}: {action.message} (a value over several lines: edit it by hand)")
            return
        if action.new_key != key:
            new_path = tuple(action.new_key.split("."))
            if self._taken(new_path):
                self._manual(
                    leaf,
                    action.rule,
                    f"{key} moves to {action.new_key}, which this file sets too "
                    "(or another key here moves to): keep one of them",
                )
                return
            block = self._take(leaf.path, leaf.line, leaf.column)
            first = _first_code(block)
            block[first] = _rekey(block[first], leaf.path[-1], new_path[-1])
            if action.new_value is not None:
                block[first] = _revalue(block[first], action.new_value)
            self._add(new_path, block, anchor=leaf.path[0])
            value = leaf.value if action.new_value is None else action.new_value
            self.expected += [(leaf.path, _MISSING), (new_path, value)]
            why = f": {action.message}" if action.action is Action.CAVEAT or action.new_value is not None else ""
            shown = "" if action.new_value is None else f"={action.new_value}"
            self._find(action.rule, leaf, severity, f"{key} -> {action.new_key}{shown}{why}")
        elif action.new_value is not None:
            self.lines[leaf.line] = _revalue(self.lines[leaf.line], action.new_value)
            self.revalued = True
            self.expected.append((leaf.path, action.new_value))
            self._find(
                action.rule,
                leaf,
                severity,
                f"{key}={_scalar_text(leaf.value)} -> {key}={action.new_value}: {action.message}",
            )
        elif action.message:
            self._find(action.rule, leaf, severity, f"{key}: {action.message}")
        for extra_key, extra_value in action.also_set:
            path = tuple(extra_key.split("."))
            if _get(self.data, path) is _MISSING and not self._adding(path):
                self._add(path, [f"{path[-1]}: {extra_value}\n"], anchor=None)
                self._find(action.rule, leaf, Severity.INFO, f"added {extra_key}: {extra_value}")

    def _keep_on_v0(self, features) -> None:
        path = tuple(rename_table.KEEP_ON_V0_KEY.split("."))
        block = []
        for leaf, feature in features:
            message = (
                f"kept on V0 with {rename_table.KEEP_ON_V0_KEY}=false: {feature.reason}; "
                f"remove it once V1 supports {feature.name}"
            )
            self._find(feature.rule, leaf, Severity.WARNING, message)
            block.append(f"# {marker_text(feature.rule, message)}\n")
        self._add(path, [*dict.fromkeys(block), f"{path[-1]}: false\n"], anchor=None)
        self.expected.append((path, False))

    def _find(self, rule: str, leaf: _Leaf, severity: Severity, message: str) -> None:
        self.findings.append(Finding(rule, leaf.line + 1, severity, message))

    def _manual(self, leaf: _Leaf, rule: str, message: str) -> None:
        self._marker_above(leaf.line if not leaf.in_flow else self._block_line(leaf.path), rule, message)

    def _block_line(self, path: tuple[str, ...]) -> int:
        """The line of the outermost flow mapping holding `path` (its key is in block style)."""
        node, line = self.data, 0
        for part in path:
            if node.fa.flow_style():
                return line
            line = node.lc.key(part)[0]
            node = node[part]
        return line

    # ------------------------------------------------------------------ line ranges

    def _block_end(self, line: int, column: int) -> int:
        """The line after the last line of the value whose key is at (line, column)."""
        end, index = line + 1, line + 1
        while index < len(self.lines):
            text = self.lines[index]
            stripped = text.strip()
            if stripped:
                indent = _indentation(text)
                if indent < column or (indent == column and not stripped.startswith("- ") and stripped != "-"):
                    break
                if indent == column and not self._value_is_indentless_list(line):
                    break
                end = index + 1
            index += 1
        return end

    def _value_is_indentless_list(self, line: int) -> bool:
        return self.lines[line].rstrip().endswith(":") or self.lines[line].split("#")[0].rstrip().endswith(":")

    def _comments_start(self, line: int) -> int:
        """The first of the comment lines directly above `line` at its indentation (they describe
        it, and travel or go with it). Not for a top-level key: those may be the file's header."""
        column, start = _indentation(self.lines[line]), line
        if column == 0:
            return line
        while start > 0:
            above = self.lines[start - 1]
            if not above.strip().startswith("#") or _indentation(above) != column:
                break
            start -= 1
        return start

    def _take(self, path: tuple[str, ...], line: int, column: int) -> list[str]:
        """Remove a leaf's lines (with its comments above) and return them dedented to column 0."""
        start, end = self._comments_start(line), self._block_end(line, column)
        block = [_dedent(text if text.endswith("\n") else text + "\n", column) for text in self.lines[start:end]]
        self._remove(path, line, column)
        return block

    def _remove(self, path: tuple[str, ...], line: int, column: int) -> None:
        self.deleted.update(range(self._comments_start(line), self._block_end(line, column)))
        self.removed_paths.add(path)

    def _prune_emptied_sections(self) -> None:
        """A section whose every leaf moved or was deleted goes too (its key and comments)."""
        changed = True
        while changed:
            changed = False
            for path, mapping in _mappings(self.data):
                if not path or path in self.removed_paths or not len(mapping) or self._receives(path):
                    continue
                if all((*path, str(key)) in self.removed_paths for key in mapping):
                    parent = _get(self.data, path[:-1])
                    line, column = parent.lc.key(path[-1])
                    self._remove(path, line, column)
                    changed = True

    # ------------------------------------------------------------------ additions

    def _taken(self, path: tuple[str, ...]) -> bool:
        """True when the file already sets `path` (or a value above or below it), or another key
        here moves there: moving one more key there would clash."""
        if _get(self.data, path) is not _MISSING:
            return True
        if any(not isinstance(_get(self.data, path[:n]), (CommentedMap, type(_MISSING))) for n in range(1, len(path))):
            return True
        return any(target[: len(path)] == path or path[: len(target)] == target for target in self.targets)

    def _receives(self, path: tuple[str, ...]) -> bool:
        """True when a queued addition goes inside the section at `path`."""
        return any(target[: len(path)] == path for target in self.targets)

    def _adding(self, path: tuple[str, ...]) -> bool:
        return any(
            _tree_has(tree, path[len(existing) :])
            for existing, (_, _, tree) in self.additions.items()
            if path[: len(existing)] == existing
        )

    def _add(self, path: tuple[str, ...], block: list[str], anchor: str | None) -> None:
        """Queue `block` (a leaf's lines at column 0) to be written at `path`."""
        existing = ()
        while (
            len(existing) < len(path) - 1
            and isinstance(_get(self.data, path[: len(existing) + 1]), CommentedMap)
            and path[: len(existing) + 1] not in self.removed_paths
        ):
            existing = path[: len(existing) + 1]
        if existing not in self.additions:
            self.additions[existing] = (*self._insertion_point(existing, anchor), _NewSection())
        tree = self.additions[existing][2]
        self.targets.add(path)
        for part in path[len(existing) : -1]:
            tree = tree.children.setdefault(part, _NewSection())
        tree.blocks.append(block)

    def _insertion_point(self, existing: tuple[str, ...], anchor: str | None) -> tuple[int, int]:
        """(line to insert before, indentation) for new children of the mapping at `existing`."""
        if not existing:
            if anchor is not None and anchor in self.data:
                return self._comments_start(self.data.lc.key(anchor)[0]), 0
            return len(self.lines), 0
        mapping = _get(self.data, existing)
        first_key = next(iter(mapping))
        indent = mapping.lc.key(first_key)[1]
        parent = _get(self.data, existing[:-1])
        line, column = parent.lc.key(existing[-1])
        return self._block_end(line, column), indent

    # ------------------------------------------------------------------ rendering

    def has_edits(self) -> bool:
        return bool(self.deleted or self.markers or self.additions or self.rewrites_interpolations or self.revalued)

    def sorted_findings(self) -> list[Finding]:
        return sorted(self.findings, key=lambda f: f.line)

    def render(self) -> str:
        # Where a section ends its parent may end too: the deeper section's lines go first.
        for at, indent, tree in sorted(self.additions.values(), key=lambda item: (item[0], -item[1])):
            self.inserted.setdefault(at, []).extend(_render_section(tree, indent, self.unit))
        out = []
        lines = list(self.lines)
        if lines and not lines[-1].endswith("\n") and any(at >= len(lines) for at in self.inserted):
            lines[-1] += "\n"
        for index, text in enumerate(lines):
            out.extend(self.inserted.get(index, []))
            if index in self.deleted:
                continue
            out.extend(self.markers.get(index, []))
            out.append(text)
        out.extend(self.inserted.get(len(lines), []))
        if not self.rewrites_interpolations:
            return "".join(out)
        return "".join(self._moved_interpolations(line) for line in out)

    def _moved_interpolations(self, line: str) -> str:
        """`${old.key}` -> `${new.key}` for a key the table moves (the value it names moved too)."""
        if "${" not in line:
            return line
        return _INTERPOLATION.sub(lambda m: "${" + _moved_key(m.group(1)) + "}", line)

    def _plan_interpolations(self) -> None:
        if not self.selection.enabled("interpolation"):
            return
        for index, line in enumerate(self.lines):
            if line.lstrip().startswith("#"):
                continue  # a comment (a marker among them) names keys; it does not use them
            for match in _INTERPOLATION.finditer(line):
                key, new = match.group(1), _moved_key(match.group(1))
                if new != key:
                    self.findings.append(
                        Finding("interpolation", index + 1, Severity.INFO, f"${{{key}}} -> ${{{new}}}")
                    )
                    self.rewrites_interpolations = True
                elif (action := rename_table.resolve_config_key(key, None)) is not None and action.new_key is None:
                    self._marker_above(
                        index,
                        "interpolation",
                        f"${{{key}}} names a key that has no V1 home ({action.message}); point it at its replacement",
                    )

    def _marker_above(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(rule, line + 1, Severity.MANUAL, message))
        comment = f"# {marker_text(rule, message)}"
        above = [text.strip() for text in self.lines[self._comments_start(line) : line]]
        if comment in above or comment in [m.strip() for m in self.markers.get(line, [])]:
            return
        self.markers.setdefault(line, []).append(" " * _indentation(self.lines[line]) + comment + "\n")


_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)\}")


def _moved_key(key: str) -> str:
    action = rename_table.resolve_config_key(key, None)
    if action is None or action.action not in (Action.MECHANICAL, Action.CAVEAT) or not action.new_key:
        return key
    return action.new_key


def _render_section(tree: _NewSection, indent: int, unit: int) -> list[str]:
    out = []
    for block in tree.blocks:
        out.extend(_indent(text, indent) for text in block)
    for name, child in tree.children.items():
        out.append(" " * indent + f"{name}:\n")
        out.extend(_render_section(child, indent + unit, unit))
    return out


def _tree_has(tree: _NewSection, rest: tuple[str, ...]) -> bool:
    if len(rest) == 1:
        return any(block and block[_first_code(block)].split(":")[0].strip() == rest[0] for block in tree.blocks)
    return rest[0] in tree.children and _tree_has(tree.children[rest[0]], rest[1:])


def _mappings(data, path: tuple[str, ...] = ()):
    if isinstance(data, CommentedMap) and not data.fa.flow_style():
        yield path, data
        for key, value in data.items():
            yield from _mappings(value, (*path, str(key)))


def _indentation(text: str) -> int:
    return len(text) - len(text.lstrip(" "))


def _indent_unit(lines: list[str]) -> int:
    """The file's mapping indentation: the smallest step between a `key:` line and the next key."""
    steps = []
    for index, text in enumerate(lines[:-1]):
        stripped = text.split("#")[0].rstrip()
        if stripped.endswith(":") and not stripped.lstrip().startswith("-"):
            following = next((t for t in lines[index + 1 :] if t.strip() and not t.strip().startswith("#")), None)
            if following is not None and not following.strip().startswith("-"):
                step = _indentation(following) - _indentation(text)
                if step > 0:
                    steps.append(step)
    return min(steps) if steps else 2


def _dedent(text: str, column: int) -> str:
    return text[min(column, _indentation(text)) :] if text.strip() else text


def _indent(text: str, column: int) -> str:
    return " " * column + text if text.strip() else text


def _first_code(block: list[str]) -> int:
    return next(i for i, text in enumerate(block) if text.strip() and not text.strip().startswith("#"))


_ONE_LINE_VALUE = re.compile(
    r"""^(\s*(?:"[^"]*"|'[^']*'|[^:#\s][^:#]*):[ \t]+)("[^"]*"|'[^']*'|[^\s#'"|>][^#\n]*?)([ \t]+#.*)?(\n?)$"""
)


def _revalue(text: str, new_value: str) -> str | None:
    """`key: old  # note` -> `key: new  # note`; None unless the value is a one-line scalar."""
    match = _ONE_LINE_VALUE.match(text)
    if match is None:
        return None
    return f"{match.group(1)}{new_value}{match.group(3) or ''}{match.group(4)}"


def _rekey(text: str, old: str, new: str) -> str:
    """`old: value` -> `new: value` (the key may be quoted)."""
    for written in (old, f'"{old}"', f"'{old}'"):
        if text.startswith(written + ":"):
            return new + text[len(written) :]
    raise ValueError(f"key {old!r} not found at the start of {text!r}")


def _check(migrated: str, editor: _Editor) -> str | None:
    """Why the migrated text is wrong, or None: it loads and every move and deletion happened."""
    try:
        data = YAML(typ="safe").load(migrated)
    except YAMLError as error:
        return f"the rewritten YAML would not load ({error})"
    for path, value in editor.expected:
        found = _get(data, path)
        if isinstance(value, str) and editor.rewrites_interpolations:
            value = _INTERPOLATION.sub(lambda m: "${" + _moved_key(m.group(1)) + "}", value)
        if value is _MISSING and found is not _MISSING:
            return f"{'.'.join(path)} is still set after the rewrite"
        if value is not _MISSING and (found is _MISSING or found != value):
            return f"{'.'.join(path)} does not hold its value after the rewrite"
    return None
