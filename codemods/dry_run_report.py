"""Dry-run every trainer launch of old launch scripts, on V0 and on V1, and count the outcomes.

    python -m codemods.dry_run_report SCRIPT_OR_DIR... [--model DIR] [--train-files P] [--val-files P]

Each script is parsed with the migration tool's shell engine (`codemods.shell`, tree-sitter-bash
plus Hydra's override parser); every `python -m <trainer>` launch in it gives its override
tokens, including those expanded from bash arrays. Shell words are expanded without running
anything: literal text, quotes and escapes, `$VAR` / `${VAR}` / `${VAR:-default}` from the
script's own assignments (in order, a `for` variable takes its first value, an assignment in an
`if` branch whose test is known to be false is skipped: `codemods.shell_branches`) or the
environment, and integer `$((...))`. A token that needs more (a command substitution, a function argument)
makes that launch "not expanded", naming the variable, unless its key is one replaced below.

`--model`, `--train-files` and `--val-files` replace the model and data paths (e.g. with a tiny
local model and parquet) so that the plan's "cannot run here" lines are about the config. Each
launch then runs `python -m core_v1.main_ppo ... trainer.dry_run=true` in-process, once with
`trainer.use_v1=false` and once as written (V1 by default): it passes, fails with a one-line
reason, or (a bug of ours) ends in a traceback. The table ends with a count of each outcome;
the exit code is 1 when any traceback occurred.

It sits with the migration tool, above every other layer: it parses scripts with the tool's shell
engine (imported on first use: tree-sitter loads only when a script is read) and runs the entrypoint.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import io
import os
import re
import subprocess
import sys
import traceback
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

# Commands whose output `$(...)` may take without running the script (they only print).
_HARMLESS_COMMANDS = frozenset({"pwd", "date", "basename", "dirname", "echo", "hostname", "whoami"})
MODEL_KEYS = frozenset(
    {
        "actor_rollout_ref.model.path",
        "critic.model.path",
        "reward_model.model.path",
        "reward.reward_model.model_path",
        "actor_rollout_ref.model.tokenizer_path",
        "data.tokenizer",
    }
)
TRAIN_KEYS = frozenset({"data.train_files"})
VAL_KEYS = frozenset({"data.val_files"})
_CONFIG_FLAGS = ("--config-path", "-cp", "--config-name", "-cn")


class NotExpanded(Exception):
    """A shell word whose value only running the script would tell (the message names why)."""


# --------------------------------------------------------------------------- reading scripts


@dataclass(frozen=True)
class ScriptLaunch:
    """One trainer launch of a script: its argv for `core_v1.main_ppo`, or why it has none."""

    script: Path
    line: int
    argv: tuple[str, ...] = ()
    not_expanded: Optional[str] = None  # the reason, when the argv could not be built
    unsupported: Optional[str] = None  # a trainer entry rlbridge lacks (the migration marks it): why


@functools.lru_cache(maxsize=256)
def _printed_by(name: str, args: tuple[str, ...], cwd: Optional[str]) -> str:
    """What a harmless command prints, run once per process: an old script and its migrated copy
    read a second apart must see the same `$(date +%s)`, or --verify reports a difference no rule
    made."""
    result = subprocess.run([name, *args], capture_output=True, text=True, timeout=10, cwd=cwd)
    return result.stdout.rstrip("\n")


class ShellWords:
    """Expands tree-sitter-bash words to text using known variables, never running anything.

    `cwd`: the folder the script is run from, for `$(pwd)` (verl's scripts run from verl's root).
    `unset_as_empty`: a variable neither the script nor the environment sets expands to "", as
    bash does it (by default it is reported, so that a user can set it).
    `stand_in`: such a variable, or one assigned from a command only the shell can run, expands to
    `stand_in(name)` instead: the value a user running the script would have set.
    """

    def __init__(
        self,
        source: bytes,
        variables: dict[str, Optional[str]],
        cwd: Optional[str] = None,
        unset_as_empty: bool = False,
        stand_in: Optional[Callable[[str], str]] = None,
    ):
        self.source = source
        self.variables = variables  # None: assigned, but to something we cannot expand
        self.cwd = cwd
        self.unset_as_empty = unset_as_empty
        self.stand_in = stand_in

    def text(self, node) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "replace")

    def expand(self, node) -> str:
        kind = node.type
        if kind in ("word", "number"):
            return _unescape(self.text(node))
        if kind == "raw_string":
            return self.text(node)[1:-1]
        if kind == "string_content":
            return _unescape(self.text(node), only='$`"\\\n')
        if kind in ("string", "concatenation"):
            return "".join(self.expand(child) for child in node.named_children)
        if kind == "simple_expansion":  # tree-sitter may start the node at the blank before `$` ("$A $B")
            lead, _, name = self.text(node).partition("$")
            return lead + self.variable(name)
        if kind == "expansion":
            return self._braced(node)
        if kind == "arithmetic_expansion":
            return str(self._arithmetic(node.named_children[0]))
        if kind == "command_substitution" and self.text(node).startswith("$((") and self.text(node).endswith("))"):
            return self._arithmetic_read_apart(self.text(node))
        if kind == "command_substitution" and self.unset_as_empty:
            return self._harmless_command(node)
        raise NotExpanded(f"{self.text(node)} needs the shell to run")

    def variable(self, name: str) -> str:
        if self.variables.get(name) is None and self.stand_in is not None:
            return self.stand_in(name)
        if name not in self.variables and self.unset_as_empty:
            return ""
        if name not in self.variables:
            raise NotExpanded(f"${name} is not set here (set it in the environment)")
        value = self.variables[name]
        if value is None:
            raise NotExpanded(f"${name} is assigned from something only the shell can run (set it in the environment)")
        return value

    def expand_or_none(self, node) -> Optional[str]:
        try:
            return self.expand(node)
        except NotExpanded:
            return None

    def _arithmetic_read_apart(self, text: str) -> str:
        """`$((...))` that tree-sitter-bash reads as a command in a subshell (inside `${VAR:-$((1024 * 2))}`):
        parsed again on its own, as the arithmetic it is."""
        from codemods.shell import parse_bash

        source = f"value={text}\n".encode()
        expansion = parse_bash(source).root_node.named_children[0].child_by_field_name("value")
        if expansion is None or expansion.type != "arithmetic_expansion":
            raise NotExpanded(f"{text} needs the shell to run")
        return ShellWords(source, self.variables, self.cwd, self.unset_as_empty, self.stand_in).expand(expansion)

    def _harmless_command(self, node) -> str:
        """`$(date +%Y%m%d)`, `$(pwd)`, `$(basename ...)`: commands that only print, run (without a
        shell) to get their output; `$(cd DIR && pwd)` (a script's own folder); anything else needs
        the script to run."""
        folder = self._folder_of_cd(node)
        if folder is not None:
            return folder
        commands = [child for child in node.named_children if child.type == "command"]
        name_node = commands[0].child_by_field_name("name") if len(commands) == 1 else None
        name = self.text(name_node) if name_node is not None else ""
        if name not in _HARMLESS_COMMANDS:
            raise NotExpanded(f"{self.text(node)} needs the shell to run")
        args = [self.expand(arg) for arg in commands[0].children_by_field_name("argument")]
        if name == "pwd" and self.cwd is not None:
            return self.cwd
        return _printed_by(name, tuple(args), self.cwd)

    def _folder_of_cd(self, node) -> Optional[str]:
        """DIR made absolute, as `pwd` prints it, for `$(cd [--] DIR [>/dev/null 2>&1] && pwd)`; else None."""
        lists = [child for child in node.named_children if child.type == "list"]
        if len(lists) != 1 or len(lists[0].children) != 3 or lists[0].children[1].type != "&&":
            return None
        first, _, second = lists[0].children
        if first.type == "redirected_statement":
            first = first.named_children[0]
        if first.type != "command" or second.type != "command" or self.text(second).strip() != "pwd":
            return None
        name = first.child_by_field_name("name")
        arguments = [a for a in first.children_by_field_name("argument") if self.text(a) != "--"]
        if name is None or self.text(name) != "cd" or len(arguments) != 1:
            return None
        return os.path.normpath(os.path.join(self.cwd or os.getcwd(), self.expand(arguments[0])))

    def _braced(self, node) -> str:
        """`${VAR}`, `${VAR:-default}`, `${VAR-default}`; other operators need the shell."""
        children = node.children[1:-1]  # between `${` and `}`
        if len(children) == 1 and children[0].type == "subscript":
            return self._all_elements(children[0])
        if not children or children[0].type != "variable_name":
            raise NotExpanded(f"{self.text(node)} needs the shell to run")
        name = self.text(children[0])
        if len(children) == 1:
            return self.variable(name)
        operator = self.text(children[1])
        if operator in (":+", "+") and self.unset_as_empty:  # the word when the variable is set
            value = self.variables.get(name)
            is_set = value is not None and (value or operator == "+")
            return "".join(self.expand(child) for child in children[2:]) if is_set else ""
        if operator not in (":-", "-"):
            raise NotExpanded(f"{self.text(node)} needs the shell to run")
        value = self.variables.get(name)
        if value is not None and (value or operator == "-"):
            return value
        default = "".join(self.expand(child) for child in children[2:])
        # bash expands a leading `~` of the default word (`${TRAIN_FILE:-~/data/train.parquet}`)
        return os.path.expanduser(default) if default == "~" or default.startswith("~/") else default

    def _all_elements(self, subscript) -> str:
        """`${ARRAY[*]}` or `${ARRAY[@]}` inside a word: the array's elements joined by blanks;
        `${BASH_SOURCE[0]}`: the script's path, as `$0`."""
        name, index = subscript.child_by_field_name("name"), subscript.child_by_field_name("index")
        if name is not None and index is not None and self.text(name) == "BASH_SOURCE" and self.text(index) == "0":
            return self.variable("0")
        value = (
            self.variables.get(_array_key(self.text(name)))
            if name is not None and index is not None and self.text(index) in ("*", "@")
            else None
        )
        if value is None:
            raise NotExpanded(f"{self.text(subscript.parent)} needs the shell to run")
        return value

    def _arithmetic(self, node) -> int:
        kind = node.type
        if kind == "number":
            return int(self.text(node), 0)
        if kind == "parenthesized_expression":
            return self._arithmetic(node.named_children[0])
        if kind in ("simple_expansion", "expansion", "variable_name"):
            name = self.text(node).lstrip("$").strip("{}")
            value = self.variable(name).strip()
            try:
                return int(value or "0", 0)  # bash: an empty variable is 0 in arithmetic
            except ValueError:
                raise NotExpanded(f"${name}={value!r} is not a number in $((...))") from None
        if kind == "binary_expression":
            left, right = (self._arithmetic(c) for c in (node.named_children[0], node.named_children[-1]))
            operator = self.text(node.child_by_field_name("operator"))
            operations = {"+": int.__add__, "-": int.__sub__, "*": int.__mul__, "/": int.__floordiv__, "%": int.__mod__}
            if operator in operations:
                return operations[operator](left, right)
        raise NotExpanded(f"$(({self.text(node)})) needs the shell to run")


def _unescape(text: str, only: Optional[str] = None) -> str:
    """Drop the backslash of `\\x` (in double quotes only before the characters bash escapes)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and (only is None or text[i + 1] in only):
            out.append(text[i + 1])
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def read_launches(
    script: Path,
    cwd: Optional[str] = None,
    unset_as_empty: bool = False,
    stand_in: Optional[Callable[[str], str]] = None,
    with_unsupported: bool = False,
) -> list[ScriptLaunch]:
    """Every trainer launch of one script (an unparseable script gives one unexpanded entry);
    `cwd`, `unset_as_empty` and `stand_in` as `ShellWords` takes them. `with_unsupported` adds the
    launches of trainer entries rlbridge lacks (a verl recipe's), with `unsupported` saying why."""
    from codemods.shell import find_all_launches, find_launches, first_error_line, parse_bash
    from codemods.shell_words import masked_for_parsing

    source = script.read_bytes()
    # Parsed as the migration tool parses it: constructs bash accepts and tree-sitter rejects
    # (`${VAR:-["/path"]}`) are masked byte for byte, so node offsets still read the real text.
    tree = parse_bash(masked_for_parsing(source))
    if tree.root_node.has_error:
        line = first_error_line(tree)
        return [ScriptLaunch(script, line, not_expanded=f"tree-sitter-bash cannot parse line {line}")]
    assignments = _assignments(tree.root_node)
    launches = []
    for launch in find_launches(tree, source):
        arrays: dict[str, list] = {}
        variables = _variables_before(
            assignments, launch.command.start_byte, source, cwd, unset_as_empty, stand_in, arrays, script
        )
        line = launch.command.start_point.row + 1
        try:
            argv = _launch_argv(launch, ShellWords(source, variables, cwd, unset_as_empty, stand_in), arrays)
        except NotExpanded as why:
            launches.append(ScriptLaunch(script, line, not_expanded=str(why)))
        else:
            launches.append(ScriptLaunch(script, line, argv=tuple(argv)))
    if with_unsupported:
        launches += [
            ScriptLaunch(script, launch.command.start_point.row + 1, unsupported=launch.entry.message)
            for launch in find_all_launches(tree, source)
            if launch.entry is not None
            and launch.entry.new is None
            and launch.entry.trainer_config
            and launch.command is not None
        ]
        launches.sort(key=lambda launch: launch.line)
    return launches


def _launch_argv(launch, words: ShellWords, arrays: dict[str, list]) -> list[str]:
    """`--config-*` flags, then the override tokens (arrays included), expanded; tokens whose key
    is a model or data path keep their text when it cannot be expanded (they are replaced later)."""
    flags, arguments = [], launch.command.children_by_field_name("argument")
    after_module = [a for a in arguments if a.start_byte > launch.module_node.start_byte]
    flag_words = []
    for index, argument in enumerate(after_module):
        text = words.text(argument).strip("'\"")
        if text.startswith(_CONFIG_FLAGS):
            flags.append(words.expand(argument))
            flag_words.append(argument)
            if text in _CONFIG_FLAGS and index + 1 < len(after_module):
                flags.append(words.expand(after_module[index + 1]))
                flag_words.append(after_module[index + 1])
    after_module = [a for a in after_module if not any(a is f for f in flag_words)]  # `--config-path $DIR`
    from shims.rename_table import resolve_entrypoint

    # An entrypoint that implied settings (`main_ppo_sync`) gives them first, as the codemod does.
    tokens = [f"{key}={value}" for key, value in resolve_entrypoint(launch.module).also_set]
    for item in _in_argument_order(launch, after_module, words, arrays):
        if isinstance(item, str):
            tokens.extend(item.split())  # an unquoted `$ARGS`: bash splits its value into words
            continue
        try:
            tokens.append(words.expand(item))
        except NotExpanded:
            key = words.text(item).lstrip("+~").split("=", 1)[0]
            if key not in MODEL_KEYS | TRAIN_KEYS | VAL_KEYS:
                raise
            tokens.append(f"{key}=<from the shell>")
    return flags + tokens


def _in_argument_order(launch, arguments: list, words: ShellWords, arrays: dict[str, list]) -> list:
    """The launch's override nodes, and the value of each unquoted string variable (`$ACTOR_ARGS`,
    several overrides in one variable) as text, in the order the arguments give them to the program.
    `launch.tokens` are in argument order already; an array's tokens are its elements (outside the
    command), so they stand where the array is expanded."""
    overrides = {token.node.start_byte: token.node for token in launch.tokens}
    overrides.update((node.start_byte, node) for node, _ in launch.dynamic_keys)
    ordered = _ordered_words(arguments, overrides, arrays, words, frozenset())
    given = {item.start_byte for item in ordered if not isinstance(item, str)}
    command = launch.command
    return ordered + [
        node
        for start, node in overrides.items()
        if start not in given and command.start_byte <= start < command.end_byte
    ]


def _ordered_words(arguments: list, overrides: dict, arrays: dict, words: ShellWords, seen: frozenset[str]) -> list:
    """`_in_argument_order` over `arguments`, an array's elements standing where it is expanded (a
    `--config-*` flag among them too: bash hands it to the program as if written there)."""
    from codemods.shell import expanded_array, expanded_variable

    ordered: list = []
    for index, argument in enumerate(arguments):
        array = expanded_array(argument, words.source)
        if array is not None and array not in seen:
            ordered += _ordered_words(arrays.get(array, []), overrides, arrays, words, seen | {array})
        elif argument.start_byte in overrides:
            ordered.append(overrides[argument.start_byte])
        elif expanded_variable(argument, words.source) is not None and argument.type != "string":
            ordered.append(words.expand(argument))
        elif seen and _is_config_flag(words.text(argument), arguments[index - 1 : index], words):
            ordered.append(words.expand(argument))
    return ordered


def _is_config_flag(text: str, before: list, words: ShellWords) -> bool:
    """Whether an array element is a `--config-*` flag or the value of one written apart (`-cn NAME`)."""
    return text.strip("'\"").startswith(_CONFIG_FLAGS) or bool(before) and words.text(before[0]) in _CONFIG_FLAGS


def _assignments(root) -> list:
    """Variable assignments and `for` loops, in document order."""
    found, stack = [], [root]
    while stack:
        node = stack.pop()
        if node.type in ("variable_assignment", "for_statement"):
            found.append(node)
        stack.extend(reversed(node.children))
    return sorted(found, key=lambda n: n.start_byte)


def _variables_before(
    assignments: list,
    offset: int,
    source: bytes,
    cwd: Optional[str] = None,
    unset_as_empty: bool = False,
    stand_in: Optional[Callable[[str], str]] = None,
    arrays: Optional[dict[str, list]] = None,
    script: Optional[Path] = None,
) -> dict[str, Optional[str]]:
    """The variables a launch at `offset` sees; `arrays`, when given, gets each array's element nodes;
    `script`, the script's path, is `$0` (as run from `cwd`)."""
    from codemods.shell_branches import skipped_by_a_branch

    variables: dict[str, Optional[str]] = dict(os.environ)
    if script is not None:
        variables["0"] = os.path.relpath(script, cwd) if cwd else str(script)
    words = ShellWords(source, variables, cwd, unset_as_empty, stand_in)
    known = ShellWords(source, variables, cwd)  # for `if` tests: a variable the user sets is not known
    arrays = {} if arrays is None else arrays
    for node in assignments:
        if node.start_byte >= offset:
            break
        name_node = node.child_by_field_name("name") or node.child_by_field_name("variable")
        if name_node is None or skipped_by_a_branch(node, known.expand_or_none):
            continue
        name = words.text(name_node)
        if node.type == "for_statement":
            values = node.children_by_field_name("value")
            value_node = values[0] if values else None
            first = _first_element(value_node, words, arrays)
            if first is not None:  # `for X in "${ARRAY[@]}"`: the array's first element, not all of them
                value_node = first
        else:
            value_node = node.child_by_field_name("value")
        if value_node is not None and value_node.type == "array":
            elements = [element for element in value_node.named_children if element.type != "comment"]
            appended = any(child.type == "+=" for child in node.children)
            arrays[name] = [*arrays.get(name, []), *elements] if appended else elements
            try:
                variables[_array_key(name)] = " ".join(words.expand(element) for element in arrays[name])
            except NotExpanded:
                variables[_array_key(name)] = None
            continue
        try:
            variables[name] = "".join(words.expand(piece) for piece in _value_pieces(node, value_node, source))
        except NotExpanded:
            variables[name] = None
    return variables


_WHOLE_ARRAY = re.compile(r'"?\$\{([A-Za-z_][A-Za-z0-9_]*)\[[@*]\]\}"?')


def _first_element(value, words: "ShellWords", arrays: dict[str, list]):
    """The first element node of the array a `for` value expands whole (`"${ENGINES[@]}"`), or None."""
    if value is None:
        return None
    match = _WHOLE_ARRAY.fullmatch(words.text(value))
    elements = arrays.get(match.group(1)) if match else None
    return elements[0] if elements else None


def _value_pieces(assignment, value, source: bytes) -> list:
    """The value's nodes. tree-sitter-bash ends a value at a line continuation right after a quote
    (`A='x,'` backslash-newline `'y'`) and reads the pieces after it as a command; bash joins them into one word."""
    if value is None:
        return []
    pieces, command = [value], assignment.parent
    if command is None or command.type != "command" or value.end_byte != assignment.end_byte:
        return pieces
    for node in command.named_children:
        if node.start_byte < assignment.end_byte:
            continue
        if source[pieces[-1].end_byte : node.start_byte] != b"\\\n":
            break
        pieces.append(node.named_children[0] if node.type == "command_name" else node)
    return pieces


def _array_key(name: str) -> str:
    """Where an array's joined elements are kept among the variables (no variable has this name)."""
    return f"{name}[@]"


def replace_paths(argv: Sequence[str], model: Optional[str], train: Optional[str], val: Optional[str]) -> list[str]:
    """The argv with model and data paths replaced (keys kept, prefixes kept)."""
    replacements = [(MODEL_KEYS, model), (TRAIN_KEYS, train), (VAL_KEYS, val)]
    out = []
    for token in argv:
        prefix = token[: len(token) - len(token.lstrip("+"))]
        key = token[len(prefix) :].split("=", 1)[0]
        new = next((value for keys, value in replacements if key in keys and value), None)
        out.append(f"{prefix}{key}={new}" if new is not None and "=" in token else token)
    return out


# --------------------------------------------------------------------------- running


@dataclass(frozen=True)
class Outcome:
    """How one dry run ended: `kind` is passes, fails, not expanded or traceback."""

    kind: str
    reason: str = ""
    legacy_keys: int = 0

    def cell(self) -> str:
        return f"{self.kind}: {self.reason}" if self.reason else self.kind


def dry_run(argv: Sequence[str]) -> Outcome:
    """Run `core_v1.main_ppo` with `trainer.dry_run=true` in-process and classify how it ended."""
    from core_v1.main_ppo import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*argv, "trainer.dry_run=true"])
    except BaseException as error:  # noqa: BLE001 - a traceback is exactly what this reports
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return Outcome("traceback", last)
    lines = err.getvalue().splitlines()
    legacy = sum(line.startswith("legacy key ") for line in lines)
    errors = [line[len("error: ") :] for line in lines if line.startswith("error: ")]
    if code == 0:
        return Outcome("passes", legacy_keys=legacy)
    if code == 2 and errors:
        return Outcome("fails", errors[-1], legacy)
    return Outcome("traceback", f"exit code {code} without an error line")


