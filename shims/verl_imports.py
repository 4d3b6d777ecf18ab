"""verl's module names, served by what rlbridge carries, in a process where verl is not installed.

A launch copied from verl names verl's code in two places rlbridge reads without migrating: the
`class_name` of each tool / interaction in the YAML files `multi_turn.tool_config_path` and
`.interaction_config_path` name, and the `import verl...` lines of the reward function's file
(`custom_reward_function.path`). Where rlbridge has the thing under another name (a Python row of
`shims.rename_table` whose target exists here), such a name is not an error but a legacy name, as a
moved config key is: `shims.class_paths` prints one line for it at start-up and this module makes
the old name import as the new one.

How: `VerlAliasFinder`, an import hook (`importlib.abc.MetaPathFinder`) first on `sys.meta_path`
that answers for `verl` and its submodules only, and only while real verl is not importable
(`install` does nothing where it is, and verl's own modules load as they are):

- a module whose rename-table target is a module that exists (`verl.tools.gsm8k_tool`,
  `verl.utils.reward_score.math`) is that module: the same object under both names in
  `sys.modules`, so a class loaded by either name is one class, and pickles by its real name;
- a module that is only a prefix of such rows (`verl`, `verl.tools`, `verl.utils.ray_utils`) is an
  empty package whose attributes are looked up in the table on access (`from verl import
  DataProto`, `from verl.utils.ray_utils import get_event_loop`), each only where the target exists;
- anything else (`verl.tools.sandbox_fusion_tools`, a name the table lacks) is not found, as
  without the hook. The start-up check has already refused a file that names one.

Why a hook rather than a rewritten file or an alias table in core_v1's loaders: the names are
imported where the classes are built and the reward is computed, which is not only the driver
(agent-loop workers are Ray actors, and on V1 they build the tools and score), and through Python's
own `import` statements in the user's file, which no loader of ours sees. The hook is carried to
those processes as a plug-in: the start-up check adds `PLUGIN` to `trainer.v1.plugins`, which
core_v1 imports in the driver and in every agent-loop worker before it loads any user code, so core_v1
needs no knowledge of verl or of this layer. `python -m codemods.migrate FILE` rewrites the names
for good, after which neither the line nor the hook is needed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any, Optional, Sequence

from shims import rename_table

ROOT = "verl"
PLUGIN = "shims.verl_imports_plugin"  # imported as a plug-in, it installs the hook in that process


def verl_installed() -> bool:
    """Whether verl's own package is importable here (this module's hook does not count)."""
    loaded = sys.modules.get(ROOT)
    if loaded is not None:
        return not _served_by_us(loaded)
    for finder in sys.meta_path:
        if isinstance(finder, VerlAliasFinder) or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(ROOT, None)
        except (ImportError, ValueError):
            continue
        # A `verl` folder without code on the path (a namespace package: verl's configs and scripts
        # alone) is no verl installation.
        if spec is not None and spec.origin is not None:
            return True
    return False


def served_name(qualified: str) -> Optional[str]:
    """The rlbridge name that `qualified` (a verl module, class or function) is served as, or None
    where the rename table has no target for it or the target does not exist here."""
    action = rename_table.resolve_python_name(qualified)
    if action is None or action.new_name is None:
        return None
    return action.new_name if _exists(action.new_name) else None


def install() -> bool:
    """Put the hook first on `sys.meta_path` (once); nothing where verl is installed. Returns
    whether the hook is installed now."""
    if any(isinstance(finder, VerlAliasFinder) for finder in sys.meta_path):
        return True
    if verl_installed():
        return False
    sys.meta_path.insert(0, VerlAliasFinder())
    return True


def uninstall() -> None:
    """Remove the hook and the modules it served under verl's names (for tests)."""
    sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, VerlAliasFinder)]
    for name in [name for name in sys.modules if name == ROOT or name.startswith(ROOT + ".")]:
        if _served_by_us(sys.modules[name]) or getattr(sys.modules[name], "__name__", name) != name:
            del sys.modules[name]


class VerlAliasFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads verl's module names as described in the module docstring."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != ROOT and not fullname.startswith(ROOT + "."):
            return None
        alias = _module_target(fullname)
        if alias is None and not _is_prefix(fullname):
            return None
        spec = importlib.machinery.ModuleSpec(fullname, self, is_package=alias is None)
        spec.loader_state = alias
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module; exec_module replaces it for an alias

    def exec_module(self, module: ModuleType) -> None:
        alias = module.__spec__.loader_state
        if alias is not None:
            # The import system returns what sys.modules holds after exec_module: the real module.
            sys.modules[module.__name__] = importlib.import_module(alias)
            return
        module.__getattr__ = functools.partial(_table_attribute, module.__name__)


def _table_attribute(package: str, attribute: str) -> Any:
    """`package.attribute` of a served package: the rename table's target, where it exists."""
    if not attribute.startswith("__"):
        target = served_name(f"{package}.{attribute}")
        if target is not None:
            return _import_object(target)
    raise AttributeError(
        f"module {package!r} has no attribute {attribute!r} (verl is not installed here, and "
        "rlbridge has no equivalent of this name)"
    )


def _served_by_us(module: ModuleType) -> bool:
    spec = getattr(module, "__spec__", None)
    return isinstance(getattr(spec, "loader", None), VerlAliasFinder)


@functools.lru_cache(maxsize=None)
def _module_target(fullname: str) -> Optional[str]:
    """The module `fullname` is an alias of, where the table maps it to a module that exists."""
    target = served_name(fullname)
    return target if target is not None and _is_module(target) else None


@functools.lru_cache(maxsize=None)
def _is_prefix(fullname: str) -> bool:
    """Whether some row that has a target lies under `fullname` (a package of verl's served names)."""
    return any(row.old.startswith(fullname + ".") and row.new is not None for row in rename_table.PYTHON_NAME_ROWS)


def _is_module(qualified: str) -> bool:
    try:
        return importlib.util.find_spec(qualified) is not None
    except (ImportError, ValueError):
        return False


def _import_object(qualified: str) -> Any:
    if _is_module(qualified):
        return importlib.import_module(qualified)
    module, _, attribute = qualified.rpartition(".")
    return getattr(importlib.import_module(module), attribute)


def _exists(qualified: str) -> bool:
    """Whether `qualified` names a module here, or an attribute of one (imported to check)."""
    if _is_module(qualified):
        return True
    module, _, attribute = qualified.rpartition(".")
    try:
        return bool(module) and hasattr(importlib.import_module(module), attribute)
    except Exception:  # noqa: BLE001 - a target that does not import is no equivalent
        return False
