"""The CPU quickstart: prepare what is missing, then train with the `quickstart` preset.

python -m examples.quickstart [key=value ...]     # extra overrides go to core_v1.main_ppo
"""

import sys

from core_v1.main_ppo import main
from examples.quickstart.prepare import prepare

if __name__ == "__main__":
    prepare()
    sys.exit(main(["--config-name=quickstart", *sys.argv[1:]]))
