"""Does a dotted name exist in rlbridge? Answered from the source, without importing it.

The Python engine rewrites an import only to a name this module says exists; anything else keeps
its verl import and gets a marker. Importing the targets to check them would load torch and run
module side effects for every migrated file, so the answer comes from reading the modules with
`ast`: a module exists when its file does; a name exists in a module when the module binds it at
top level (def, class, assignment, import, `from ... import *` of a module that binds it, or a
submodule of a package). A module that defines `__getattr__` is not trusted for names it does not
bind: such a name is reported missing, so the worst case is a marker where a rewrite would have
worked, never a rewrite to a name that does not exist. `tests/codemods/test_python_names.py`
checks the answers against real imports.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path


@functools.lru_cache(maxsize=None)
def module_file(module: str) -> Path | None:
    """The source file of `module` (a package's `__init__.py`), found without importing it."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)  # a top-level lookup runs no package code
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        return None
    path = Path(spec.origin)
    if not rest:
        return path
    if path.name != "__init__.py":
        return None  # a plain module has no submodules
    base = path.parent.joinpath(*rest.split("."))
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


@functools.lru_cache(maxsize=None)
def _bound_names(module: str) -> frozenset[str]:
    """Names `module` binds at top level, following star imports of other modules."""
    path = module_file(module)
    if path is None:
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in tree.body:
        names |= _names_bound_by(node, package)
    return frozenset(names)


def _names_bound_by(node: ast.stmt, package: str) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
    if isinstance(node, ast.Import):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        source = _absolute(node, package)
        if any(alias.name == "*" for alias in node.names):
            return set(_bound_names(source)) if source else set()
        return {alias.asname or alias.name for alias in node.names}
    if isinstance(node, (ast.If, ast.Try)):
        found: set[str] = set()
        for child in [
            *node.body,
            *getattr(node, "orelse", []),
            *getattr(node, "finalbody", []),
            *[s for handler in getattr(node, "handlers", []) for s in handler.body],
        ]:
            found |= _names_bound_by(child, package)
        return found
    return set()


def _absolute(node: ast.ImportFrom, package: str) -> str | None:
    if not node.level:
        return node.module
    parts = package.split(".")
    if node.level - 1 > len(parts):
        return None
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def exists(qualified_name: str) -> bool:
    """True when `qualified_name` is a module, or a name bound by its module, in an installed package."""
    if module_file(qualified_name) is not None:
        return True
    module, _, name = qualified_name.rpartition(".")
    return bool(module) and module_file(module) is not None and name in _bound_names(module)
