"""Checks on migrated files that do not trust the engines that migrated them.

Used by `benchmarks/migrate_corpus.py` (on verl's own scripts) and by the tests (on ours):

- `unmarked_shell_keys(text)`: every override word `key=value` on a code line of a script whose
  key the rename table still resolves to a new home, or to a person's decision, and which no
  `TODO(migrate:...)` marker in the file names. A plain scan of words, independent of the shell
  engine's parser, so a launch the engine failed to find shows up here.
- `unmarked_yaml_keys(text)`: the same for the leaves of a trainer YAML config.
- `unresolved_imports(text)`: imports of rlbridge's packages in Python code that do not import.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings

from shims import rename_table

_OVERRIDE_WORD = re.compile(r"""(?:^|[\s"'(])([+~]{0,2})([A-Za-z_][\w\-]*(?:\.[\w\-]+)+)=""")
OUR_PACKAGES = ("legacy_v0", "core_v1", "shims")


def is_legacy(key: str, value: str | None) -> bool:
    """True when the rename table gives `key` a different home or asks a person to decide."""
    action = rename_table.resolve_config_key(key, value)
    return action is not None and action.new_key != key


def _markers(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "TODO(migrate:" in line)


def unmarked_shell_keys(text: str) -> list[str]:
    """Legacy override words on code lines (not comments) that no marker in the file names."""
    markers = _markers(text)
    left = []
    for line in text.splitlines():
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        for match in _OVERRIDE_WORD.finditer(code):
            key = match.group(2)
            rest = code[match.end() :].split()
            value = rest[0].strip("\"'\\") if rest else None
            if is_legacy(key, value or None) and key not in markers:
                left.append(key)
    return left


def unmarked_yaml_keys(text: str) -> list[str]:
    """Legacy leaves of a trainer config that no marker in the file names."""
    from ruamel.yaml import YAML

    from codemods.yaml_config import looks_like_trainer_config

    data = YAML(typ="safe").load(text)
    if not looks_like_trainer_config(data):
        return []
    markers, left = _markers(text), []

    def walk(node: dict, prefix: str) -> None:
        for key, value in node.items():
            dotted = f"{prefix}{key}"
            if isinstance(value, dict) and value:
                walk(value, dotted + ".")
            elif dotted not in markers and is_legacy(
                dotted, None if isinstance(value, (dict, list)) else rename_table.normalize_value(value)
            ):
                left.append(dotted)

    walk(data, "")
    return left


def unresolved_imports(text: str) -> list[str]:
    """Imports of rlbridge's packages in migrated code that do not import here."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    missing = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            targets = [(node.module, alias.name) for alias in node.names]
        else:
            continue
        for module, name in targets:
            if module.split(".")[0] in OUR_PACKAGES and not imports(module, name):
                missing.append(module if name is None else f"{module}.{name}")
    return missing


def imports(module: str, name: str | None = None) -> bool:
    """True when `import module` (and `from module import name`) work here."""
    try:
        with warnings.catch_warnings():  # legacy_v0 warns that it is deprecated on import
            warnings.simplefilter("ignore")
            imported = importlib.import_module(module)
    except ImportError:
        return False
    if name is None or name == "*" or hasattr(imported, name):
        return True
    try:
        importlib.import_module(f"{module}.{name}")
        return True
    except ImportError:
        return False
