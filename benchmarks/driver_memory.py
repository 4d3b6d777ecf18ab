"""The driver's memory against the batch size: short V1 trainings at `data.train_batch_size` 32
and 256 (same prompt and response lengths), each in a fresh driver process, printing the driver's
peak RSS and each training rank's peak RSS, their ratios (256 against 32), and the trajectory-tensor
bytes the driver process moved through the transfer store in each step (put or got, counted by
`core_v1.transfer_store.traffic`): 0 when the ranks are apart from the driver.

The design (docs/design.md, "Where the data lives") keeps data flow apart from control flow: the
training ranks read their rows from the transfer store and do the per-token work, so what grows
with the batch should grow on the ranks, while the driver stays near its fixed cost (Python,
torch, Ray, the tokenizer).

Workload: quickstart-like `a + b =` prompts behind `--prompt-length` filler tokens (enough of them
for two batches of the larger size), GRPO with `--n` samples per prompt, responses of exactly
`--response-length` tokens (EOS ignored), micro-batches of `--micro-batch` rows,
one optimizer step per PPO step, on two CPU training ranks (`trainer.n_gpus_per_node=2`,
`trainer.device=cpu`), so the ranks are Ray actors apart from the driver. The policy is a tiny
Qwen2 made here with `save_pretrained`, whose vocabulary (`--vocab`, default 8192) makes the
per-token tensors of a batch measurable: a rank's logits are `[rows, length, vocab]`.

Measured: RSS of the driver process and of each rank process (their pids come from the worker
group's placement), sampled every 20 ms from the first training step to the last by a thread in
the driver; `ru_maxrss` of the driver too (its whole life, start-up included). `start` is the
driver's RSS when the first step begins. Ray's own processes (GCS, raylet), the rollout replica,
the agent-loop worker and the store actor are not counted.

Run: python -m benchmarks.driver_memory [--sizes 32 256] [--n 4] [--prompt-length 1024]
                                        [--response-length 1024] [--vocab 2048] [--steps 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import string
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

MIB = 1024 * 1024
RESULT_PREFIX = "driver_memory_result: "


@dataclass
class Workload:
    n: int = 4
    prompt_length: int = 1024
    response_length: int = 1024
    micro_batch: int = 8
    vocab: int = 2048
    steps: int = 2
    ranks: int = 2
    prompts: int = 0  # 0: enough for `steps` batches of the largest size asked


@dataclass
class Measurement:
    """Peak RSS in MiB of one run (one batch size)."""

    batch_size: int
    rows: int  # trajectories per step: batch_size x n
    driver_start: float  # the driver's RSS when the first step began
    driver_peak: float  # sampled over the steps
    driver_maxrss: float  # ru_maxrss: the driver's whole life
    rank_peaks: list[float] = field(default_factory=list)  # one per rank
    driver_stage_peaks: dict[str, float] = field(default_factory=dict)  # the driver's peak within each stage
    store_bytes: list[int] = field(default_factory=list)  # per step: tensor bytes the driver put or got
    seconds: float = 0.0


# ---------------------------------------------------------------------------------- assets
def make_assets(root: Path, workload: Workload, batch_sizes: Sequence[int]) -> dict[str, Path]:
    """The tiny model (vocabulary of about `workload.vocab` tokens) and the train parquet."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from examples.quickstart.prepare import TASK_WORDS, make_rows
    from examples.tiny_model import make_tiny_model

    rng = random.Random(0)
    # Distinct filler words give the byte-level BPE enough merges to reach the vocabulary size.
    words = sorted({"".join(rng.choices(string.ascii_lowercase, k=7)) for _ in range(workload.vocab)})
    model = make_tiny_model(
        root / "model",
        words,
        hidden_size=64,
        num_layers=2,
        vocab_size=workload.vocab,
        base_words=TASK_WORDS,
        max_positions=workload.prompt_length + workload.response_length + 256,
    )
    prompts = workload.prompts or max(batch_sizes) * workload.steps
    pairs = [(a, b) for a in range(100) for b in range(100)]
    rng.shuffle(pairs)
    rows = make_rows(pairs[:prompts], "train")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    for row in rows:  # a long context before the question: prompts of about `prompt_length` tokens
        filler_ids = tokenizer(" ".join(rng.choices(words, k=workload.prompt_length)))["input_ids"]
        filler = tokenizer.decode(filler_ids[: workload.prompt_length])
        row["prompt"] = [{"role": "user", "content": f"{filler}\n{row['prompt'][0]['content']}"}]
    train = root / "train.parquet"
    pq.write_table(pa.Table.from_pylist(rows), train)
    return {"model": Path(model), "train": train}


