"""Train the quickstart with the seed's custom trainer mode `my_mode` (weights synced every 2 steps).

    python -m examples.custom_trainer_mode [key=value ...]

A trainer mode is registered when its module is imported; this runner imports it, then starts
the entrypoint with `trainer.v1.trainer_mode=my_mode` (later overrides win).
"""

import sys

from core_v1.main_ppo import main
from examples.custom_trainer_mode import my_trainer  # noqa: F401  (registers "my_mode")
from examples.quickstart.prepare import prepare

if __name__ == "__main__":
    prepare()
    sys.exit(main(["--config-name=quickstart", "trainer.v1.trainer_mode=my_mode", *sys.argv[1:]]))
