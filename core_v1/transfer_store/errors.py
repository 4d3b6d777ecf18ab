"""Exceptions raised by the transfer store.

Each one names the problem and the fix in one line. They derive from the builtin exception a
caller would naturally catch (`KeyError`, `ValueError`, `TimeoutError`) as well as from
`TransferStoreError`, so both `except KeyError` and `except TransferStoreError` work. The Ray
client re-raises them unchanged (not wrapped in `RayTaskError`).
"""

from __future__ import annotations


class TransferStoreError(Exception):
    """Base class of every error the transfer store raises on purpose."""


class InvalidKeyError(TransferStoreError, ValueError):
    """A row key (or a uid / session id / index used to build one) is malformed."""


class InvalidRowError(TransferStoreError, ValueError):
    """A row's fields or tags are malformed (bad field name, tags not a dict, unknown status...)."""


class DuplicateKeyError(TransferStoreError, KeyError):
    """A put would replace a live row without `overwrite=True`, or one call names a key twice."""

    def __str__(self) -> str:  # KeyError would repr() the message and add quotes
        return str(self.args[0])


class MissingKeyError(TransferStoreError, KeyError):
    """A key is not live in the partition (never put, or already consumed / evicted)."""

    def __str__(self) -> str:
        return str(self.args[0])


class MissingFieldError(TransferStoreError, KeyError):
    """A requested field is absent from a row."""

    def __str__(self) -> str:
        return str(self.args[0])


class FieldAssemblyError(TransferStoreError, ValueError):
    """The values of one field cannot be batched together (mixed kinds, dtypes or trailing shapes)."""


class AccountingError(TransferStoreError, RuntimeError):
    """The counters do not prove that every row put was consumed or evicted exactly once."""


class StoreTimeoutError(TransferStoreError, TimeoutError):
    """A `wait_for` / `await_rows` predicate stayed falsy until its timeout."""


class StoreStateError(TransferStoreError, RuntimeError):
    """An operation does not fit the store's state (e.g. `load` into a store already in use)."""
