"""Fixture pairs for the codemod rules: tests/fixtures/codemods/<kind>/<rule>/.

Each directory (`<rule>` or `<rule>--<case>`) holds `input.<kind>`, `expected.<kind>` (what the tool must write) and
`findings.txt` (one `LINE SEVERITY RULE` per expected finding, in report order). Run this file to
regenerate `expected.*` and `findings.txt` from the current engines after a deliberate change,
then review the diff like code:

    .venv/bin/python tests/codemods/codemod_fixtures.py [sh/entrypoint ...]
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

FIXTURE_ROOT = Path(__file__).resolve().parents[1] / "fixtures" / "codemods"


@dataclass(frozen=True)
class FixturePair:
    kind: str
    rule: str
    directory: Path

    @property
    def input_path(self) -> Path:
        return self.directory / f"input.{self.kind}"

    @property
    def expected_path(self) -> Path:
        return self.directory / f"expected.{self.kind}"

    @property
    def findings_path(self) -> Path:
        return self.directory / "findings.txt"

    def __str__(self) -> str:
        return f"{self.kind}/{self.directory.name}"


def fixture_pairs() -> list[FixturePair]:
    """One pair per directory; `<rule>--<case>` names a further case of that rule."""
    return [
        FixturePair(kind_dir.name, rule_dir.name.split("--")[0], rule_dir)
        for kind_dir in sorted(FIXTURE_ROOT.iterdir())
        if kind_dir.is_dir()
        for rule_dir in sorted(kind_dir.iterdir())
        if rule_dir.is_dir()
    ]


def finding_lines(findings) -> list[str]:
    return [f"{f.line} {f.severity.value} {f.rule}" for f in findings]


def regenerate(only: list[str]) -> None:
    sys.path.insert(0, str(FIXTURE_ROOT.parents[2]))
    from codemods.migrate import migrate_text

    for pair in fixture_pairs():
        if only and str(pair) not in only:
            continue
        result = migrate_text(pair.input_path.read_text(encoding="utf-8"), pair.kind)
        pair.expected_path.write_text(result.migrated, encoding="utf-8")
        pair.findings_path.write_text("".join(line + "\n" for line in finding_lines(result.findings)), encoding="utf-8")
        print(f"{pair}: {len(result.findings)} findings")


if __name__ == "__main__":
    regenerate(sys.argv[1:])
