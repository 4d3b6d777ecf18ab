"""What a start-up refuses for keys: `RefusedKey` and `RefusedKeysError`.

Their own module because the legacy-key shim (`shims.config`) and the translation of verl's
async-trainer sections (`shims.async_trainers`), which the shim imports, both raise them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from core_v1.config import ConfigError


@dataclass(frozen=True)
class RefusedKey:
    """One key a start-up refuses: `key` as the command line or the YAML wrote it, `reason` why,
    and `text`, how the error line names it."""

    key: str
    reason: str
    text: str


class RefusedKeysError(ConfigError):
    """A start-up refused for keys (`not supported on rlbridge: ...`, or `legacy key(s) with no
    automatic V1 equivalent: ...`); `keys` lists each, in order. The message may also name
    problems of the files the config names (`refuse_named_files`), which are not keys."""

    def __init__(self, message: str, keys: Sequence[RefusedKey]):
        super().__init__(message)
        self.keys = tuple(keys)
