"""The tool layer's user-facing error (its own module so the sandbox and `BaseTool` can both raise it)."""

from __future__ import annotations

from core_v1.errors import UserError


class ToolConfigError(UserError, ValueError):
    """A tool or tool config file is unusable as written; the message names the fix."""
