"""The one way user code enters a run: `load_object("path/to/file.py:Name")` or `"package.module:Name"`.

Plug-ins, reward functions, samplers, agent loops named in YAML and function-tool files all come
in here, so they share one behaviour:

- A `.py` file is imported under a name derived from its resolved path
  (`_rlbridge_user_<stem>_<sha1 of the path>`). The same file is one module in the driver and in
  every Ray worker (sha1 is the same in every process, unlike `hash()`), importing it twice reuses
  the module (its registrations run once), and two files with one stem never collide.
- A dotted name is imported with `importlib` from the installed packages and `PYTHONPATH`;
  `sys.path` is never edited. A name relative to a YAML file (`_target_: my_loop.MyLoop` next to
  the YAML) is looked up as a file in that folder first (`load_target`).
- Every failure (missing file, module, attribute, or an exception while importing) is one
  `PluginError` line naming the entry, the config key it came from and the cause.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Optional

from core_v1.errors import UserError


class PluginError(UserError, ImportError):
    """User code cannot be loaded; the message names the entry, its config key and the cause."""


def load_object(spec: str, *, key: Optional[str] = None, error: type[Exception] = PluginError) -> Any:
    """The object `spec` names: `"path/to/file.py:Name"` or `"package.module:Name"`.

    `key` is the config key the spec came from (named in messages); `error` is the exception type
    raised, so each extension point keeps its own user-error type.
    """
    module_ref, sep, name = str(spec).rpartition(":")
    if not sep or not module_ref or not name or _is_drive_letter(module_ref):
        raise error(f"{spec!r}{_from(key)} must be 'path/to/file.py:Name' or 'package.module:Name'")
    return _attribute(load_module(module_ref, key=key, error=error), name, spec, key, error)


def load_verl_object(
    module_path: str, name: str, *, key: Optional[str] = None, error: type[Exception] = PluginError
) -> Any:
    """An object named the way verl's config pairs name one (`custom_cls.{path,name}`,
    `sampler.{class_path,class_name}`): `module_path` a `.py` file or a module, either with verl's
    `file://` / `pkg://` prefix (`pkg://a/b` is module `a.b`)."""
    path = str(module_path)
    if path.startswith("file://"):
        path = path[len("file://") :]
    elif path.startswith("pkg://"):
        path = path[len("pkg://") :].replace("/", ".")
    return load_object(f"{path}:{name}", key=key, error=error)


def load_module(ref: str, *, key: Optional[str] = None, error: type[Exception] = PluginError) -> ModuleType:
    """The module `ref` names: a `.py` file path (anything with `/` or ending in `.py`) or a dotted name."""
    ref = str(ref)
    if is_file_reference(ref):
        return load_file(Path(ref), key=key, error=error)
    try:
        return importlib.import_module(ref)
    except Exception as cause:
        raise error(f"cannot import module {ref!r}{_from(key)}: {_cause(cause)}") from None


def load_target(
    target: str, *, relative_to: Path, key: Optional[str] = None, error: type[Exception] = PluginError
) -> Any:
    """A `_target_`-style name from a config file: `file.py:Name`, `module:Name` or `module.Name`.

    A module part that is a file in `relative_to` (the config file's folder) loads that file, so
    `_target_: my_loop.MyLoop` finds `my_loop.py` beside the YAML without touching `sys.path`.
    """
    target = str(target)
    if ":" in target:
        module_ref, _, name = target.rpartition(":")
    else:
        module_ref, _, name = target.rpartition(".")
    if not module_ref or not name:
        raise error(f"{target!r}{_from(key)} must be 'module.Name', 'module:Name' or 'file.py:Name'")
    sibling = _sibling_file(module_ref, Path(relative_to))
    if sibling is not None and not _importable_as(module_ref, sibling):
        module_ref = str(sibling)  # importable by name, it stays one module with what else imports it
    elif is_file_reference(module_ref) and not Path(module_ref).expanduser().is_absolute():
        module_ref = str(Path(relative_to) / module_ref)
    return _attribute(load_module(module_ref, key=key, error=error), name, target, key, error)


def load_file(path: Path, *, key: Optional[str] = None, error: type[Exception] = PluginError) -> ModuleType:
    """Import a `.py` file once per process, under its stable path-derived name."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise error(f"file {str(path)!r}{_from(key)} does not exist")
    name = module_name_for(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing: the file's dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except Exception as cause:
        del sys.modules[name]
        if isinstance(cause, error):
            raise
        raise error(f"importing {path}{_from(key)} failed: {_cause(cause, importer=path)}") from None
    return module


def module_name_for(path: Path) -> str:
    """The module name a user file gets in every process: its stem plus a digest of its resolved path."""
    path = Path(path).expanduser().resolve()
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() or c == "_" else "_" for c in path.stem)
    return f"_rlbridge_user_{stem}_{digest}"


def is_file_reference(ref: str) -> bool:
    return ref.endswith(".py") or "/" in ref or "\\" in ref


def _sibling_file(module_ref: str, folder: Path) -> Optional[Path]:
    if is_file_reference(module_ref) or not module_ref.replace(".", "").replace("_", "").isalnum():
        return None
    candidate = folder.joinpath(*module_ref.split(".")).with_suffix(".py")
    return candidate if candidate.is_file() else None


def _importable_as(module_ref: str, file: Path) -> bool:
    try:
        spec = importlib.util.find_spec(module_ref)
    except (ImportError, ValueError):
        return False
    return bool(spec and spec.origin) and Path(spec.origin).resolve() == file.resolve()


def _attribute(module: ModuleType, name: str, spec: str, key: Optional[str], error: type[Exception]) -> Any:
    obj = module
    for part in name.split("."):
        if not hasattr(obj, part):
            where = getattr(module, "__file__", None) or module.__name__
            raise error(f"{spec!r}{_from(key)}: {where} has no {name!r}")
        obj = getattr(obj, part)
    return obj


def _from(key: Optional[str]) -> str:
    return f" ({key})" if key else ""


def _cause(cause: BaseException, importer: Optional[Path] = None) -> str:
    """One line for `cause`; a missing module also gets the fix, which depends on where it is."""
    text = f"{type(cause).__name__}: {cause}"
    if isinstance(cause, ModuleNotFoundError) and cause.name:
        text += _missing_module_fix(cause.name.split(".")[0], importer)
    return text.splitlines()[0] if text else type(cause).__name__


def _missing_module_fix(top: str, importer: Optional[Path]) -> str:
    folder = importer.parent if importer is not None else None
    if folder is not None and ((folder / f"{top}.py").is_file() or (folder / top).is_dir()):
        return (
            f" ({top} is beside {importer.name}, but a user file is not imported from its own folder: "
            f"add {folder} to PYTHONPATH)"
        )
    return (
        f" (no installed package and no PYTHONPATH folder provides {top!r}: pip install the package "
        f"that does, or add the folder that holds {top} to PYTHONPATH)"
    )


def _is_drive_letter(module_ref: str) -> bool:
    return len(module_ref) == 1 and module_ref.isalpha()  # "C:\\x.py" without a name
