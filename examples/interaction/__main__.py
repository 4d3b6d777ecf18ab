"""The tutor example: prepare what is missing, then train with the `quickstart` preset.

python -m examples.interaction [key=value ...]     # extra overrides go to core_v1.main_ppo
"""

import sys

from core_v1.main_ppo import main
from examples.interaction.prepare import prepare, run_overrides

if __name__ == "__main__":
    prepare()
    sys.exit(main(["--config-name=quickstart", *run_overrides(), *sys.argv[1:]]))