@dataclass(frozen=True)
class ReportRow:
    launch: ScriptLaunch
    v0: Outcome
    v1: Outcome


def run_report(
    paths: Iterable[Path], model: Optional[str] = None, train: Optional[str] = None, val: Optional[str] = None
) -> list[ReportRow]:
    rows = []
    for script in collect_scripts(paths):
        for launch in read_launches(script):
            if launch.not_expanded is not None:
                skipped = Outcome("not expanded", launch.not_expanded)
                rows.append(ReportRow(launch, skipped, skipped))
                continue
            argv = replace_paths(launch.argv, model, train, val)
            rows.append(ReportRow(launch, dry_run([*argv, "trainer.use_v1=false"]), dry_run(argv)))
    return rows


def collect_scripts(paths: Iterable[Path]) -> list[Path]:
    """Files given, and the regular files of directories given (sorted; hidden files skipped)."""
    scripts = []
    for path in paths:
        if path.is_dir():
            scripts += sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
        else:
            scripts.append(path)
    return scripts


def format_report(rows: Sequence[ReportRow]) -> str:
    lines = []
    for row in rows:
        where = f"{row.launch.script.name}:{row.launch.line}"
        legacy = max(row.v0.legacy_keys, row.v1.legacy_keys)
        lines.append(f"{where}  ({legacy} legacy key(s))")
        lines.append(f"    V0: {row.v0.cell()}")
        lines.append(f"    V1: {row.v1.cell()}")
    counts = Counter((trainer, outcome.kind) for row in rows for trainer, outcome in (("V0", row.v0), ("V1", row.v1)))
    lines.append("")
    lines.append(f"{len(rows)} launch(es); outcomes:")
    for (trainer, kind), count in sorted(counts.items()):
        lines.append(f"  {trainer} {kind}: {count}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m codemods.dry_run_report", description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path, help="launch scripts or folders of them")
    parser.add_argument("--model", help="replace every model path with this one")
    parser.add_argument("--train-files", help="replace data.train_files with this")
    parser.add_argument("--val-files", help="replace data.val_files with this")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        parser.error(f"no such file or folder: {', '.join(missing)}")
    rows = run_report(args.paths, args.model, args.train_files, args.val_files)
    print(format_report(rows))
    return 1 if any(o.kind == "traceback" for row in rows for o in (row.v0, row.v1)) else 0


if __name__ == "__main__":
    sys.exit(main())
