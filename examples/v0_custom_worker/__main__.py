"""Train the quickstart task with a custom V0 worker (see custom_worker.py), on V0 or on V1.

    python -m examples.v0_custom_worker [key=value ...]        # the V0 trainer, through AuditTaskRunner
    python -m examples.v0_custom_worker --v1 [key=value ...]   # V1: the worker runs in V1's training ranks

Overrides are Hydra's, with verl's key names.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from core_v1.config import compose_config, to_config
from core_v1.main_ppo import load_legacy_shim
from examples.v0_custom_worker.custom_worker import AuditTaskRunner

WORKER_CLASS = "examples.v0_custom_worker.custom_worker:LogProbAuditWorker"


def main(argv: Optional[Sequence[str]] = None, prepare_assets: bool = True, v1: bool = False) -> list[dict]:
    """Run the quickstart preset with `LogProbAuditWorker`; returns every step's metrics."""
    if prepare_assets:
        from examples.quickstart.prepare import prepare

        prepare()
    overrides = list(sys.argv[1:] if argv is None else argv)
    if "--v1" in overrides:
        overrides.remove("--v1")
        v1 = True
    overrides += [f"trainer.v1.worker_class={WORKER_CLASS}"] if v1 else ["trainer.use_v1=false"]
    shim = load_legacy_shim(None)  # old key names still work, as on the command line
    if shim is not None:
        overrides = shim.migrate_overrides(overrides)
    config = compose_config("quickstart", overrides, migrate=shim.migrate_config if shim else None)
    if v1:
        return run_on_v1(to_config(config))
    from legacy_v0.main_ppo import run_ppo

    return run_ppo(config, task_runner_class=AuditTaskRunner)


def run_on_v1(config) -> list[dict]:
    from core_v1.utils.plugins import import_plugins
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.setup import build_components

    import_plugins(config.trainer.v1.plugins)
    trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    components = build_components(
        config, replay_buffer_cls=trainer_cls.replay_buffer_cls, partial_rollout=trainer_cls.partial_rollout
    )
    try:
        return trainer_cls(config, components).fit()
    finally:
        components.close()


if __name__ == "__main__":
    history = main()
    print(
        f"trained {len(history)} steps; last low-prob token fraction {history[-1]['custom/low_prob_token_frac']:.3f}"
        if history
        else "no steps run"
    )
