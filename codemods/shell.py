"""Shell engine: rewrite trainer launch commands in bash scripts, splicing edits by byte offset.

The script is parsed with tree-sitter-bash. A launch is a command that runs a program known to the
entrypoint rows of `shims.rename_table` -- `-m <module>` (`verl.trainer.main_ppo`, `recipe.*`,
`verl.experimental.*`, ...) or a script path (`verl/trainer/main_ppo.py`), behind `nohup`,
`env X=Y`, `$PYTHON`, `python3 -u`, `torchrun ...`, `ray job submit ... --` -- or an unknown program
that is given verl trainer overrides (`actor_rollout_ref.*`, `algorithm.*`, ...). Its override
tokens (`key=value`, `+key=value`, `++key=value`, `~key`) are the arguments after the program, the
elements of any bash array expanded into it (`"${ARGS[@]}"`), and the words of any string variable
expanded into it unquoted (`ARGS="a.b=1 c.d=2"` ... `$ARGS`). Each token's key is read from its
literal text, and its value with Hydra's own override parser, then looked up in
`shims.rename_table`. An entry rlbridge has is rewritten to it (`python3 verl/trainer/main_ppo.py`
becomes `python3 -m core_v1.main_ppo`); one it lacks keeps its program and gets a marker naming
it. Edits are byte splices: only a key, a module name, a deleted token or an inserted
override/marker line changes; quoting, spacing and comments elsewhere stay as they were.

A manual item leaves `# TODO(migrate:RULE): ...` on its own line above the statement that holds
the token (above the first line of a continued command, never inside it). A key built from a shell
variable is reported, not guessed.

A script tree-sitter cannot parse is still migrated: constructs bash accepts and tree-sitter does
not (`${VAR:-["/path"]}`, a backslash before the end of the file) are masked byte for byte in a
copy used only for parsing; if the copy still does not parse, `codemods.shell_words` splits the
script into commands and words itself and the same rules run on the launches it finds. Either
way the result must pass `bash -n` (when bash is installed) or it is not written.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
from dataclasses import dataclass, field, replace

import tree_sitter
import tree_sitter_bash

from codemods import shell_words
from codemods.findings import Finding, MigrationResult, Severity, marker_text
from codemods.rules import ALL_RULES, RuleSelection
from codemods.splice import Edit, apply_edits, comment_lines_above, indentation, line_end, line_start
from shims import rename_table
from shims.rename_table import Action, EntrypointRow
from shims.verl_keys.verdicts import asks_for_nothing

_LANGUAGE = tree_sitter.Language(tree_sitter_bash.language())
# Nodes whose children are whole statements: a marker goes above the child, never inside it.
_STATEMENT_CONTAINERS = frozenset(
    {
        "program",
        "compound_statement",
        "do_group",
        "subshell",
        "if_statement",
        "elif_clause",
        "else_clause",
        "case_item",
        "function_definition",
    }
)
_KEY_PATTERN = re.compile(r"[A-Za-z_][\w\-]*(?:[./][\w\-]+)*")
_OVERRIDE_PREFIXES = ("++", "+", "~")


def parse_bash(source: bytes) -> tree_sitter.Tree:
    """Parse bash source; callers check `tree.root_node.has_error`."""
    return tree_sitter.Parser(_LANGUAGE).parse(source)


def first_error_line(tree: tree_sitter.Tree) -> int:
    """1-based line of the first ERROR or MISSING node (1 if none is found)."""
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.type == "ERROR" or node.is_missing:
            return node.start_point.row + 1
        stack.extend(reversed(node.children))
    return 1


@functools.lru_cache(maxsize=1)
def _overrides_parser():
    # Imported lazily: Hydra's ANTLR grammar costs ~0.1 s to load and only scripts need it.
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


# --------------------------------------------------------------------------- reading tokens


@dataclass(frozen=True)
class LiteralText:
    """The literal start of a shell word (what it means before any expansion).

    `text` is complete (`complete`) when the word has no expansion and no escape. `verbatim_start`
    and `verbatim_length` locate the first piece whose bytes are its text, so a key inside it can
    be spliced in place.
    """

    text: str
    complete: bool
    verbatim_start: int
    verbatim_length: int


def literal_text(node, source: bytes) -> LiteralText:
    """Read the literal prefix of a word, concatenation, or quoted string (or a scanned word)."""
    if isinstance(node, shell_words.Word):
        return LiteralText(node.text, node.complete, node.verbatim_start, node.verbatim_length)
    if node.type == "command_name" and node.named_child_count == 1:
        node = node.named_children[0]
    pieces: list[tuple[bytes, int]] = []
    complete = True
    for part in node.named_children if node.type == "concatenation" else [node]:
        piece = _verbatim_piece(part, source)
        if piece is None:
            complete = False
            break
        data, start, whole = piece
        if b"\\" in data:
            data, whole = data[: data.index(b"\\")], False
        pieces.append((data, start))
        if not whole:
            complete = False
            break
    text = b"".join(data for data, _ in pieces).decode("utf-8", "replace")
    first_start, first_length = (pieces[0][1], len(pieces[0][0])) if pieces else (node.start_byte, 0)
    return LiteralText(text, complete, first_start, first_length)


def _verbatim_piece(part: tree_sitter.Node, source: bytes) -> tuple[bytes, int, bool] | None:
    """(bytes, start offset, whole part read) for a literal part, None when it starts with an expansion."""
    if part.type in ("word", "number"):
        return source[part.start_byte : part.end_byte], part.start_byte, True
    if part.type == "raw_string":
        return source[part.start_byte + 1 : part.end_byte - 1], part.start_byte + 1, True
    if part.type == "string":
        content_start = part.start_byte + 1
        stop = next(
            (child.start_byte for child in part.named_children if child.type != "string_content"), part.end_byte - 1
        )
        return source[content_start:stop], content_start, stop == part.end_byte - 1
    return None


@dataclass(frozen=True)
class OverrideToken:
    """One Hydra override in a launch command, as read from the script."""

    node: object  # a tree-sitter node, or a span with the same attributes
    prefix: str  # "", "+", "++" or "~"
    key: str
    value: str | None  # Hydra-parsed value as text; None when unknown or a deletion
    key_span: tuple[int, int] | None  # bytes of the key, None when it cannot be spliced
    anchor: object  # the statement a marker for this token goes above
    in_array: bool
    in_string: bool = False  # one of the words of a string variable's value
    made_by: str | None = None  # `${VAR//old/new}` when the key is made by substitution (not in the text)


def read_override(
    node: tree_sitter.Node, source: bytes, anchor: tree_sitter.Node, in_array: bool
) -> OverrideToken | str | None:
    """An OverrideToken, the token text when its key is built from a variable, or None if not an override."""
    literal = literal_text(node, source)
    text = literal.text
    if text.startswith("-"):
        return None  # a flag such as --config-name
    prefix = next((p for p in _OVERRIDE_PREFIXES if text.startswith(p)), "")
    body = text[len(prefix) :]
    if "=" in body:
        key = body.split("=", 1)[0]
    elif literal.complete and prefix == "~":
        key = body
    elif not literal.complete and b"=" in source[node.start_byte : node.end_byte]:
        return source[node.start_byte : node.end_byte].decode("utf-8", "replace")
    else:
        return None
    key = key.split("@", 1)[0]
    if not _KEY_PATTERN.fullmatch(key):
        return None
    value = _hydra_value(text) if literal.complete and prefix != "~" else None
    key_end = len(prefix) + len(key)
    span = None
    if key_end <= literal.verbatim_length:
        start = literal.verbatim_start + len(prefix.encode())
        span = (start, start + len(key.encode()))
    return OverrideToken(node, prefix, key, value, span, anchor, in_array)


@functools.lru_cache(maxsize=8192)  # Hydra's ANTLR parse is ~1 ms a token, and a script repeats its tokens
def _hydra_value(override: str) -> str | None:
    """The override's value as text, read by Hydra's grammar; None when Hydra cannot parse it."""
    try:
        parsed = _overrides_parser().parse_override(override)
    except Exception:  # Hydra raises its own OverrideParseException subclasses and ValueErrors
        return None
    if parsed.is_delete():
        return None
    return rename_table.normalize_value(parsed.value())


# --------------------------------------------------------------------------- finding launches

# Top-level sections only verl's PPO trainer config has: an unknown program given one of these is
# treated as a trainer launch (`data.*` and `trainer.*` are shared with SFT and generation configs).
_TRAINER_SECTIONS = frozenset(
    {"actor_rollout_ref", "critic", "algorithm", "reward_model", "custom_reward_function", "reward"}
)


@dataclass
class Launch:
    """One trainer launch: its program word, the entry row, and every override it receives.

    `entry` None marks a command whose overrides are migrated with no program to rewrite or mark:
    one made only of override words (a launch whose line continuation a stray comment broke: bash
    runs the rest as a command of its own), or one handing overrides to another launch script.
    `command` is the tree-sitter command node (None when the script was scanned without a tree);
    `anchor` is the statement a launch-level marker goes above.
    """

    command: object
    module_node: object
    module: str
    entry: EntrypointRow | None
    anchor: object
    script: bool = False
    tokens: list[OverrideToken] = field(default_factory=list)
    string_tokens: list[OverrideToken] = field(default_factory=list)
    dynamic_keys: list[tuple[object, str]] = field(default_factory=list)

    def all_tokens(self) -> list[OverrideToken]:
        return [*self.tokens, *self.string_tokens]

    def keys(self) -> set[str]:
        return {token.key for token in self.all_tokens()}


def statement_of(node: tree_sitter.Node) -> tree_sitter.Node:
    """The outermost statement holding `node` (a list, pipeline or redirected command)."""
    while node.parent is not None and node.parent.type not in _STATEMENT_CONTAINERS:
        node = node.parent
    return node


def find_launches(tree: tree_sitter.Tree, source: bytes) -> list[Launch]:
    """Every command that runs an entrypoint rlbridge has (`python -m core_v1.main_ppo` after migration);
    a launch a variable holds is not among them (it has no command whose words could be expanded)."""
    return [
        launch
        for launch in find_all_launches(tree, source)
        if launch.entry is not None and launch.entry.new is not None and launch.command is not None
    ]


def find_all_launches(tree: tree_sitter.Tree, source: bytes) -> list[Launch]:
    """Every launch in a parsed script: known entries, unknown programs given trainer keys, and
    commands made of override words only."""
    root = tree.root_node
    arrays = array_assignments(root, source)
    loop_variables = {
        source[v.start_byte : v.end_byte].decode()
        for loop in _walk(root, "for_statement")
        if (v := loop.child_by_field_name("variable")) is not None
    }
    strings = _assignments(
        root,
        source,
        lambda value: value.type in ("string", "raw_string", "word", "concatenation", "number"),
        lambda value: [value],
    )
    for name in loop_variables & set(strings):
        # A loop gives it other values too: listed twice, its value reads as unknown (_variable_value).
        strings[name].append(strings[name][0])
    launches = []
    for command in _walk(root, "command"):
        words = [command.child_by_field_name("name"), *command.children_by_field_name("argument")]
        launch = _launch_of(
            [w for w in words if w is not None], source, arrays, strings, command, statement_of(command)
        )
        if launch is not None:
            launches.append(launch)
    return [*launches, *held_launches(source, arrays, strings, launches)]


def scanned_launches(source: bytes) -> list[Launch]:
    """The launches of a script tree-sitter cannot parse, from `shell_words.scan`."""
    scanned = shell_words.scan(source)
    launches = [
        launch
        for command in scanned.commands
        if (launch := _launch_of(command.words, source, scanned.arrays, scanned.strings, None, command.anchor))
    ]
    return [*launches, *held_launches(source, scanned.arrays, scanned.strings, launches)]


def held_launches(source: bytes, arrays: dict, strings: dict, found: list[Launch]) -> list[Launch]:
    """Launches and overrides a variable holds that no command launch reads: an array or string that
    is a whole launch (`CMD=(python3 -m verl.trainer.main_ppo ...)`, run as `"${CMD[@]}"` or
    `eval $CMD`), or trainer overrides handed to something the engine does not follow
    (`bash "$DIR/run.sh" "${params[@]}"` behind an `exec`, a function's `"$@"`). Their keys are
    migrated where they are written, as a launch's are; `command` is None (no flags to read)."""
    read = {token.node.start_byte for launch in found for token in launch.all_tokens()}
    held = []
    for elements in arrays.values():
        statement = elements[0][0] if elements else None
        launch = _launch_of([word for _, word in elements], source, arrays, strings, None, statement)
        if launch is not None:
            held.append(_unread(launch, read))
    for name, values in strings.items():
        launch = _string_launch(name, values, source, strings)
        if launch is not None:
            held.append(_unread(launch, read))
    return [launch for launch in held if launch.all_tokens() or launch.entry is not None]


def _unread(launch: Launch, read: set[int]) -> Launch:
    """The launch without the tokens a command launch already read (an array expanded into it)."""
    launch.tokens = [t for t in launch.tokens if t.node.start_byte not in read]
    launch.string_tokens = [t for t in launch.string_tokens if t.node.start_byte not in read]
    return launch


def _string_launch(name: str, values: list, source: bytes, strings: dict) -> Launch | None:
    """A string variable that holds a launch (`CMD="python3 -m verl.trainer.main_ppo a.b=1"`) or
    trainer overrides; None otherwise."""
    words = [
        shell_words.make_word(source, match.start(), match.end())
        for _, value in values
        for match in _STRING_WORD.finditer(source, *_string_content(value, source))
    ]
    tokens = _string_tokens(name, source, strings, set())
    program = _program(words, source)
    if program is not None and (program[2] is False or program[0] > 0):  # a bare path may be `python3 "$ENTRY"`'s
        index, module, script = program
        entry = rename_table.resolve_entrypoint(module)
        if entry is not None or _gives_trainer_overrides(tokens):
            launch = Launch(None, words[index], module, entry or rename_table.unknown_entrypoint(module), values[0][0])
            launch.script, launch.string_tokens = script, tokens
            return launch
    if _gives_trainer_overrides(tokens):
        launch = Launch(None, values[0][1], "", None, values[0][0])
        launch.string_tokens = tokens
        return launch
    return None


def _string_content(value, source: bytes) -> tuple[int, int]:
    start, end = value.start_byte, value.end_byte
    if source[start : start + 1] in (b'"', b"'"):
        start, end = start + 1, end - 1
    return start, end


def _gives_trainer_overrides(tokens: list[OverrideToken]) -> bool:
    return any(t.key.split(".")[0] in _TRAINER_SECTIONS or _is_legacy(t) for t in tokens)


def _program(words: list, source: bytes) -> tuple[int, str, bool] | None:
    """(index of the program word, module name, launched by script path) for `-m MODULE` or `path.py`."""
    for index, word in enumerate(words):
        raw = source[word.start_byte : word.end_byte]
        if raw == b"-m":
            if index + 1 == len(words):
                return None
            module = literal_text(words[index + 1], source)
            text = (
                module.text
                if module.complete
                else source[words[index + 1].start_byte : words[index + 1].end_byte].decode()
            )
            return index + 1, text, False
        module = rename_table.module_of_script(raw.decode("utf-8", "replace").strip("'\""))
        if module is not None:
            return index, module, True
    return None


def _launch_of(words: list, source: bytes, arrays: dict, strings: dict, command, anchor) -> Launch | None:
    if not words:
        return None
    first = literal_text(words[0], source)
    if first.complete and _is_override_word(first.text):
        launch = Launch(command, words[0], "", None, anchor)
        _read_arguments(launch, words, source, arrays, strings)
        return launch
    program = _program(words, source)
    if program is None:
        return _handed_overrides_launch(words, source, arrays, strings, command, anchor)
    index, module, script = program
    entry = rename_table.resolve_entrypoint(module)
    launch = Launch(command, words[index], module, entry, anchor, script)
    _read_arguments(launch, words[index + 1 :], source, arrays, strings)
    if entry is None:
        if not _gives_trainer_overrides(launch.all_tokens()):
            return None
        launch.entry = rename_table.unknown_entrypoint(module)
    elif "*" in entry.old and not launch.all_tokens() and _takes_options(words[index + 1 :], source):
        return None  # `python -m recipe.r1.data_process --local_dir DIR`: a script of its own, not a Hydra app
    return launch


# Hydra's own command-line flags: any other `--option` means the program is not a Hydra app.
_HYDRA_FLAGS = frozenset(
    {
        *("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--multirun", "-m"),
        *("--cfg", "-c", "--resolve", "--package", "-p", "--info", "-i", "--run", "-r", "--help", "-h"),
        *("--hydra-help", "--version", "--shell-completion", "-sc", "--experimental-rerun"),
    }
)


def _takes_options(arguments: list, source: bytes) -> bool:
    """Whether the arguments hold an `--option` Hydra does not know (the program parses its own)."""
    for word in arguments:
        text = literal_text(word, source).text.strip("'\"")
        if text.startswith("--") and text.split("=", 1)[0] not in _HYDRA_FLAGS:
            return True
    return False


def _handed_overrides_launch(words: list, source: bytes, arrays: dict, strings: dict, command, anchor) -> Launch | None:
    """`bash "$DIR/run_grpo.sh" reward_model.enable=True`, `run_job "${COMMON[@]}"`, `$RUN ...`:
    trainer overrides handed to another script, a function the script defines or a program held in
    a variable (which pass them on). Their keys are migrated like a launch's, with nothing to say
    about the program; any other command (`echo a.b=1`) is not a launch."""
    index = _passes_overrides_on(words, source)
    if index is None:
        return None
    launch = Launch(command, words[index], "", None, anchor)
    _read_arguments(launch, words[index + 1 :], source, arrays, strings)
    return launch if _gives_trainer_overrides(launch.all_tokens()) else None


# Words that run the next word as the command (`exec bash -x run.sh`, `env A=1 nohup run.sh`).
_RUNS_NEXT = frozenset({"exec", "nohup", "env", "bash", "sh", "source", ".", "command", "time", "stdbuf"})
_ENV_WORD = re.compile(r"[A-Za-z_]\w*=")


def _passes_overrides_on(words: list, source: bytes) -> int | None:
    """Index of the word that takes the overrides on: a `*.sh` script, a function of the script, or
    (as the command) a variable's program; None for any other command."""
    for index, word in enumerate(words):
        raw = source[word.start_byte : word.end_byte].decode("utf-8", "replace").strip("'\"")
        if raw.endswith(".sh") or raw in _function_names(source) or (index == 0 and raw.startswith("$")):
            return index
        if raw not in _RUNS_NEXT and not raw.startswith("-") and not _ENV_WORD.match(raw):
            return None
    return None


_FUNCTION = re.compile(rb"^[ \t]*(?:function[ \t]+([A-Za-z_][\w\-]*)|([A-Za-z_][\w\-]*)[ \t]*\(\))", re.M)


@functools.lru_cache(maxsize=4)
def _function_names(source: bytes) -> frozenset[str]:
    return frozenset((m.group(1) or m.group(2)).decode() for m in _FUNCTION.finditer(source))


def _is_override_word(text: str) -> bool:
    body = text.lstrip("+~")
    key = body.split("=", 1)[0]
    return "=" in body and "." in key and _KEY_PATTERN.fullmatch(key) is not None


def _read_arguments(launch: Launch, arguments: list, source: bytes, arrays: dict, strings: dict) -> None:
    _read_words(
        launch,
        [(launch.anchor, argument) for argument in arguments],
        source,
        arrays,
        strings,
        seen=frozenset(),
        in_array=False,
    )


def _read_words(
    launch: Launch, words: list, source: bytes, arrays: dict, strings: dict, *, seen: frozenset[str], in_array: bool
) -> None:
    """Each `(statement, word)` of a launch: overrides, the elements of an expanded `"${NAME[@]}"`
    (each array once: `seen`), and the words of a string variable expanded in either
    (`EXTRA=($ACTOR_ARGS "${DATA[@]}")`)."""
    for statement, word in words:
        array_name = _expanded_array(word, source)
        variable = expanded_variable(word, source)
        if array_name is not None and array_name not in seen:
            _read_words(
                launch, arrays.get(array_name, []), source, arrays, strings, seen=seen | {array_name}, in_array=True
            )
        elif variable is not None:
            launch.string_tokens.extend(_string_tokens(variable, source, strings, set()))
        else:
            _add_token(launch, word, source, statement, in_array=in_array, strings=strings)


def _add_token(launch: Launch, node, source: bytes, anchor, in_array: bool, strings: dict) -> None:
    read = read_override(node, source, anchor, in_array)
    if isinstance(read, OverrideToken):
        if read.value is None and read.prefix != "~":
            raw = source[node.start_byte : node.end_byte].decode("utf-8", "replace").split("=", 1)[-1]
            read = replace(read, value=_variable_value(raw, source, strings))
        launch.tokens.append(read)
    elif isinstance(read, str):
        launch.dynamic_keys.append((node, read))


_VALUE_VARIABLE = re.compile(r"""["']?\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))["']?""")


def _variable_value(raw_value: str, source: bytes, strings: dict) -> str | None:
    """The value of `key=$NAME` when the script gives NAME exactly one literal value (`mode=sync`),
    so a value-dependent row can decide; None when it is not known."""
    match = _VALUE_VARIABLE.fullmatch(raw_value.strip())
    if match is None:
        return None
    assignments = strings.get(match.group(1) or match.group(2), [])
    if len(assignments) != 1:
        return None
    literal = literal_text(assignments[0][1], source)
    return rename_table.normalize_value(literal.text) if literal.complete else None


_STRING_WORD = re.compile(rb"[^\s\"']+")


_VARIABLE_WORD = re.compile(r"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))")


def _string_tokens(variable: str, source: bytes, strings: dict, seen: set[str]) -> list[OverrideToken]:
    """Override tokens among the words of every value assigned to a string variable
    (`ARGS="a.b=1 c.d=$X"`), following variables that hold others (`ARGS="$ARGS $MORE"`)."""
    if variable in seen:
        return []
    seen.add(variable)
    return [
        token
        for statement, value in strings.get(variable, [])
        for token in _value_tokens(value, statement, source, strings, seen)
    ]


_SUBSTITUTION = re.compile(r"\$\{([A-Za-z_]\w*)(//?)([^/}]+)/([^}]*)\}")


def _substituted_tokens(substitution, source: bytes, strings: dict, statement, match) -> list[OverrideToken]:
    """`${ACTOR//actor_rollout_ref.actor/critic.model}`: the keys this makes from ACTOR's (as migrated).

    Only a made key the rename table still moves is returned: it cannot be renamed in place (it is
    not in the text), so it is reported at the substitution."""
    name, operator, pattern, replacement = substitution.groups()
    made = []
    for token in _string_tokens(name, source, strings, set()):
        action = rename_table.resolve_config_key(token.key, token.value)
        migrated = action.new_key if action is not None and action.new_key else token.key
        key = migrated.replace(pattern, replacement) if operator == "//" else migrated.replace(pattern, replacement, 1)
        made_action = rename_table.resolve_config_key(key, token.value)
        if key != migrated and made_action is not None and made_action.new_key != key:
            node = shell_words.span(source, match.start(), match.end())
            made.append(
                OverrideToken(
                    node,
                    token.prefix,
                    key,
                    token.value,
                    None,
                    statement,
                    in_array=False,
                    in_string=True,
                    made_by=substitution.group(0),
                )
            )
    return made


def _value_tokens(value, statement, source: bytes, strings: dict, seen: set[str]) -> list[OverrideToken]:
    start, end = value.start_byte, value.end_byte
    if source[start : start + 1] in (b'"', b"'"):
        start, end = start + 1, end - 1
    tokens = []
    for match in _STRING_WORD.finditer(source, start, end):
        text = match.group().decode("utf-8", "replace")
        nested = _VARIABLE_WORD.fullmatch(text)
        if nested:
            tokens.extend(_string_tokens(nested.group(1) or nested.group(2), source, strings, seen))
            continue
        substituted = _SUBSTITUTION.fullmatch(text)
        if substituted:
            tokens.extend(_substituted_tokens(substituted, source, strings, statement, match))
            continue
        prefix = next((p for p in _OVERRIDE_PREFIXES if text.startswith(p)), "")
        key = text[len(prefix) :].split("=", 1)[0]
        if text.startswith("$") or not _KEY_PATTERN.fullmatch(key) or ("=" not in text and prefix != "~"):
            continue
        literal = "$" not in text and "\\" not in text
        value_text = _hydra_value(text) if literal and prefix != "~" else None
        if value_text is None and "=" in text and prefix != "~":
            value_text = _variable_value(text.split("=", 1)[1], source, strings)
        key_start = match.start() + len(prefix)
        node = shell_words.span(source, match.start(), match.end())
        tokens.append(
            OverrideToken(
                node,
                prefix,
                key,
                value_text,
                (key_start, key_start + len(key)),
                statement,
                in_array=False,
                in_string=True,
            )
        )
    return tokens


def _assignments(root, source: bytes, accept, elements) -> dict[str, list]:
    """name -> [(assignment statement, value node)] for the assignments whose value `accept`s."""
    found: dict[str, list] = {}
    for assignment in _walk(root, "variable_assignment"):
        name, value = assignment.child_by_field_name("name"), assignment.child_by_field_name("value")
        if name is None or value is None or not accept(value):
            continue
        statement = statement_of(assignment)
        found.setdefault(source[name.start_byte : name.end_byte].decode(), []).extend(
            (statement, element) for element in elements(value)
        )
    return found


def array_assignments(root, source: bytes) -> dict[str, list]:
    """name -> [(assignment statement, element node)] of every array the script assigns (`A=(...)`, `A+=(...)`)."""
    return _assignments(
        root,
        source,
        lambda value: value.type == "array",
        lambda value: [c for c in value.named_children if c.type != "comment"],
    )


def expanded_array(argument, source: bytes) -> str | None:
    """NAME when the argument is `"${NAME[@]}"` or `${NAME[*]}` (all elements of an array)."""
    return _expanded_array(argument, source)


def _expanded_array(argument, source: bytes) -> str | None:
    """NAME when the argument is `"${NAME[@]}"` or `${NAME[*]}` (all elements of an array)."""
    if isinstance(argument, shell_words.Word):
        return argument.array
    node = argument.named_children[0] if argument.type == "string" and argument.named_child_count == 1 else argument
    if node.type != "expansion":
        return None
    subscript = next((c for c in node.named_children if c.type == "subscript"), None)
    if subscript is None:
        return None
    name, index = subscript.child_by_field_name("name"), subscript.child_by_field_name("index")
    if name is None or index is None or source[index.start_byte : index.end_byte] not in (b"@", b"*"):
        return None
    return source[name.start_byte : name.end_byte].decode()


def expanded_variable(argument, source: bytes) -> str | None:
    """NAME when the argument is exactly `$NAME` or `${NAME}` (a string variable's words)."""
    if isinstance(argument, shell_words.Word):
        return argument.variable
    node = argument.named_children[0] if argument.type == "string" and argument.named_child_count == 1 else argument
    if node.type not in ("simple_expansion", "expansion") or node.named_child_count != 1:
        return None
    name = node.named_children[0]
    return source[name.start_byte : name.end_byte].decode() if name.type == "variable_name" else None


def _walk(root, node_type: str):
    stack = [root]
    while stack:
        node = stack.pop()
        if node.type == node_type:
            yield node
        stack.extend(reversed(node.children))


# --------------------------------------------------------------------------- planning edits


class _Plan:
    """Edits and findings for one script, with markers deduplicated against the file."""

    def __init__(self, source: bytes, selection: RuleSelection):
        self.source = source
        self.selection = selection
        self.edits: list[Edit] = []
        self.findings: list[Finding] = []
        self._markers: set[tuple[int, bytes]] = set()
        self._claimed: set[tuple[int, str | None]] = set()  # tokens already edited (arrays shared by launches)

    def enabled(self, rule: str) -> bool:
        return self.selection.enabled(rule)

    def report(self, rule: str, node, severity: Severity, message: str) -> None:
        self.findings.append(Finding(rule, node.start_point.row + 1, severity, message))

    def claim(self, node, key: str | None = None) -> bool:
        """True the first time a token is seen; an array expanded into two launches is edited once.
        (`key` tells apart the keys one substitution makes.)"""
        if (node.start_byte, key) in self._claimed:
            return False
        self._claimed.add((node.start_byte, key))
        return True

    def replace(self, start: int, end: int, text: str) -> None:
        self.edits.append(Edit(start, end, text.encode(), len(self.edits)))

    def delete_token(self, token: OverrideToken) -> None:
        start, end = token.node.start_byte, token.node.end_byte
        if token.in_string:  # one word of a string: take the blanks before it (or after, if first)
            while start > 0 and self.source[start - 1 : start] in (b" ", b"\t"):
                start -= 1
            if self.source[start - 1 : start] in (b'"', b"'"):
                while self.source[end : end + 1] in (b" ", b"\t"):
                    end += 1
            self.replace(start, end, "")
            return
        first, last = line_start(self.source, start), line_end(self.source, end)
        before, after = self.source[first:start].strip(), self.source[end:last].strip()
        # A token alone on its line takes the line with it, unless that line ends a continued
        # command (dropping its newline would glue the next statement onto the command).
        if not before and (after == b"\\" or (token.in_array and not after)):
            self.replace(first, min(last + 1, len(self.source)), "")
            return
        while start > first and self.source[start - 1 : start] in (b" ", b"\t"):
            start -= 1
        self.replace(start, end, "")

    def marker(self, rule: str, anchor, message: str) -> None:
        """Leave `# TODO(migrate:RULE): message` above the anchor statement, once."""
        at = _marker_offset(self.source, anchor.start_byte)
        comment = b"# " + marker_text(rule, message).encode()
        if (at, comment) in self._markers or comment in comment_lines_above(self.source, at):
            return
        self._markers.add((at, comment))
        self.edits.append(Edit(at, at, indentation(self.source, at) + comment + b"\n", len(self.edits)))


def _marker_offset(source: bytes, statement_start: int) -> int:
    """Start of the first line of the statement, walking back over backslash-continued lines."""
    offset = line_start(source, statement_start)
    while offset > 0:
        previous = line_start(source, offset - 1)
        if not source[previous : offset - 1].rstrip(b" \t\r").endswith(b"\\"):
            break
        offset = previous
    return offset


def _plan_launch(plan: _Plan, launch: Launch) -> None:
    additions: list[tuple[str, str, str]] = []  # (key, value, rule) to insert after the module
    if launch.entry is not None:
        _plan_entrypoint(plan, launch, additions)
        if not launch.entry.trainer_config:
            return  # that program's own config: its keys are not the trainer's
    for token in launch.all_tokens():
        if plan.claim(token.node, token.key if token.made_by else None):
            _plan_token(plan, token, launch, additions)
    _plan_keep_on_v0(plan, launch, additions)
    for node, text in launch.dynamic_keys:
        if plan.enabled("dynamic-key") and plan.claim(node):
            plan.report(
                "dynamic-key",
                node,
                Severity.WARNING,
                f"override key built from a shell variable ({text}); check it against the V1 key names",
            )
    if launch.entry is None or launch.entry.new is None:
        return  # settings for rlbridge's entry are added only to a launch of it
    present, inserted = launch.keys(), []
    for key, value, rule in additions:
        if key not in present and key not in {k for k, _ in inserted}:
            inserted.append((key, value))
            plan.report(rule, launch.module_node, Severity.INFO, f"added {key}={value}")
    if inserted:
        end = launch.module_node.end_byte
        plan.replace(end, end, "".join(f" {key}={value}" for key, value in inserted))


def _plan_entrypoint(plan: _Plan, launch: Launch, additions: list) -> None:
    row, node = launch.entry, launch.module_node
    if not plan.enabled(row.rule):
        return
    shown = (
        plan.source[node.start_byte : node.end_byte].decode("utf-8", "replace")
        if launch.script
        else f"python -m {launch.module}"
    )
    if row.new is None:
        message = f"{shown}: {row.message}"
        legacy = sorted({t.key for t in launch.all_tokens() if _is_legacy(t)})
        if not row.trainer_config and legacy:
            message += f"; its overrides are that program's own keys, left as they are ({', '.join(legacy)})"
        plan.report(row.rule, node, Severity.MANUAL, message)
        plan.marker(row.rule, launch.anchor, message)
        return
    if launch.script:
        plan.replace(node.start_byte, node.end_byte, f"-m {row.new}")
        plan.report(row.rule, node, Severity.INFO, f"{shown} -> -m {row.new}")
    elif row.new != launch.module:
        literal = literal_text(node, plan.source)
        plan.replace(literal.verbatim_start, literal.verbatim_start + literal.verbatim_length, row.new)
        plan.report(row.rule, node, Severity.INFO, f"python -m {launch.module} -> python -m {row.new}")
    additions.extend((key, value, row.rule) for key, value in row.also_set)
    if row.own_configs:
        _drop_own_config(plan, launch)
    if row.config is not None:
        _place_entry_config(plan, launch, row.config)
        plan.report(row.rule, node, Severity.INFO, row.message)
    if row.own_scorer is not None and not launch.keys() & _REWARD_FUNCTION_KEYS:
        plan.report(row.rule, node, Severity.MANUAL, f"{shown}: {row.own_scorer}")
        plan.marker(row.rule, launch.anchor, f"{shown}: {row.own_scorer}")


_REWARD_FUNCTION_KEYS = frozenset({"custom_reward_function.path", "reward.custom_reward_function.path"})


_CONFIG_FLAGS = {"--config-path": "path", "-cp": "path", "--config-name": "name", "-cn": "name"}


def _config_flags(plan: _Plan, launch: Launch) -> dict[str, tuple[list, str]]:
    """The launch's `--config-path`/`--config-name` flags: kind -> (their words, the value)."""
    words = (
        [w for w in launch.command.children_by_field_name("argument") if w.start_byte > launch.module_node.start_byte]
        if launch.command is not None
        else []
    )
    flags: dict[str, tuple[list, str]] = {}
    for index, word in enumerate(words):
        text = literal_text(word, plan.source).text.strip("'\"")
        flag, sep, value = text.partition("=")
        if flag in _CONFIG_FLAGS:
            taken = [word] if sep else words[index : index + 2]
            shown = (
                value if sep else (literal_text(words[index + 1], plan.source).text if index + 1 < len(words) else "")
            )
            flags[_CONFIG_FLAGS[flag]] = (taken, shown.strip("'\""))
    return flags


def _place_entry_config(plan: _Plan, launch: Launch, config: tuple[str, str]) -> None:
    """The entry's own config, as its `@hydra.main` finds it, for rlbridge's entry to compose: Hydra
    reads a relative `--config-path` beside the module's file, rlbridge from the current directory
    (where `python -m` found the module), so such a path gets the module's folder in front."""
    if launch.command is None:  # scanned without a tree: the flags' words are not known
        message = f"add --config-path/--config-name of {launch.module}'s own config ({config[0]}/{config[1]})"
        plan.report(launch.entry.rule, launch.module_node, Severity.MANUAL, message)
        plan.marker(launch.entry.rule, launch.anchor, message)
        return
    flags = _config_flags(plan, launch)
    inserted = []
    if "path" in flags:
        _prefix_config_path(plan, launch, flags["path"])
    else:
        inserted.append(f"--config-path={_module_folder(plan, launch)}/{config[0]}")
    if "name" not in flags:
        inserted.append(f"--config-name={config[1]}")
    if inserted:
        end = launch.module_node.end_byte
        plan.replace(end, end, "".join(f" {flag}" for flag in inserted))
        plan.report(launch.entry.rule, launch.module_node, Severity.INFO, f"added {' '.join(inserted)}")


def _prefix_config_path(plan: _Plan, launch: Launch, flag: tuple[list, str]) -> None:
    """A relative `--config-path` given to the old entry gets its module's folder in front (an absolute
    path, a variable or a `file:`/`pkg:` one stays)."""
    words, value = flag
    if not value or value.startswith(("/", "$", "~", "file:", "pkg:")):
        return
    folder = _module_folder(plan, launch)
    word = words[-1]
    raw = plan.source[word.start_byte : word.end_byte]
    at = raw.index(b"=") + 1 if len(words) == 1 else 0
    at += raw[at : at + 1] in (b"'", b'"')  # inside the value's quotes
    plan.replace(word.start_byte + at, word.start_byte + at, f"{folder}/")
    plan.report(launch.entry.rule, word, Severity.INFO, f"--config-path={value} -> {folder}/{value}")


def _module_folder(plan: _Plan, launch: Launch) -> str:
    """Where the entry's file is: the folder of a script path as written (`$HOME/verl/recipe/dapo`),
    or the module's package as a relative path (`python -m` finds it from the current directory)."""
    if launch.script:
        written = plan.source[launch.module_node.start_byte : launch.module_node.end_byte].decode("utf-8", "replace")
        return written.strip("'\"").rpartition("/")[0] or "."
    return "/".join(launch.module.split(".")[:-1])


def _drop_own_config(plan: _Plan, launch: Launch) -> None:
    """`--config-path X --config-name Y` naming verl's own config of the entry (Hydra read X beside
    verl's module): rlbridge's config stands in for it, so both flags go."""
    flags = _config_flags(plan, launch)
    name = flags.get("name", (None, ""))[1].removesuffix(".yaml")
    if name not in launch.entry.own_configs:
        if launch.command is not None and "path" in flags:  # another config, which Hydra read beside the module
            _prefix_config_path(plan, launch, flags["path"])
        return
    for taken, _ in flags.values():
        for word in taken:
            plan.replace(*_word_or_its_line(plan.source, word.start_byte, word.end_byte), "")
    plan.report(
        launch.entry.rule,
        launch.module_node,
        Severity.INFO,
        f"dropped --config-name={name} (verl's own config of {launch.module}; rlbridge's config stands in "
        "for it, with the settings added)",
    )


def _word_or_its_line(source: bytes, start: int, end: int) -> tuple[int, int]:
    """The span to delete for a word: its whole line when the word stands alone there before a line
    continuation (`    --config-path=config \\`), else the word."""
    line_start = source.rfind(b"\n", 0, start) + 1
    rest = re.match(rb"[ \t]*\\\n", source[end:])
    if source[line_start:start].strip() == b"" and rest is not None:
        return line_start, end + rest.end()
    return start, end


def _is_legacy(token: OverrideToken) -> bool:
    action = rename_table.resolve_config_key(token.key, token.value)
    return action is not None and action.new_key != token.key


def _plan_token(plan: _Plan, token: OverrideToken, launch: Launch, additions: list) -> None:
    action = rename_table.resolve_config_key(token.key, token.value)
    if action is None or not plan.enabled(action.rule):
        return
    shown = f"{token.prefix}{token.key}"
    if token.made_by is not None:  # made by a substitution: the person fixes the substitution
        message = (
            f"{shown} (made by {token.made_by}) is a V0 key: "
            f"{action.message or 'renamed to ' + str(action.new_key)}; change the substitution"
        )
        plan.report(action.rule, token.node, Severity.MANUAL, message)
        plan.marker(action.rule, token.anchor, message)
        return
    if action.action is Action.MANUAL and _asks_for_nothing(token):
        plan.delete_token(token)
        plan.report(
            action.rule,
            token.node,
            Severity.WARNING,
            f"deleted {shown}={token.value}: verl's default, which leaves the feature off (rlbridge accepts it as a no-op)",
        )
        return
    if action.action is Action.MANUAL:
        plan.report(action.rule, token.node, Severity.MANUAL, f"{shown}: {action.message}")
        plan.marker(action.rule, token.anchor, f"{shown}: {action.message}")
        return
    if action.action is Action.DELETE:
        plan.delete_token(token)
        plan.report(action.rule, token.node, Severity.WARNING, f"deleted {shown}: {action.message}")
        return
    severity = Severity.WARNING if action.action is Action.CAVEAT else Severity.INFO
    if action.new_value is not None:  # the value is known (else the row is manual): the word is rewritten whole
        word = f"{token.prefix}{action.new_key}={action.new_value}"
        written = plan.source[token.node.start_byte : token.node.end_byte].decode("utf-8", "replace")
        variable = " (the value the script gives its variable; the word no longer reads it)" if "$" in written else ""
        plan.replace(token.node.start_byte, token.node.end_byte, word)
        plan.report(action.rule, token.node, severity, f"{shown}={token.value} -> {word}{variable}: {action.message}")
    elif action.new_key != token.key:
        if token.key_span is None:
            message = f"{shown} -> {action.new_key}: the key is split across quotes; rename it by hand"
            plan.report(action.rule, token.node, Severity.MANUAL, message)
            plan.marker(action.rule, token.anchor, message)
            return
        plan.replace(*token.key_span, action.new_key)
        why = f": {action.message}" if action.action is Action.CAVEAT else ""
        plan.report(action.rule, token.node, severity, f"{shown} -> {token.prefix}{action.new_key}{why}")
    elif action.message:
        plan.report(action.rule, token.node, severity, f"{shown}: {action.message}")
    additions.extend((key, value, action.rule) for key, value in action.also_set)


def _asks_for_nothing(token: OverrideToken) -> bool:
    """A key that needs a person, set to a value that leaves its feature off (null, empty, verl's
    default): rlbridge's entrypoint notes it as a no-op, so the word can go (`shims.config`)."""
    return token.value is not None and token.prefix != "~" and asks_for_nothing(token.value, token.key)


def _plan_keep_on_v0(plan: _Plan, launch: Launch, additions: list) -> None:
    for token in launch.all_tokens():
        feature = rename_table.v0_only_feature(token.key)
        if feature is None or token.prefix == "~" or not plan.enabled(feature.rule):
            continue
        state = feature.is_on(token.value)
        if state is False:
            continue
        if state is None:
            message = (
                f"{token.key} is set from a variable; if it enables {feature.name}, add "
                f"{rename_table.KEEP_ON_V0_KEY}=false: {feature.reason}"
            )
            plan.report(feature.rule, token.node, Severity.MANUAL, message)
            plan.marker(feature.rule, token.anchor, message)
            continue
        message = (
            f"kept on V0 with {rename_table.KEEP_ON_V0_KEY}=false: {feature.reason}; "
            f"remove it once V1 supports {feature.name}"
        )
        plan.report(feature.rule, token.node, Severity.WARNING, message)
        plan.marker(feature.rule, launch.anchor, message)
        additions.append((rename_table.KEEP_ON_V0_KEY, "false", feature.rule))


# --------------------------------------------------------------------------- entry point


def migrate_shell(text: str, selection: RuleSelection = ALL_RULES) -> MigrationResult:
    """Migrate one bash script. A script tree-sitter rejects is parsed masked, else scanned; the
    result must still be accepted (by tree-sitter, or by `bash -n` for a script it rejected)."""
    source = text.encode("utf-8")
    tree = parse_bash(shell_words.masked_for_parsing(source))
    parsed = not tree.root_node.has_error
    findings: list[Finding] = []
    if parsed:
        launches = find_all_launches(tree, source)
    else:
        line = first_error_line(tree)
        launches = scanned_launches(source)
        findings.append(
            Finding(
                "parse",
                line,
                Severity.WARNING,
                f"tree-sitter-bash cannot parse this script (line {line}); its launches were "
                "found by splitting words, so launches inside heredocs or odd syntax may be missed",
            )
        )
    plan = _Plan(source, selection)
    for launch in launches:
        _plan_launch(plan, launch)
    migrated = apply_edits(source, plan.edits)
    findings = sorted([*findings, *plan.findings], key=lambda f: f.line)
    if migrated != source and not _still_valid(migrated, parsed, source):
        return MigrationResult(
            text,
            text,
            (
                *findings,
                Finding(
                    "internal",
                    1,
                    Severity.ERROR,
                    "the rewritten script would not parse; left untouched (a codemods bug: please report)",
                ),
            ),
        )
    return MigrationResult(text, migrated.decode("utf-8"), tuple(findings))


def _still_valid(migrated: bytes, parsed: bool, original: bytes) -> bool:
    if parsed:
        return not parse_bash(shell_words.masked_for_parsing(migrated)).root_node.has_error
    bash = shutil.which("bash")
    if bash is None:  # no bash to ask: accept only edits that did not add tree-sitter errors
        return _error_count(migrated) <= _error_count(original)
    return subprocess.run([bash, "-n"], input=migrated, capture_output=True).returncode == 0


def _error_count(source: bytes) -> int:
    return sum(1 for node in _walk(parse_bash(source).root_node, "ERROR"))
