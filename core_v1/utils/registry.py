"""One registry implementation for every extension point.

Agent loops, trainer modes, advantage estimators, policy losses, reward scorers,
checkpoint-engine backends and codemod rules all register by name through this class, so
they all behave alike: a registration is type-checked, a taken name is never silently
rebound, and asking for an unknown name lists the known ones.
"""

from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

from core_v1.errors import UserError

T = TypeVar("T")


class UnknownNameError(UserError, KeyError):
    """Raised for a name nobody registered; the message lists the known names."""

    def __str__(self) -> str:  # KeyError would repr() the message and add quotes
        return str(self.args[0])


class Registry(Generic[T]):
    """A name -> object table for one kind of plug-in.

    `kind` names the extension point in messages ("agent loop", "trainer mode").
    `base` (a class) or `check` (a predicate) guards what may be registered.
    """

    def __init__(
        self,
        kind: str,
        base: type | None = None,
        check: Callable[[object], bool] | None = None,
        config_key: str | None = None,
    ):
        self.kind = kind
        self._base = base
        self._check = check
        self._config_key = config_key
        self._entries: dict[str, T] = {}

    def register(self, name: str, obj: T | None = None, *, override: bool = False):
        """Register `obj` under `name`; usable as `@registry.register("name")`.

        Re-registering the very same object is a no-op (modules can be imported twice under
        pytest); binding a taken name to a different object needs `override=True`.
        """
        if obj is None:
            return lambda o: self.register(name, o, override=override)
        if not isinstance(name, str) or not name:
            raise TypeError(f"{self.kind} name must be a non-empty string, got {name!r}")
        self._validate(name, obj)
        existing = self._entries.get(name)
        if existing is not None and existing is not obj and not _same_definition(existing, obj) and not override:
            raise ValueError(
                f"{self.kind} {name!r} is already registered to {_describe(existing)}; "
                f"pick another name or pass override=True"
            )
        self._entries[name] = obj
        return obj

    def get(self, name: str) -> T:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownNameError(self.unknown_message(name)) from None

    def unknown_message(self, name: str) -> str:
        known = sorted(self._entries)
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        where = f" (set by {self._config_key})" if self._config_key else ""
        return f"unknown {self.kind} {name!r}{where}. Known: {', '.join(known) or '(none)'}.{hint}"

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def _validate(self, name: str, obj: object) -> None:
        if self._base is not None and not (isinstance(obj, type) and issubclass(obj, self._base)):
            raise TypeError(f"{self.kind} {name!r} must be a subclass of {self._base.__name__}, got {_describe(obj)}")
        if self._check is not None and not self._check(obj):
            raise TypeError(f"{_describe(obj)} cannot be registered as {self.kind} {name!r}")


def _same_definition(a: object, b: object) -> bool:
    # A module executed twice (e.g. a user file loaded by path and then imported) defines a new
    # object with the same qualified name; that is a reload, not a clash.
    return (getattr(a, "__module__", None), getattr(a, "__qualname__", None)) == (
        getattr(b, "__module__", None),
        getattr(b, "__qualname__", None),
    ) and getattr(a, "__qualname__", None) is not None


def _describe(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}.{qualname}" if module and qualname else repr(obj)
