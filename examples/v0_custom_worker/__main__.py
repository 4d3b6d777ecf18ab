"""Train the quickstart task on the V0 trainer with a custom worker (see custom_worker.py).

    python -m examples.v0_custom_worker [key=value ...]     # Hydra overrides, verl's key names
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from core_v1.config import compose_config
from core_v1.main_ppo import load_legacy_shim
from examples.v0_custom_worker.custom_worker import AuditTaskRunner
from legacy_v0.main_ppo import run_ppo


def main(argv: Optional[Sequence[str]] = None, prepare_assets: bool = True) -> list[dict]:
    """Run the quickstart preset with `AuditTaskRunner`; returns every step's metrics."""
    if prepare_assets:
        from examples.quickstart.prepare import prepare
        prepare()
    overrides = [*(sys.argv[1:] if argv is None else argv), "trainer.use_v1=false"]
    shim = load_legacy_shim(None)  # old key names still work, as on the command line
    if shim is not None:
        overrides = shim.migrate_overrides(overrides)
    config = compose_config("quickstart", overrides, migrate=shim.migrate_config if shim else None)
    return run_ppo(config, task_runner_class=AuditTaskRunner)


if __name__ == "__main__":
    history = main()
    print(f"trained {len(history)} steps; last low-prob token fraction "
          f"{history[-1]['custom/low_prob_token_frac']:.3f}" if history else "no steps run")
