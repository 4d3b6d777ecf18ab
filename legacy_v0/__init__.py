"""The deprecated V0 trainer: `DataProto`, the V0 workers and reward manager, `RayPPOTrainer`.

V0 is the single-controller monolith verl users know (one padded `DataProto` through every
stage). It runs on V1's engines and math (`core_v1.workers`, `core_v1.rollout`,
`core_v1.algorithms`), so V0 and V1 `sync` train identically; it gets no new features.

Using the V0 trainer, its workers or its entry point prints one deprecation warning per process
(`warn_deprecated`). `legacy_v0.protocol` alone does not warn: V1-side shims convert `DataProto`
batches, and that is not a use of the deprecated trainer.
"""

from __future__ import annotations

import warnings

REMOVAL_VERSION = "rlbridge 0.3"

DEPRECATION_MESSAGE = (
    f"the V0 trainer (legacy_v0, trainer.use_v1=false) is deprecated and will be removed in {REMOVAL_VERSION}; "
    "its replacement is the V1 trainer: `python -m core_v1.main_ppo` with trainer.v1.trainer_mode=sync "
    "(the same training, number for number). `python -m codemods.migrate <script>` rewrites old scripts."
)


class RLBridgeDeprecationWarning(FutureWarning):
    """A deprecated rlbridge feature was used. A FutureWarning, so Python shows it to end users by default."""


_warned = False


def warn_deprecated(stacklevel: int = 2) -> None:
    """Warn, once per process, that the V0 trainer is deprecated (naming its replacement and removal)."""
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(DEPRECATION_MESSAGE, RLBridgeDeprecationWarning, stacklevel=stacklevel + 1)


__all__ = ["DEPRECATION_MESSAGE", "REMOVAL_VERSION", "RLBridgeDeprecationWarning", "warn_deprecated"]
