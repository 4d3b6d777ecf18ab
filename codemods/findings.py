"""The records every engine returns: findings (one report line each) and per-file results."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Severity(str, enum.Enum):
    """How much a finding asks of the user."""

    INFO = "INFO"  # a mechanical rewrite was made
    WARNING = "WARNING"  # rewritten, but the meaning changed or something could not be read
    MANUAL = "MANUAL"  # a person must decide; a TODO(migrate:RULE) marker was left
    ERROR = "ERROR"  # the file could not be migrated and was left untouched


@dataclass(frozen=True)
class Finding:
    """One report line: which rule spoke, where (1-based line of the input), and what it means."""

    rule: str
    line: int
    severity: Severity
    message: str

    def to_json(self) -> dict:
        return {"rule": self.rule, "line": self.line, "severity": self.severity.value, "message": self.message}


@dataclass(frozen=True)
class MigrationResult:
    """What an engine made of one text: the new text (== input when nothing changed) and findings."""

    original: str
    migrated: str
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def changed(self) -> bool:
        return self.migrated != self.original

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)


def marker_text(rule: str, message: str) -> str:
    """The one-line marker a manual finding leaves in a file (comment syntax added by the engine)."""
    return f"TODO(migrate:{rule}): {' '.join(message.split())}"
