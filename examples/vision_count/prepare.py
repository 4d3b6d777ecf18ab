"""A small image task in verl's multimodal format, and a tiny vision-language model to learn it.

Each image (56 x 56 pixels) is four 28-pixel squares, each white or black; the prompt asks how many
are white: `<image>count=`, with the image in the row's `images` column as `{"bytes": PNG}` (what
`datasets` writes for an image feature, as in verl's geo3k preprocessing). The answer is scored by
the quickstart's `arithmetic` scorer (1 for the count, 0.5 one off). The counts of the 16 patterns
are 0-4 in proportions 1:4:6:4:1, so the best a policy blind to the image can do is always to
answer 2, for a mean score of 0.625: a score above that needs the image.

    python -m examples.vision_count.prepare [--out data/vision_count] [--model-dir models/vision-count-tiny]
    python -m examples.vision_count     # prepare, then train (train.py)
"""

from __future__ import annotations

import argparse
import io
import itertools
from pathlib import Path

SIDE = 56
TASK_WORDS = ["user", "assistant", "count", "=", *[str(d) for d in range(10)]]


def image_png(white: tuple[int, ...]) -> bytes:
    """PNG bytes of the 2 x 2 grid whose squares listed in `white` (0-3, row by row) are white."""
    from PIL import Image

    image = Image.new("RGB", (SIDE, SIDE))
    half = SIDE // 2
    for square in white:
        left, top = (square % 2) * half, (square // 2) * half
        image.paste((255, 255, 255), (left, top, left + half, top + half))
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def make_rows(split: str) -> list[dict]:
    grids = [white for k in range(5) for white in itertools.combinations(range(4), k)]  # all 16 patterns
    return [
        {
            "data_source": "arithmetic",
            "prompt": [{"role": "user", "content": "<image>count="}],
            "images": [{"bytes": image_png(white), "path": None}],
            "ability": "vision",
            "reward_model": {"style": "rule", "ground_truth": str(len(white))},
            "extra_info": {"split": split, "index": i},
        }
        for i, white in enumerate(grids)
    ]


def write_data(out_dir: str | Path) -> tuple[Path, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = out / "train.parquet", out / "val.parquet"
    for split, path in zip(("train", "val"), paths):
        pq.write_table(pa.Table.from_pylist(make_rows(split)), path)
    return paths


def prepare(
    data_dir: str | Path = "data/vision_count", model_dir: str | Path = "models/vision-count-tiny", force: bool = False
) -> None:
    from examples.tiny_vlm import make_tiny_vlm

    if force or not (Path(data_dir) / "train.parquet").is_file():
        print("writing", *write_data(data_dir))
    if force or not (Path(model_dir) / "config.json").is_file():
        print("writing", make_tiny_vlm(model_dir, TASK_WORDS[2:], vocab_size=40, base_words=TASK_WORDS))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="data/vision_count")
    parser.add_argument("--model-dir", default="models/vision-count-tiny")
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    prepare(args.out, args.model_dir, args.force)


if __name__ == "__main__":
    main()
