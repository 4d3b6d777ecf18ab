"""The quickstart's `a+b=` task with a tutor playing the user's turn: data and a tiny model.

Each row carries verl's `extra_info.interaction_kwargs` (`name` picks the interaction of
`interaction.yaml`, `ground_truth` is what the tutor checks); the model's tokenizer knows every
printable character, so the tutor's sentences tokenize as written.

`python -m examples.interaction` prepares them (into data/interaction and models/interaction-tiny) and trains.
"""

from __future__ import annotations

from pathlib import Path

from examples.quickstart.prepare import MAX_OPERAND, make_rows
from examples.tool_agent.prepare import TOOL_WORDS

HERE = Path(__file__).resolve().parent


def write_data(out_dir: str | Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pairs = [(a, b) for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.parquet", out / "val.parquet"
    for split, path in zip(("train", "val"), paths):
        rows = make_rows(pairs, split)
        for row in rows:
            row["extra_info"]["interaction_kwargs"] = {
                "name": "tutor",
                "ground_truth": row["reward_model"]["ground_truth"],
            }
        tmp = path.with_suffix(".tmp")
        pq.write_table(pa.Table.from_pylist(rows), tmp)
        tmp.replace(path)
    return paths


def run_overrides(
    data_dir: str | Path = "data/interaction", model_dir: str | Path = "models/interaction-tiny"
) -> list[str]:
    """The overrides, on top of the `quickstart` preset, that turn it into this example."""
    return [
        f"data.train_files={Path(data_dir) / 'train.parquet'}",
        f"data.val_files={Path(data_dir) / 'val.parquet'}",
        f"actor_rollout_ref.model.path={model_dir}",
        "data.max_prompt_length=32",
        "data.max_response_length=48",  # a chat-templated a+b= prompt: about 23 tokens
        "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent",  # verl: multi_turn.enable=true
        f"actor_rollout_ref.rollout.multi_turn.interaction_config_path={HERE / 'interaction.yaml'}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        "trainer.project_name=interaction",
        "trainer.experiment_name=tutor",
        "trainer.default_local_dir=outputs/interaction",
    ]


def prepare(
    data_dir: str | Path = "data/interaction", model_dir: str | Path = "models/interaction-tiny", force: bool = False
) -> None:
    from examples.tiny_model import make_tiny_model

    if force or not (Path(data_dir) / "train.parquet").is_file():
        print("writing", *write_data(data_dir))
    if force or not (Path(model_dir) / "config.json").is_file():
        print("writing", make_tiny_model(model_dir, TOOL_WORDS, hidden_size=64, num_layers=2))
