"""verl names in the files a config names: judged at start-up by the rename table.

verl's tool and interaction configs (`actor_rollout_ref.rollout.multi_turn.tool_config_path`,
`.interaction_config_path`) name each class as `class_name: module.Class`, and configs copied
from verl name verl's own (`verl.tools.gsm8k_tool.Gsm8kTool`). The reward function's file
(`reward.custom_reward_function.path`, or V0's `custom_reward_function.path`) and the dataset
class's file (`data.custom_cls.path`) may `import verl...`.
Where verl is not installed, this shim reads those files first and answers each verl name with the
Python rows of `shims.rename_table` (the rows `codemods` applies to imports), as the config shim
answers a legacy key:

- a name whose rlbridge equivalent exists here is a legacy name: it loads as that equivalent
  (`shims.verl_imports` serves it, in every process that loads the file), with one line per class
  path, or per reward file, naming the old and new names and the codemod that rewrites them
  (`legacy class path X -> Y in FILE: tools[0] (python -m codemods.migrate FILE rewrites it)`);
- a name rlbridge has no equivalent of stops the run with one line saying what is missing and
  what to write instead (for a reward file: only the names that have none).

Where verl is installed its modules load as they are, and nothing here speaks.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from shims import rename_table
from shims.verl_imports import served_name, verl_installed

# The config key naming each file, and the top-level list of `class_name` entries in it.
CLASS_LISTS = {
    "actor_rollout_ref.rollout.multi_turn.tool_config_path": "tools",
    "actor_rollout_ref.rollout.multi_turn.interaction_config_path": "interaction",
}
REWARD_FILE_KEYS = ("reward.custom_reward_function.path", "custom_reward_function.path")
# Other Python files a config names whose `import verl...` lines are judged the same way.
DATASET_FILE_KEY = "data.custom_cls.path"
_UNMAPPED = "rlbridge does not ship verl's modules and has no equivalent of this one"


@dataclass(frozen=True)
class NamedFiles:
    """What the files a config names ask of verl: `problems`, one text per name rlbridge lacks (the
    run stops); `served`, one warning line per class path or reward file whose verl names all load
    as rlbridge's (`shims.verl_imports` must serve them in every process that loads the file)."""

    problems: tuple[str, ...] = ()
    served: tuple[str, ...] = ()


def verl_names_in_files(cfg: DictConfig) -> NamedFiles:
    """The verl names in the tool, interaction and reward files `cfg` names; nothing where verl is
    installed (its modules load as they are)."""
    if verl_installed():
        return NamedFiles()
    classes, imports = _judge_class_names(cfg), _judge_reward_imports(cfg)
    return NamedFiles(classes.problems + imports.problems, classes.served + imports.served)


def _judge_class_names(cfg: DictConfig) -> NamedFiles:
    problems, served = [], []
    for key, top in CLASS_LISTS.items():
        path = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
        for file, where, class_name in _class_names(path, top):
            if class_name.split(".")[0] != "verl":
                continue
            target = served_name(class_name)
            if target is not None:
                served.append(
                    f"legacy class path {class_name} -> {target} in {file}: {where} "
                    f"(python -m codemods.migrate {file} rewrites it)"
                )
                continue
            action = rename_table.resolve_python_name(class_name)
            reason = action.row.message if action is not None and action.new_name is None else _UNMAPPED
            problems.append(f"{file}: {where}: verl's class_name {class_name} is not in rlbridge ({key}): {reason}")
    return NamedFiles(tuple(problems), tuple(served))


def _judge_reward_imports(cfg: DictConfig) -> NamedFiles:
    """The first reward-file key that names a `.py` file importing verl, and the dataset class's
    file (`data.custom_cls.path`) when it is another file that does: each refused when any verl name
    it imports has no equivalent here (those are listed), else one line naming what serves each."""
    reward_keys = [key for key in REWARD_FILE_KEYS if _verl_imports(_python_file(cfg, key))]
    judged = {}
    for key in [*reward_keys[:1], DATASET_FILE_KEY]:
        path = _python_file(cfg, key)
        if path is not None and path not in judged.values():
            judged[key] = path
    problems, served = [], []
    for key, path in judged.items():
        imports = _verl_imports(path)
        if not imports:
            continue
        missing = [(line, name) for line, name, _ in imports if served_name(name) is None]
        if missing:
            listed = "; ".join(f"line {line}: {name} {_no_equivalent(name)}" for line, name in missing)
            problems.append(
                f"{path} ({key}) imports verl, which is not installed here and which rlbridge does not ship: {listed}"
            )
            continue
        renames = dict.fromkeys(_served_module(name, module) for _, name, module in imports)
        listed = ", ".join(f"{old} -> {new}" for old, new in renames)
        served.append(f"legacy imports in {path} ({key}): {listed} (python -m codemods.migrate {path} rewrites them)")
    return NamedFiles(tuple(problems), () if problems else tuple(served))


def _python_file(cfg: DictConfig, key: str) -> Any:
    """The `.py` file `key` names (verl's `file://` prefix dropped), or None."""
    path = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
    if isinstance(path, str) and path.startswith("file://"):
        path = path[len("file://") :]
    return path if isinstance(path, str) and path.endswith(".py") else None


def _served_module(name: str, module: str) -> tuple[str, str]:
    """`(old, new)` as the warning names an import: its module where the module itself is served
    (`verl.utils.reward_score.math`), else the name (`verl.utils.ray_utils.get_event_loop`)."""
    target = served_name(module) if module else None
    return (module, target) if target is not None else (name, served_name(name))


def _no_equivalent(name: str) -> str:
    action = rename_table.resolve_python_name(name)
    if action is not None and action.new_name is None:
        return f"has no rlbridge equivalent ({action.row.message})"
    return "has no rlbridge equivalent"


def _verl_imports(path: str) -> list[tuple[int, str, str]]:
    """`(line, qualified name, module imported from)` of each verl name the file imports (the module
    is empty for a plain `import verl.x`); nothing for a file the loader will report (missing, not
    Python)."""
    if not path:
        return []
    try:
        tree = ast.parse(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name, "") for alias in node.names if alias.name.split(".")[0] == "verl"]
        elif isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "verl":
            names += [
                (node.lineno, node.module if alias.name == "*" else f"{node.module}.{alias.name}", node.module)
                for alias in node.names
            ]
    return sorted(names)


def _class_names(path: Any, top: str) -> list[tuple[Path, str, str]]:
    """`(file, where, class_name)` of each entry of the file's `top:` list; nothing for a file that
    is missing or not of that shape (the loader reports those with its own line)."""
    if not isinstance(path, str) or not path:
        return []
    file = Path(path).expanduser()
    try:
        document = OmegaConf.to_container(OmegaConf.load(file), resolve=False)
    except Exception:  # noqa: BLE001 - missing or unreadable: the loader says which
        return []
    entries = document.get(top) if isinstance(document, dict) else None
    return [
        (file, f"{top}[{index}]", entry["class_name"])
        for index, entry in enumerate(entries or [])
        if isinstance(entry, dict) and isinstance(entry.get("class_name"), str)
    ]
