"""Draw a finished (or running) run's curves to a PNG.

python -m core_v1.plot outputs/quickstart/metrics.jsonl [out.png] [--keys k1 k2 ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from core_v1.utils.tracking import LoggerUnavailableError, plot_metrics


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("metrics", type=Path)
    parser.add_argument("out", type=Path, nargs="?")
    parser.add_argument(
        "--keys",
        nargs="+",
        default=["critic/score/mean", "response_length/mean", "actor/pg_loss", "actor/entropy", "val/score/mean"],
    )
    args = parser.parse_args(argv)
    if not args.metrics.is_file():
        print(
            f"error: {args.metrics} does not exist (a run with trainer.logger including jsonl writes it)",
            file=sys.stderr,
        )
        return 2
    out = args.out or args.metrics.with_suffix(".png")
    try:
        print(plot_metrics(args.metrics, out, args.keys))
    except LoggerUnavailableError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
