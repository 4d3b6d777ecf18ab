"""User plug-ins: modules imported before a run starts, so the names they register exist.

`trainer.v1.plugins=[my_project.rl_ext, path/to/my_trainer.py]` imports each entry (a module
name, or a `.py` file) through the one loader (`core_v1.utils.loading`) in the driver and in
every agent-loop worker. Registering there is how a custom trainer mode, advantage estimator,
policy loss, reward scorer, checkpoint backend or agent loop joins a run:
`@register_trainer("my_mode")` in the file, then `trainer.v1.trainer_mode=my_mode`.
"""

from __future__ import annotations

from types import ModuleType
from typing import Iterable

from core_v1.utils.loading import PluginError, load_module

__all__ = ["PluginError", "import_plugin", "import_plugins"]

PLUGINS_KEY = "trainer.v1.plugins"


def import_plugins(entries: Iterable[str]) -> list[ModuleType]:
    return [import_plugin(str(entry)) for entry in entries or ()]


def import_plugin(entry: str) -> ModuleType:
    """Import one plug-in; the same file is the same module in every process, imported once."""
    return load_module(entry, key=PLUGINS_KEY)
