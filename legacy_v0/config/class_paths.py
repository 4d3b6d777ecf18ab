"""Classes a V0 config names by path, imported at start-up so that a missing one is one error line.

verl writes a class as a fully qualified name (`my_pkg.sync.MyManager`); rlbridge's loader
(`core_v1.utils.loading.load_object`) also takes `path/to/file.py:Name` and `module:Name`.

`actor_rollout_ref.rollout.checkpoint_manager_class` (verl's custom checkpoint manager) names a
subclass of `core_v1.checkpoint_engine.manager.CheckpointManager`: the object that pushes the
actor's weights into the rollout replica after each update. The V0 worker builds it with
`(actor, rollout_client, engine, loop)` and calls its `update_weights(version)` for every sync.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Optional

from core_v1.config import ConfigError

CHECKPOINT_MANAGER_KEY = "actor_rollout_ref.rollout.checkpoint_manager_class"


def object_spec(name: str) -> str:
    """`module:Name` for verl's dotted `module.Name`; a spec with `:` (or a file) is kept."""
    name = str(name)
    if ":" in name or name.endswith(".py"):
        return name
    module, _, attribute = name.rpartition(".")
    return f"{module}:{attribute}" if module else name


def load_checkpoint_manager_class(name: Optional[str]) -> Optional[type]:
    """The class `checkpoint_manager_class` names (None when unset); ConfigError when it cannot be
    imported or is not a `CheckpointManager`."""
    if not name:
        return None
    from core_v1.checkpoint_engine.manager import CheckpointManager
    from core_v1.utils.loading import load_object

    cls = load_object(object_spec(name), key=CHECKPOINT_MANAGER_KEY, error=ConfigError)
    if not (isinstance(cls, type) and issubclass(cls, CheckpointManager)):
        raise ConfigError(
            f"{CHECKPOINT_MANAGER_KEY}={name!r} is not a subclass of "
            "core_v1.checkpoint_engine.manager.CheckpointManager (the class that syncs the actor's "
            "weights into the rollout replicas)"
        )
    return cls


class RunInPlace:
    """The `loop` a `CheckpointManager` runs its coroutines on, for the V0 worker: each call runs
    to completion in this thread (V0 drives its replica with `asyncio.run` as well)."""

    def run(self, coro: Awaitable[Any], timeout: Optional[float] = None) -> Any:
        return asyncio.run(asyncio.wait_for(coro, timeout) if timeout else coro)
