"""verl class paths in the files a config names: judged at start-up by the rename table.

verl's tool and interaction configs (`actor_rollout_ref.rollout.multi_turn.tool_config_path`,
`.interaction_config_path`) name each class as `class_name: module.Class`, and configs copied
from verl name verl's own (`verl.tools.gsm8k_tool.Gsm8kTool`). Where verl is not installed, the
loader could only say "No module named 'verl'"; this shim reads those files first and answers each
verl class path with the Python rows of `shims.rename_table` (the rows `codemods` applies to
imports): a class rlbridge has under another name is named (write that path), one it lacks is one
line saying what is missing and what to write instead. Where verl is installed its classes load as
they are, and nothing here speaks.
"""

from __future__ import annotations

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
