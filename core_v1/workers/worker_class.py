"""A user's V0 worker class on V1 (`trainer.v1.worker_class`): the class and the adapter it names.

The class names its own adapter (`v1_worker_adapter`, a "module:Name" string), so core_v1
reaches the V0 layer only through the user's class. Loaded before the run starts (the
validation pass) and again on each rank.
"""

from __future__ import annotations

from typing import Any

from core_v1.config.schema import ConfigError
from core_v1.utils.loading import load_object

WORKER_CLASS_KEY = "trainer.v1.worker_class"


def load_worker_class(spec: str) -> tuple[type, Any]:
    """`(worker class, adapter)` for `spec`; ConfigError when either cannot be loaded."""
    worker_cls = load_object(spec, key=WORKER_CLASS_KEY, error=ConfigError)
    adapter_spec = getattr(worker_cls, "v1_worker_adapter", None)
    if not isinstance(worker_cls, type) or not adapter_spec:
        raise ConfigError(
            f"{WORKER_CLASS_KEY}={spec!r} is not a worker class V1 can run (it has no "
            "v1_worker_adapter); name a subclass of legacy_v0.workers.ActorRolloutRefWorker"
        )
    return worker_cls, load_object(adapter_spec, key=f"{spec}.v1_worker_adapter", error=ConfigError)
