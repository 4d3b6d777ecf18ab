"""Finding the files to migrate, telling their kind, reading them safely, and writing atomically."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from codemods.rules import PYTHON, SHELL, YAML

SKIPPED_DIRECTORIES = frozenset(
    {".git", ".venv", "venv", "__pycache__", "node_modules", ".hg", ".tox", ".mypy_cache", ".pytest_cache"}
)
_KIND_BY_SUFFIX = {".sh": SHELL, ".bash": SHELL, ".yaml": YAML, ".yml": YAML, ".py": PYTHON}
_SHELL_INTERPRETERS = ("sh", "bash", "zsh", "dash", "ksh")
_SNIFF_BYTES = 8192


class UnreadableFileError(Exception):
    """A file that cannot be migrated as text; the message says why, for the per-file report."""


@dataclass(frozen=True)
class Candidate:
    """A file to migrate and its kind (`sh`, `yaml`, `py`); `explicit` when named on the command line."""

    path: Path
    kind: str | None
    explicit: bool


def kind_of(path: Path) -> str | None:
    """The file kind by extension, or by a shell shebang for a file without one; None if neither."""
    kind = _KIND_BY_SUFFIX.get(path.suffix.lower())
    if kind is not None or path.suffix:
        return kind
    try:
        with path.open("rb") as handle:
            first_line = handle.readline(256)
    except OSError:
        return None
    return SHELL if _is_shell_shebang(first_line) else None


def _is_shell_shebang(first_line: bytes) -> bool:
    if not first_line.startswith(b"#!"):
        return False
    words = first_line[2:].decode("ascii", "replace").split()
    if not words:
        return False
    program = words[1] if Path(words[0]).name == "env" and len(words) > 1 else words[0]
    return Path(program).name in _SHELL_INTERPRETERS


def discover(paths: list[Path]) -> list[Candidate]:
    """Expand files and directories (recursively, skipping tool and VCS folders) into candidates.

    A file named explicitly is always a candidate (an unknown kind becomes a per-file error); a file
    found in a directory is one only if its kind is known. A missing path is an explicit candidate
    with kind None, so the caller reports it.
    """
    found: list[Candidate] = []
    for path in paths:
        if path.is_dir():
            for root, directories, files in os.walk(path):
                directories[:] = sorted(d for d in directories if d not in SKIPPED_DIRECTORIES)
                for name in sorted(files):
                    file_path = Path(root, name)
                    if file_path.is_symlink() or not file_path.is_file():
                        continue
                    kind = kind_of(file_path)
                    if kind is not None:
                        found.append(Candidate(file_path, kind, explicit=False))
        else:
            found.append(Candidate(path, kind_of(path) if path.is_file() else None, explicit=True))
    return found


def read_text(path: Path) -> str:
    """The file as UTF-8 text; raises UnreadableFileError for missing, binary or non-UTF-8 files."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UnreadableFileError("no such file") from None
    except OSError as error:
        raise UnreadableFileError(f"cannot read: {error.strerror}") from None
    if b"\0" in data[:_SNIFF_BYTES]:
        raise UnreadableFileError("binary file (NUL bytes); left untouched")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise UnreadableFileError(f"not UTF-8 text (bad byte at line {line}); convert it to UTF-8 first") from None


def write_atomically(path: Path, text: str) -> None:
    """Replace the file's content in one rename, keeping its permission bits (scripts stay executable)."""
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".migrate", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
