"""The quickstart task trained by a served reward model instead of the rule.

    python -m examples.reward_model [key=value ...]        # V1; add trainer.use_v1=false for V0

Prepares the quickstart's data and policy (examples/quickstart), makes the tiny reward model
`models/quickstart-rm` the first time (make_reward_model.py: a Qwen2ForSequenceClassification
with its own tokenizer and chat template, taught in seconds to prefer the right sum), then runs
the `quickstart` preset with one-token answers and the reward model scoring every response
(`combine=replace`: its score is the whole reward). The policy never sees the rule, but the
rule's score is reported as `reward_model/rule_score/mean` in `outputs/quickstart-rm/metrics.jsonl`:
it rises as the policy learns what the reward model prefers.
"""

import sys
from pathlib import Path

from core_v1.main_ppo import main
from examples.quickstart.prepare import prepare
from examples.reward_model import reward_model_overrides

REWARD_MODEL_DIR = Path("models/quickstart-rm")


if __name__ == "__main__":
    from examples.reward_model.make_reward_model import make_reward_model

    prepare()
    if not (REWARD_MODEL_DIR / "config.json").is_file():
        print("writing", make_reward_model(REWARD_MODEL_DIR, "models/quickstart-tiny"))
    sys.exit(
        main(
            [
                "--config-name=quickstart",
                *reward_model_overrides(REWARD_MODEL_DIR),
                "trainer.default_local_dir=outputs/quickstart-rm",
                "trainer.experiment_name=grpo-add-rm",
                *sys.argv[1:],
            ]
        )
    )
