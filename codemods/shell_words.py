"""The shell engine's help for scripts tree-sitter-bash cannot parse (but bash can).

Two steps, tried in order by `codemods.shell`:

1. `masked_for_parsing(source)`: the same bytes with constructs tree-sitter rejects and bash
   accepts replaced by harmless bytes of the same length, so every offset in the masked copy is
   an offset in the real script. Masked today: brackets in a `${VAR:-default}` default
   (`${TEST_FILE:-["/path"]}`), the inside of `$((...))` there, and a backslash that continues the
   last line into the end of the file.
2. `scan(source)`: a word splitter that follows bash's quoting rules (quotes, `\\`, `$(...)`,
   `${...}`, backticks, comments, line continuations) and returns the simple commands and the
   array and string assignments, each word with its byte span and literal text. It knows no
   grammar (no `if`, no heredoc bodies), which is why it is the fallback and not the parser.

Words and spans are shaped like the tree-sitter node attributes the planner reads
(`start_byte`, `end_byte`, `start_point.row`), so one planner serves both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_DEFAULT_WITH_BRACKETS = re.compile(rb"\$\{[A-Za-z_]\w*:?[-=+?]")
_NAME_ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)(\+?=)")
_SEPARATORS = (b"&&", b"||", b";;", b";", b"|", b"&", b"\n")


@dataclass(frozen=True)
class Point:
    row: int
    column: int = 0


@dataclass(frozen=True)
class Span:
    """A byte range of the script and the 0-based row it starts on."""

    start_byte: int
    end_byte: int
    start_point: Point


def span(source: bytes, start: int, end: int) -> Span:
    return Span(start, end, Point(source.count(b"\n", 0, start)))


# --------------------------------------------------------------------------- masking


def masked_for_parsing(source: bytes) -> bytes:
    """`source` with bash-only constructs replaced byte for byte (offsets unchanged)."""
    data = bytearray(source)
    for match in _DEFAULT_WITH_BRACKETS.finditer(source):
        end = _closing_brace(source, match.end())
        for index in range(match.end(), end):
            if data[index] in b"[]":
                data[index] = ord("_")
        _mask_arithmetic(data, source, match.end(), end)
    stripped = len(source.rstrip())
    if stripped and source[stripped - 1 : stripped] == b"\\":
        data[stripped - 1] = ord(" ")
    return bytes(data)


def _mask_arithmetic(data: bytearray, source: bytes, start: int, end: int) -> None:
    """`$((...))` in a default, whose inner parentheses tree-sitter rejects (`${N:-$(((a + b) * 2))}`):
    its inside becomes `0` and blanks. The reader evaluates the real text (`ShellWords`)."""
    index = source.find(b"$((", start, end)
    while index != -1:
        depth, cursor = 0, index + 1
        while cursor < end:
            depth += {ord("("): 1, ord(")"): -1}.get(source[cursor], 0)
            cursor += 1
            if depth == 0:
                break
        if depth == 0 and source[cursor - 2 : cursor] == b"))" and cursor - index > 5:
            data[index + 3 : cursor - 2] = b"0" + b" " * (cursor - index - 6)
        index = source.find(b"$((", cursor, end)


def _closing_brace(source: bytes, start: int) -> int:
    depth, index = 1, start
    while index < len(source) and depth:
        if source[index : index + 2] == b"${":
            depth, index = depth + 1, index + 2
            continue
        if source[index : index + 1] == b"}":
            depth -= 1
        index += 1
    return index - 1 if not depth else start


# --------------------------------------------------------------------------- scanning


@dataclass
class Word:
    """One shell word: its span, its literal prefix (as `codemods.shell.LiteralText` reads it),
    and the array or variable it expands when it is exactly `"${NAME[@]}"` or `$NAME`."""

    start_byte: int
    end_byte: int
    start_point: Point
    text: str
    complete: bool
    verbatim_start: int
    verbatim_length: int
    array: str | None = None
    variable: str | None = None


@dataclass
class Command:
    words: list[Word]
    anchor: Span  # the statement's first word: a marker goes above its first line


@dataclass
class Scanned:
    commands: list[Command] = field(default_factory=list)
    arrays: dict[str, list[tuple[Span, Word]]] = field(default_factory=dict)  # name -> (statement, element)
    strings: dict[str, list[tuple[Span, Word]]] = field(default_factory=dict)  # name -> (statement, value word)


class _Scanner:
    def __init__(self, source: bytes):
        self.source = source
        self.at = 0

    def peek(self, n: int = 1) -> bytes:
        return self.source[self.at : self.at + n]

    def skip_blanks(self) -> None:
        while self.at < len(self.source):
            if self.peek() in (b" ", b"\t", b"\r"):
                self.at += 1
            elif self.peek(2) == b"\\\n":
                self.at += 2
            elif self.peek() == b"#":
                end = self.source.find(b"\n", self.at)
                self.at = len(self.source) if end == -1 else end
            else:
                return

    def separator(self) -> bytes | None:
        return next((s for s in _SEPARATORS if self.source.startswith(s, self.at)), None)

    def word_end(self) -> int:
        """The end of the word starting here, following quotes and expansions."""
        source, index = self.source, self.at
        while index < len(source):
            char = source[index : index + 1]
            if char in b" \t\r\n;&|()<>" and not (
                char == b"(" and index > self.at and source[index - 1 : index] == b"="
            ):
                if char in b"()" and index == self.at:
                    return index + 1
                break
            if char == b"\\":
                index += 2
            elif char == b"'":
                index = _after(source, index + 1, b"'")
            elif char == b'"':
                index = _after_double_quoted(source, index + 1)
            elif char == b"`":
                index = _after(source, index + 1, b"`")
            elif source.startswith(b"$(", index) or source.startswith(b"${", index):
                index = _after_group(source, index + 1)
            else:
                index += 1
        return min(index, len(source))


def _after(source: bytes, index: int, closing: bytes) -> int:
    end = source.find(closing, index)
    return len(source) if end == -1 else end + 1


def _after_double_quoted(source: bytes, index: int) -> int:
    while index < len(source):
        char = source[index : index + 1]
        if char == b"\\":
            index += 2
        elif char == b'"':
            return index + 1
        elif source.startswith(b"$(", index) or source.startswith(b"${", index):
            index = _after_group(source, index + 1)
        else:
            index += 1
    return len(source)


def _after_group(source: bytes, index: int) -> int:
    """From the `(` or `{` at `index`, the offset after its matching close."""
    opening = source[index : index + 1]
    closing = b")" if opening == b"(" else b"}"
    depth, index = 1, index + 1
    while index < len(source) and depth:
        char = source[index : index + 1]
        if char == b"\\":
            index += 2
            continue
        if char == b"'" and opening == b"(":
            index = _after(source, index + 1, b"'")
            continue
        if char == b'"':
            index = _after_double_quoted(source, index + 1)
            continue
        if char == b"`":
            index = _after(source, index + 1, b"`")
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
        index += 1
    return index


def make_word(source: bytes, start: int, end: int) -> Word:
    """A Word with its literal prefix read as `codemods.shell.literal_text` reads a tree node."""
    raw = source[start:end]
    text, complete, verbatim_start, verbatim_length = _literal(source, start, end)
    array = variable = None
    inner = raw[1:-1] if len(raw) >= 2 and raw[:1] == raw[-1:] == b'"' else raw
    match = re.fullmatch(rb"\$\{([A-Za-z_]\w*)\[[@*]\]\}", inner)
    if match:
        array = match.group(1).decode()
    match = re.fullmatch(rb"\$(?:\{([A-Za-z_]\w*)\}|([A-Za-z_]\w*))", inner)
    if match:
        variable = (match.group(1) or match.group(2)).decode()
    return Word(
        start,
        end,
        Point(source.count(b"\n", 0, start)),
        text,
        complete,
        verbatim_start,
        verbatim_length,
        array,
        variable,
    )


def _literal(source: bytes, start: int, end: int) -> tuple[str, bool, int, int]:
    """(literal prefix, whole word literal, first verbatim piece start, its length)."""
    pieces: list[tuple[int, int]] = []
    index = start
    while index < end:
        char = source[index : index + 1]
        if char == b"'":
            close = min(_after(source, index + 1, b"'"), end)
            pieces.append((index + 1, close - 1))
            index = close
            continue
        if char == b'"':
            stop = index + 1
            while stop < end and source[stop : stop + 1] not in (b'"', b"$", b"\\", b"`"):
                stop += 1
            pieces.append((index + 1, stop))
            if source[stop : stop + 1] != b'"':
                return _joined(source, pieces, False)
            index = stop + 1
            continue
        if char in (b"$", b"\\", b"`"):
            return _joined(source, pieces, False)
        stop = index
        while stop < end and source[stop : stop + 1] not in (b"'", b'"', b"$", b"\\", b"`"):
            stop += 1
        pieces.append((index, stop))
        index = stop
    return _joined(source, pieces, True)


def _joined(source: bytes, pieces: list[tuple[int, int]], complete: bool) -> tuple[str, bool, int, int]:
    text = b"".join(source[a:b] for a, b in pieces).decode("utf-8", "replace")
    first = pieces[0] if pieces else (0, 0)
    return text, complete, first[0], first[1] - first[0]


def scan(source: bytes) -> Scanned:
    """Split the script into simple commands and array/string assignments (no grammar)."""
    scanner, scanned = _Scanner(source), Scanned()
    words: list[Word] = []
    while True:
        scanner.skip_blanks()
        if scanner.at >= len(source) or scanner.separator() is not None:
            _finish_command(source, words, scanned)
            words = []
            if scanner.at >= len(source):
                return scanned
            scanner.at += len(scanner.separator())
            continue
        end = scanner.word_end()
        if end <= scanner.at:
            scanner.at += 1
            continue
        word = make_word(source, scanner.at, end)
        scanner.at = end
        if word.text.endswith("=(") or (
            not words and _NAME_ASSIGNMENT.match(word.text) and source[end - 1 : end] == b"("
        ):
            _read_array(scanner, word, scanned)
            continue
        words.append(word)


def _read_array(scanner: _Scanner, head: Word, scanned: Scanned) -> None:
    """`NAME=(` was read: collect the element words up to the closing `)`."""
    name = _NAME_ASSIGNMENT.match(head.text).group(1)
    statement = Span(head.start_byte, head.end_byte, head.start_point)
    elements = scanned.arrays.setdefault(name, [])
    while scanner.at < len(scanner.source):
        scanner.skip_blanks()
        if scanner.peek() == b"\n":
            scanner.at += 1
            continue
        if scanner.peek() == b")":
            scanner.at += 1
            return
        end = scanner.word_end()
        if end <= scanner.at:
            scanner.at += 1
            continue
        elements.append((statement, make_word(scanner.source, scanner.at, end)))
        scanner.at = end


def _finish_command(source: bytes, words: list[Word], scanned: Scanned) -> None:
    """Record a command; leading `NAME=value` words are assignments (strings) and env prefixes."""
    if not words:
        return
    anchor = Span(words[0].start_byte, words[0].end_byte, words[0].start_point)
    index = 0
    while index < len(words):
        match = _NAME_ASSIGNMENT.match(words[index].text)
        if match is None:
            break
        value_start = words[index].start_byte + len(match.group(0).encode())
        value = make_word(source, value_start, words[index].end_byte)
        scanned.strings.setdefault(match.group(1), []).append((anchor, value))
        index += 1
    if index < len(words):
        scanned.commands.append(Command(words, anchor))