def overrides(assets: dict[str, Path], out_dir: Path, batch_size: int, workload: Workload) -> list[str]:
    return [
        f"data.train_files={assets['train']}",
        "data.val_files=null",
        f"data.train_batch_size={batch_size}",
        f"data.max_prompt_length={workload.prompt_length + 64}",
        f"data.max_response_length={workload.response_length}",
        f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={workload.micro_batch}",
        f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={workload.micro_batch}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"actor_rollout_ref.rollout.n={workload.n}",
        "actor_rollout_ref.rollout.ignore_eos=true",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch_size}",  # one optimizer step per PPO step
        "trainer.device=cpu",
        "trainer.nnodes=1",
        f"trainer.n_gpus_per_node={workload.ranks}",
        f"trainer.total_training_steps={workload.steps}",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        "trainer.logger=[jsonl]",
        "trainer.progress_bar=false",
        f"trainer.default_local_dir={out_dir}",
    ]


# ------------------------------------------------------------------------------- sampling
class PeakRss:
    """A thread sampling the RSS of the driver (this process) and of `rank_pids` until stopped; the
    driver's peak is also kept per `label` (the trainer stage running, see `traced`)."""

    def __init__(self, rank_pids: Sequence[int], interval_s: float = 0.02):
        import psutil

        self.driver = psutil.Process()
        self.ranks = [psutil.Process(pid) if pid != os.getpid() else None for pid in rank_pids]
        self.interval_s = interval_s
        self.driver_peak = 0
        self.label = "start"
        self.stage_peaks: dict[str, int] = {}
        self.rank_peaks = [0] * len(self.ranks)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="peak-rss", daemon=True)

    def __enter__(self) -> "PeakRss":
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> None:
        rss, label = self.driver.memory_info().rss, self.label
        self.driver_peak = max(self.driver_peak, rss)
        self.stage_peaks[label] = max(self.stage_peaks.get(label, 0), rss)
        for i, rank in enumerate(self.ranks):
            if rank is not None:
                try:
                    self.rank_peaks[i] = max(self.rank_peaks[i], rank.memory_info().rss)
                except Exception:  # a rank that exited keeps the peak it had
                    pass


def traced(trainer_cls: type, peaks: PeakRss) -> type:
    """`trainer_cls` labelling `peaks` with the stage that runs, and noting the batch's tensor bytes."""

    from core_v1.transfer_store import traffic

    class Traced(trainer_cls):
        store_bytes: list[int] = []

        def step(self):
            peaks.label = "gen"  # submit, wait for and take the batch
            before = traffic.snapshot()
            metrics = super().step()
            after = traffic.snapshot()
            Traced.store_bytes.append(sum(after[k] - before[k] for k in ("put_bytes", "got_bytes")))
            peaks.label = "between steps"
            return metrics

        def _stage(self, name, stage, batch, metrics):
            peaks.label = name
            batch = super()._stage(name, stage, batch, metrics)
            peaks.label = "step end"  # weight sync, data metrics
            return batch

    return Traced


def measure(batch_size: int, assets: dict[str, Path], out_dir: Path, workload: Workload) -> Measurement:
    """Train `workload.steps` steps at `batch_size` in this process (Ray is started if not up) and
    return the peaks. Ranks that run inside the driver (a one-rank group) report no peak of their own."""
    import psutil

    from core_v1.config import load_config
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.constraints import refuse_unrunnable
    from core_v1.trainer.setup import build_components

    config = load_config(overrides(assets, out_dir, batch_size, workload), config_name="quickstart")
    refuse_unrunnable(config)
    trainer_cls = get_trainer_cls(config.trainer.v1.trainer_mode)
    components = build_components(
        config, replay_buffer_cls=trainer_cls.replay_buffer_cls, partial_rollout=trainer_cls.partial_rollout
    )
    try:
        pids = [rank["pid"] for rank in components.workers.placement]
        peaks = PeakRss(pids)
        trainer_cls = traced(trainer_cls, peaks)
        trainer = trainer_cls(config, components)
        start = psutil.Process().memory_info().rss
        began = time.perf_counter()
        with peaks:
            trainer.fit()
        seconds = time.perf_counter() - began
    finally:
        components.close()
    return Measurement(
        batch_size=batch_size,
        rows=batch_size * workload.n,
        driver_start=start / MIB,
        driver_peak=peaks.driver_peak / MIB,
        driver_maxrss=_maxrss_mib(),
        rank_peaks=[p / MIB for p, pid in zip(peaks.rank_peaks, pids) if pid != os.getpid()],
        driver_stage_peaks={k: v / MIB for k, v in peaks.stage_peaks.items()},
        store_bytes=list(trainer_cls.store_bytes),
        seconds=seconds,
    )


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


