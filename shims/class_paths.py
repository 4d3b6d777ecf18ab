"""verl names in the files a config names: judged at start-up by the rename table.

verl's tool and interaction configs (`actor_rollout_ref.rollout.multi_turn.tool_config_path`,
`.interaction_config_path`) name each class as `class_name: module.Class`, and configs copied
from verl name verl's own (`verl.tools.gsm8k_tool.Gsm8kTool`). Where verl is not installed, the
loader could only say "No module named 'verl'"; this shim reads those files first and answers each
verl class path with the Python rows of `shims.rename_table` (the rows `codemods` applies to
imports): a class rlbridge has under another name is named (write that path), one it lacks is one
line saying what is missing and what to write instead. The reward function's file
(`reward.custom_reward_function.path`, or V0's `custom_reward_function.path`) is read the same way
for its `import verl...` lines, so that such a file fails with a line naming the verl module and
what rlbridge has instead, not "No module named 'verl'". Where verl is installed its modules load
as they are, and nothing here speaks.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from shims import rename_table

# The config key naming each file, and the top-level list of `class_name` entries in it.
CLASS_LISTS = {
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "interaction",
}
_UNMAPPED = "rlbridge does not ship verl's modules and has no equivalent of this one"


def verl_class_problems(cfg: DictConfig) -> list[str]:
    """One text per verl class path (in the files `cfg` names) that cannot load here."""
    if importlib.util.find_spec("verl") is not None:
        return []
    problems = []
    for key, top in CLASS_LISTS.items():
        for where, class_name in _class_names(OmegaConf.select(cfg, key, default=None,
                                                               throw_on_resolution_failure=False), top):
            if class_name.split(".")[0] != "verl":
                continue
            action = rename_table.resolve_python_name(class_name)
            if action is not None and action.new_name is not None:
                problems.append(f"{where}: class_name {class_name} is {action.new_name} in rlbridge: write that path")
            else:
                reason = action.row.message if action is not None else _UNMAPPED
                problems.append(f"{where}: verl's class_name {class_name} is not in rlbridge ({key}): {reason}")
    return problems


REWARD_FILE_KEYS = ("reward.custom_reward_function.path", "custom_reward_function.path")


def verl_import_problems(cfg: DictConfig) -> list[str]:
    """One text per reward-function file that imports verl: each verl name it imports, and what
    rlbridge has instead (`python -m codemods.migrate FILE` rewrites the imports that have one)."""
    if importlib.util.find_spec("verl") is not None:
        return []
    problems = []
    for key in REWARD_FILE_KEYS:
        path = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        names = _verl_imports(path) if isinstance(path, str) and path.endswith(".py") else []
        if names:
            judged = "; ".join(f"line {line}: {name} {_equivalent(name)}" for line, name in names)
            problems.append(f"{path} ({key}) imports verl, which is not installed here and which rlbridge does not "
                            f"ship: {judged} (python -m codemods.migrate {path} rewrites the imports that have one)")
            break
    return problems


def _verl_imports(path: str) -> list[tuple[int, str]]:
    """`(line, qualified name)` of each verl name the file imports; nothing for a file the loader
    will report (missing, not Python)."""
    try:
        tree = ast.parse(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "verl"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "verl":
            names += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return sorted(names)


def _equivalent(name: str) -> str:
    """What rlbridge has for one verl name: the rename table's target where it exists here."""
    action = rename_table.resolve_python_name(name)
    if action is None:
        return "has no rlbridge equivalent"
    if action.new_name is None:
        return f"has no rlbridge equivalent ({action.row.message})"
    return f"is {action.new_name} in rlbridge" if _exists(action.new_name) else "has no rlbridge equivalent"


def _exists(qualified: str) -> bool:
    """Whether `qualified` names a module here, or an attribute of one (imported to check)."""
    module, _, attribute = qualified.rpartition(".")
    try:
        if importlib.util.find_spec(qualified) is not None:
            return True
    except (ImportError, ValueError):
        pass
    try:
        return bool(module) and hasattr(importlib.import_module(module), attribute)
    except Exception:  # noqa: BLE001 - a target that does not import is no equivalent
        return False


def _class_names(path: Any, top: str) -> list[tuple[str, str]]:
    """`(where, class_name)` of each entry of the file's `top:` list; nothing for a file that is
    missing or not of that shape (the loader reports those with its own line)."""
    if not isinstance(path, str) or not path:
        return []
    file = Path(path).expanduser()
    try:
        document = OmegaConf.to_container(OmegaConf.load(file), resolve=False)
    except Exception:  # noqa: BLE001 - missing or unreadable: the loader says which
        return []
    entries = document.get(top) if isinstance(document, dict) else None
    return [(f"{file}: {top}[{index}]", entry["class_name"]) for index, entry in enumerate(entries or [])
            if isinstance(entry, dict) and isinstance(entry.get("class_name"), str)]
