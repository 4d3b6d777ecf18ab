"""Exceptions raised by the algorithm functions for mistakes a user can fix.

Both derive from `ValueError`, so code written against verl's `ValueError`s keeps working.
"""

from core_v1.errors import UserError


class AlgorithmConfigError(UserError, ValueError):
    """An algorithm setting is invalid: an unknown mode name, an out-of-range coefficient."""


class AlgorithmInputError(ValueError):
    """The tensors or columns handed to an algorithm function are missing or inconsistent."""
