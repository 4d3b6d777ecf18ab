"""Exceptions for mistakes a user can fix in a worker's configuration or in the batch handed to it.

Both derive from `ValueError`, like the config and algorithm errors, so callers can catch one
family for "the input was wrong" and let everything else surface as a bug.
"""

from core_v1.errors import UserError


class WorkerConfigError(UserError, ValueError):
    """A worker setting is invalid or incomplete: an unknown dtype, a zero temperature, no step count."""


class BatchLayoutError(ValueError):
    """A batch lacks a field a stage needs, or its fields disagree in shape (see docs/CONTRACTS.md)."""
