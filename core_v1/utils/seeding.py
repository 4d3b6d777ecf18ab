"""Seeds derived from names, so a sample's randomness depends on *what* it is (run seed, prompt
group, session, turn), never on scheduling order or on which replica served it."""

from __future__ import annotations

import hashlib


def derive_seed(*parts: object) -> int:
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def derive_uid(*parts: object) -> str:
    """A 16-hex-digit prompt-group id, reproducible from the run seed and the submission number."""
    return hashlib.sha256("\x1f".join(map(str, parts)).encode()).hexdigest()[:16]
