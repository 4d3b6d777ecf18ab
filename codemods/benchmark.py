"""Time the migration of the launch-script corpus: `python -m codemods.benchmark [DIR]`.

Copies the corpus to a temporary directory, migrates it through the CLI path (discovery, read,
migrate, atomic write) and prints the wall time. The target is under 3 s on 2 CPU cores.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from codemods.engine import run
from codemods.rules import RuleSelection

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "old_scripts"


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv else DEFAULT_CORPUS
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / "corpus"
        shutil.copytree(corpus, work)
        started = time.perf_counter()
        summary = run([work], RuleSelection(), write=True)
        elapsed = time.perf_counter() - started
    changed = sum(o.status == "changed" for o in summary.outcomes)
    print(
        f"migrated {len(summary.outcomes)} files ({changed} changed) in {elapsed:.2f} s "
        f"(cold start: includes loading tree-sitter and Hydra's parser)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
