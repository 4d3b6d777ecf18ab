"""User plug-ins: modules imported before a run starts, so the names they register exist.

`trainer.v1.plugins=[my_project.rl_ext, path/to/my_trainer.py]` imports each entry (a module
name, or a `.py` file loaded under a stable name with its folder put on `sys.path`) in the driver
and in every agent-loop worker. Registering there is how a custom trainer mode, advantage
estimator, policy loss, reward scorer, checkpoint backend or agent loop joins a run:
`@register_trainer("my_mode")` in the file, then `trainer.v1.trainer_mode=my_mode`.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterable


class PluginError(ImportError):
    """A plug-in cannot be imported; the message names the entry and the cause."""


def import_plugins(entries: Iterable[str]) -> list[ModuleType]:
    return [import_plugin(str(entry)) for entry in entries or ()]


def import_plugin(entry: str) -> ModuleType:
    if entry.endswith(".py") or "/" in entry:
        return _import_file(Path(entry).expanduser())
    try:
        return importlib.import_module(entry)
    except ImportError as error:
        raise PluginError(f"plug-in {entry!r} (trainer.v1.plugins) cannot be imported: {error}") from None


def _import_file(path: Path) -> ModuleType:
    path = path.resolve()
    if not path.is_file():
        raise PluginError(f"plug-in file {str(path)!r} (trainer.v1.plugins) does not exist")
    # One stable name per file: importing the same file twice (driver, then a worker that shares
    # the process) reuses the module instead of registering its classes again.
    name = f"_rlbridge_plugin_{path.stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
    if name in sys.modules:
        return sys.modules[name]
    folder = str(path.parent)
    if folder not in sys.path:
        sys.path.insert(0, folder)  # the plug-in's own sibling modules import as users expect
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[name]
        raise PluginError(f"importing plug-in {path} failed: {type(error).__name__}: {error}") from None
    return module
