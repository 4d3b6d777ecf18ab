"""The checks that keep the layout as docs/design.md draws it, run with the suite (so CI runs them):
`lint-imports` (the import contracts in pyproject.toml: the package layers, the layers inside
core_v1, no import cycle, no private name across packages), `ruff check`, `ruff format --check`
(the code as the formatter writes it) and `mypy`, each configured in pyproject.toml."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
CHECKS = {
    "import contracts": [str(BIN / "lint-imports"), "--no-cache"],
    "ruff": [str(BIN / "ruff"), "check", "--no-cache", "."],
    "ruff format": [str(BIN / "ruff"), "format", "--check", "--no-cache", "."],
    "mypy": [str(BIN / "mypy"), "--no-incremental"],
}


def test_import_contracts_lint_and_types_hold():
    failures = []
    for name, command in CHECKS.items():
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            failures.append(f"{name} ({' '.join(command[1:])}) failed:\n{done.stdout[-6000:]}{done.stderr[-2000:]}")
    assert not failures, "\n\n".join(failures)
