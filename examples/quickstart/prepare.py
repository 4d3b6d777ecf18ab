"""Quickstart data and model: `a + b =` prompts in the old (verl) parquet format, and a tiny model.

The task is learnable by RL alone: the reward (core_v1/reward/scorers/arithmetic.py) gives
partial credit for answers near the sum, so even the random initial policy scores above zero.

    python -m examples.quickstart.prepare [--out data/quickstart] [--model-dir models/quickstart-tiny]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

MAX_OPERAND = 4
NUMBER_WORDS = [str(i) for i in range(2 * MAX_OPERAND + 1)]
# The task's whole vocabulary: chat roles, operators, digits (the tokenizer adds the chat markers).
TASK_WORDS = ["user", "assistant", "+", "=", *[str(d) for d in range(10)]]


def make_rows(pairs: list[tuple[int, int]], split: str) -> list[dict]:
    return [
        {
            "data_source": "arithmetic",
            "prompt": [{"role": "user", "content": f"{a}+{b}="}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": str(a + b)},
            "extra_info": {"split": split, "index": i, "a": a, "b": b},
        }
        for i, (a, b) in enumerate(pairs)
    ]


def write_data(out_dir: str | Path, seed: int = 0) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pairs = [(a, b) for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    random.Random(seed).shuffle(pairs)
    train, val = pairs, pairs  # the task is a table to learn: validation asks the same facts greedily
    paths = out / "train.parquet", out / "val.parquet"
    for rows, path in ((make_rows(train, "train"), paths[0]), (make_rows(val, "val"), paths[1])):
        tmp = path.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(path)
    return paths


def prepare(
    data_dir: str | Path = "data/quickstart", model_dir: str | Path = "models/quickstart-tiny", force: bool = False
) -> None:
    from examples.tiny_model import make_tiny_model

    if force or not (Path(data_dir) / "train.parquet").is_file():
        print("writing", *write_data(data_dir))
    if force or not (Path(model_dir) / "config.json").is_file():
        print(
            "writing",
            make_tiny_model(
                model_dir, NUMBER_WORDS, hidden_size=64, num_layers=2, vocab_size=40, base_words=TASK_WORDS
            ),
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/quickstart")
    parser.add_argument("--model-dir", default="models/quickstart-tiny")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    prepare(args.out, args.model_dir, args.force)


if __name__ == "__main__":
    main()
