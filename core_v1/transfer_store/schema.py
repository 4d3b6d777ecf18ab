"""Row keys and the status values of the transfer store (see the package docstring for the spec).

A key is either a *group* key `{uid}` (one prompt and its GRPO group) or a *trajectory* key
`{uid}_{session_id}_{index}` (sample `session_id` of that prompt, output `index` of its agent
loop). Uids are hex strings (`uuid4().hex`), so `_` can separate the parts unambiguously.
"""

from __future__ import annotations

import enum
import re
from typing import NamedTuple

from core_v1.transfer_store.errors import InvalidKeyError

_UID_PATTERN = re.compile(r"[0-9a-fA-F]+")
_TRAJECTORY_PATTERN = re.compile(r"([0-9a-fA-F]+)_(0|[1-9][0-9]*)_(0|[1-9][0-9]*)")


class RowStatus(enum.StrEnum):
    """Values of the `status` tag; the store rejects any other value so a typo cannot hang a wait."""

    RUNNING = "running"  # group row: submitted, its agent loops generate (it keeps this tag until consumed)
    FINISHED = "finished"  # trajectory row: complete and scored
    FAILED = "failed"  # trajectory row: generation or scoring failed; evicted, not trained on


class RowKey(NamedTuple):
    """A parsed key. `session_id` and `index` are None for a group key."""

    uid: str
    session_id: int | None = None
    index: int | None = None

    @property
    def is_group(self) -> bool:
        return self.session_id is None

    def __str__(self) -> str:
        if self.is_group:
            return self.uid
        return f"{self.uid}_{self.session_id}_{self.index}"


def group_key(uid: str) -> str:
    """The key of a prompt group's row: the uid itself."""
    _check_uid(uid)
    return uid


def trajectory_key(uid: str, session_id: int, index: int = 0) -> str:
    """The key of one trajectory: `{uid}_{session_id}_{index}`."""
    _check_uid(uid)
    _check_count("session_id", session_id)
    _check_count("index", index)
    return f"{uid}_{session_id}_{index}"


def parse_key(key: str) -> RowKey:
    """Split a group or trajectory key into its parts; raise InvalidKeyError if it is neither."""
    if not isinstance(key, str):
        raise InvalidKeyError(f"transfer-store key must be a str, got {type(key).__name__} {key!r}")
    if _UID_PATTERN.fullmatch(key):
        return RowKey(key)
    match = _TRAJECTORY_PATTERN.fullmatch(key)
    if match is None:
        raise InvalidKeyError(
            f"malformed transfer-store key {key!r}: expected '{{uid}}' or '{{uid}}_{{session_id}}_{{index}}' "
            f"with a hex uid (uuid4().hex); build keys with group_key() / trajectory_key()"
        )
    uid, session_id, index = match.groups()
    return RowKey(uid, int(session_id), int(index))


def _check_uid(uid: object) -> None:
    if not isinstance(uid, str) or not _UID_PATTERN.fullmatch(uid):
        raise InvalidKeyError(f"uid must be a non-empty hex string such as uuid4().hex (no '-' or '_'), got {uid!r}")


def _check_count(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidKeyError(f"{name} must be a non-negative int, got {value!r}")
