"""verl's `run_ppo` / `TaskRunner` on the V0 trainer, and `python -m legacy_v0.main_ppo`.

`python -m core_v1.main_ppo ... trainer.use_v1=false` composes the V0 config before any V1 key
mapping, in verl's V0 key layout (`legacy_v0.config.compose_v0`: V0's own keys such as
`reward_model.reward_manager`, `data.sampler` and DAPO's overlong buffer are read as verl's V0
trainer read them), and hands it to `legacy_v0.entry.run_v0`: either the plan is printed
(`trainer.dry_run=true`) or V0 trains. `python -m legacy_v0.main_ppo ...`, for scripts that call
the V0 entry directly, does exactly the same. Both print one deprecation warning naming the V1
replacement and the release that removes V0.

`TaskRunner`, `Role` and `run_ppo` (`legacy_v0.task_runner`) are importable from here, as verl's
users import them from verl's `main_ppo`.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

# The names verl's users import from verl's main_ppo, kept importable here.
from legacy_v0.entry import run_v0  # noqa: F401
from legacy_v0.task_runner import Role, TaskRunner, run_ppo  # noqa: F401

_USE_V1_PREFIXES = ("trainer.use_v1=", "+trainer.use_v1=", "++trainer.use_v1=")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`python -m legacy_v0.main_ppo [--config-name=NAME] key=value ...`: `core_v1.main_ppo` on V0."""
    from core_v1.main_ppo import main as main_ppo

    argv = list(sys.argv[1:] if argv is None else argv)
    if any(arg.startswith(_USE_V1_PREFIXES) and arg.split("=", 1)[1].lower() == "true" for arg in argv):
        print(
            "error: legacy_v0.main_ppo runs the V0 trainer; drop trainer.use_v1=true or run "
            "`python -m core_v1.main_ppo` for V1",
            file=sys.stderr,
        )
        return 2
    overrides = [arg for arg in argv if not arg.startswith(_USE_V1_PREFIXES)]
    return main_ppo([*overrides, "trainer.use_v1=false"])


if __name__ == "__main__":
    sys.exit(main())
