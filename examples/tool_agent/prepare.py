"""Calculator task for the `tool_agent` loop, in the old (verl) parquet format, and a tiny model.

Each row asks for `a*b+c`, is routed to `tool_agent` by its `agent_name` column, and carries
`tools_kwargs` (verl's layout) that hand the answer to the calculator's `create`, so the tool can
report whether the model computed the right expression (its `calc_reward`).

    python -m examples.tool_agent.prepare [--out data/tool_agent] [--model-dir models/tool-agent-tiny]
"""

from __future__ import annotations

import argparse
import random
import string
from pathlib import Path

HERE = Path(__file__).resolve().parent
# Every printable character, so tool calls, tool output and error messages tokenize losslessly
# (the tiny tokenizer knows only the characters it was trained on).
TOOL_WORDS = [
    "".join(c for c in string.printable if c not in "\t\r\x0b\x0c"),
    "calculator",
    "expression",
    "arguments",
    "name",
]


def make_rows(triples: list[tuple[int, int, int]], split: str) -> list[dict]:
    rows = []
    for i, (a, b, c) in enumerate(triples):
        answer = str(a * b + c)
        rows.append(
            {
                "data_source": "calculator",
                "prompt": [{"role": "user", "content": f"{a}*{b}+{c}="}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": answer},
                "extra_info": {"split": split, "index": i},
                "agent_name": "tool_agent",
                "tools_kwargs": {"calculator": {"create_kwargs": {"ground_truth": answer}}},
            }
        )
    return rows


def write_data(out_dir: str | Path, seed: int = 0, num_train: int = 64, num_val: int = 16) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    triples = [(rng.randint(2, 19), rng.randint(2, 19), rng.randint(0, 9)) for _ in range(num_train + num_val)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.parquet", out / "val.parquet"
    splits = (make_rows(triples[:num_train], "train"), make_rows(triples[num_train:], "val"))
    for rows, path in zip(splits, paths):
        tmp = path.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(path)
    return paths


def run_overrides(
    data_dir: str | Path = "data/tool_agent", model_dir: str | Path = "models/tool-agent-tiny"
) -> list[str]:
    """The overrides, on top of the `quickstart` preset, that turn it into this example."""
    return [
        f"data.train_files={Path(data_dir) / 'train.parquet'}",
        f"data.val_files={Path(data_dir) / 'val.parquet'}",
        f"actor_rollout_ref.model.path={model_dir}",
        "data.max_prompt_length=32",
        "data.max_response_length=64",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={HERE / 'tool_config.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "actor_rollout_ref.rollout.multi_turn.max_tool_response_length=64",
        f"reward.custom_reward_function.path={HERE / 'reward.py'}",
        "trainer.project_name=tool_agent",
        "trainer.experiment_name=calculator",
        "trainer.default_local_dir=outputs/tool_agent",
    ]


def prepare(
    data_dir: str | Path = "data/tool_agent", model_dir: str | Path = "models/tool-agent-tiny", force: bool = False
) -> None:
    from examples.tiny_model import make_tiny_model

    if force or not (Path(data_dir) / "train.parquet").is_file():
        print("writing", *write_data(data_dir))
    if force or not (Path(model_dir) / "config.json").is_file():
        print("writing", make_tiny_model(model_dir, TOOL_WORDS, hidden_size=64, num_layers=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/tool_agent")
    parser.add_argument("--model-dir", default="models/tool-agent-tiny")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    prepare(args.out, args.model_dir, args.force)


if __name__ == "__main__":
    main()