# ----------------------------------------------------------------------------- reporting
def ratios(base: Measurement, other: Measurement) -> dict[str, float]:
    """`other / base` for the driver's peak, its whole-life peak, and the largest rank peak."""
    out = {
        "driver_peak": other.driver_peak / base.driver_peak,
        "driver_maxrss": other.driver_maxrss / base.driver_maxrss,
    }
    if base.rank_peaks and other.rank_peaks:
        out["rank_peak"] = max(other.rank_peaks) / max(base.rank_peaks)
    return out


def report(results: Sequence[Measurement]) -> str:
    lines = ["batch  rows   driver start  driver peak  driver maxrss  rank peaks (MiB)        seconds"]
    for m in results:
        ranks = " ".join(f"{p:7.1f}" for p in m.rank_peaks) or "(in the driver)"
        lines.append(
            f"{m.batch_size:5d} {m.rows:5d}  {m.driver_start:12.1f} {m.driver_peak:12.1f} "
            f"{m.driver_maxrss:14.1f}  {ranks:22s}  {m.seconds:7.1f}"
        )
    for m in results:
        stages = ", ".join(f"{name} {peak:.1f}" for name, peak in m.driver_stage_peaks.items())
        lines.append(
            f"batch {m.batch_size}: trajectory-tensor bytes through the driver per step "
            f"{m.store_bytes}; driver peak by stage (MiB): {stages}"
        )
    base = results[0]
    for m in results[1:]:
        r = ratios(base, m)
        rank = f", largest rank peak {r['rank_peak']:.3f}" if "rank_peak" in r else ""
        grown = m.driver_peak - base.driver_peak
        per_row = f" = {grown * 1024 / (m.rows - base.rows):.1f} KiB per added row" if m.rows != base.rows else ""
        lines.append(
            f"{m.batch_size} vs {base.batch_size}: driver peak {r['driver_peak']:.3f} ({grown:+.1f} MiB"
            f"{per_row}), driver maxrss {r['driver_maxrss']:.3f}{rank}"
        )
    return "\n".join(lines)


# ----------------------------------------------------------------------------------- entry
def run_one_in_subprocess(batch_size: int, root: Path, workload: Workload, sizes: Sequence[int]) -> Measurement:
    """One size in a fresh driver process (and a fresh Ray), so no run inherits another's heap."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.driver_memory",
        "--one",
        str(batch_size),
        "--root",
        str(root),
        "--sizes",
        *map(str, sizes),
        *workload_args(workload),
    ]
    done = subprocess.run(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True, check=True)
    line = next(line for line in done.stdout.splitlines() if line.startswith(RESULT_PREFIX))
    return Measurement(**json.loads(line[len(RESULT_PREFIX) :]))


def workload_args(workload: Workload) -> list[str]:
    return [
        "--n",
        str(workload.n),
        "--prompt-length",
        str(workload.prompt_length),
        "--micro-batch",
        str(workload.micro_batch),
        "--response-length",
        str(workload.response_length),
        "--vocab",
        str(workload.vocab),
        "--steps",
        str(workload.steps),
        "--ranks",
        str(workload.ranks),
    ]


def parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--prompt-length", type=int, default=1024)
    parser.add_argument("--response-length", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: measure one size here
    parser.add_argument("--root", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> list[Measurement]:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    args = parse(argv)
    workload = Workload(
        n=args.n,
        prompt_length=args.prompt_length,
        response_length=args.response_length,
        micro_batch=args.micro_batch,
        vocab=args.vocab,
        steps=args.steps,
        ranks=args.ranks,
    )
    if args.one is not None:
        root = Path(args.root)
        assets = {"model": root / "assets" / "model", "train": root / "assets" / "train.parquet"}
        result = measure(args.one, assets, root / f"run_{args.one}", workload)
        print(RESULT_PREFIX + json.dumps(asdict(result)), flush=True)
        return [result]
    with tempfile.TemporaryDirectory(prefix="driver_memory_") as tmp:
        root = Path(tmp)
        make_assets(root / "assets", workload, args.sizes)
        results = [run_one_in_subprocess(size, root, workload, args.sizes) for size in args.sizes]
    print(
        f"workload: {workload.n} samples per prompt, ~{workload.prompt_length}-token prompts, "
        f"{workload.response_length}-token responses (EOS ignored), micro-batches of {workload.micro_batch}, "
        f"vocab {workload.vocab}, {workload.steps} steps, {workload.ranks} CPU ranks"
    )
    print(report(results))
    return results


if __name__ == "__main__":
    main()
