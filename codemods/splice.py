"""Byte-offset edits on a source text, applied together; everything outside them stays byte-for-byte.

Used by the shell engine (and by anything else that edits by offset) so that spacing, quoting and
comments around an edit are never re-printed.
"""

from __future__ import annotations

from dataclasses import dataclass


class OverlappingEditsError(RuntimeError):
    """Two edits claim the same bytes: a bug in a rule, never a user error."""


@dataclass(frozen=True)
class Edit:
    """Replace `source[start:end]` by `text`; start == end inserts. `order` keeps insertions at one
    offset in the order they were made."""

    start: int
    end: int
    text: bytes
    order: int = 0


def apply_edits(source: bytes, edits: list[Edit]) -> bytes:
    """Apply non-overlapping edits in one pass; insertions at the same offset keep their order."""
    ordered = sorted(edits, key=lambda e: (e.start, e.end, e.order))
    pieces, cursor = [], 0
    for edit in ordered:
        if edit.start < cursor:
            raise OverlappingEditsError(
                f"edit at bytes {edit.start}:{edit.end} overlaps an earlier one ending at {cursor}"
            )
        pieces.append(source[cursor : edit.start])
        pieces.append(edit.text)
        cursor = edit.end
    pieces.append(source[cursor:])
    return b"".join(pieces)


def line_start(source: bytes, offset: int) -> int:
    """Offset of the first byte of the line holding `offset`."""
    return source.rfind(b"\n", 0, offset) + 1


def line_end(source: bytes, offset: int) -> int:
    """Offset of the newline ending the line holding `offset` (len(source) on the last line)."""
    end = source.find(b"\n", offset)
    return len(source) if end == -1 else end


def indentation(source: bytes, offset: int) -> bytes:
    """The leading blanks of the line holding `offset`."""
    start = line_start(source, offset)
    line = source[start : line_end(source, offset)]
    return line[: len(line) - len(line.lstrip(b" \t"))]


def comment_lines_above(source: bytes, start_of_line: int) -> list[bytes]:
    """The stripped comment lines directly above the line starting at `start_of_line`."""
    found = []
    cursor = start_of_line
    while cursor > 0:
        previous = line_start(source, cursor - 1)
        text = source[previous : cursor - 1].strip()
        if not text.startswith(b"#"):
            break
        found.append(text)
        cursor = previous
    return found
