"""The counting task on the CPU: prepare what is missing, then train (examples/vision_count/train.py).

python -m examples.vision_count [key=value ...]     # extra overrides go to core_v1.main_ppo
"""

import sys

from core_v1.main_ppo import main
from examples.vision_count.prepare import prepare
from examples.vision_count.train import launch_args

if __name__ == "__main__":
    prepare()
    sys.exit(
        main([*launch_args("data/vision_count", "models/vision-count-tiny", "outputs/vision_count"), *sys.argv[1:]])
    )
