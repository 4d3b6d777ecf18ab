"""sync vs colocate_async vs separate_async on one long-tailed workload, in one invocation.

Workload: the quickstart task (GRPO, `a + b =`, its preset and tiny model), with every session's
token budget drawn long-tailed from its seed -- most answers 2-6 tokens, one in eight between
half and all of `--max-response-length` -- and EOS ignored, so each trajectory generates exactly
its budget (the p50/p99 of the budgets are printed). The same seed gives the three modes the
same prompts and the same budgets.

Each mode trains `--steps` steps through the real entrypoint (`core_v1.main_ppo.run_v1`). The
first step is left out of the timings (model warm-up, and the async pipelines filling). Printed
per mode: trajectories/s and response tokens/s over the timed steps, the ratio to sync, and the
final score (mean `critic/score/mean` of the last three steps). From sync's phase times
(T_gen = time waiting for the batch, T_train = the rest of the step), the ideal speed-up from
overlap alone: (T_gen + T_train) / max(T_gen, T_train); cutting the tail can add to it.

Run: python -m benchmarks.trainer_modes [--steps 6] [--device cpu|cuda] [--max-response-length 96]
On GPUs, separate_async gets its own rollout GPU (`rollout.nnodes=1`) and syncs weights over
`nccl` when two or more GPUs are visible (`gloo` otherwise).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from uuid import uuid4

from core_v1.agent_loop import AgentLoopBase, AgentLoopOutput
from core_v1.utils.seeding import derive_seed

MODES = ("sync", "colocate_async", "separate_async")


def budget(rng: random.Random, longest: int) -> int:
    """A long-tailed response budget: mostly 2-6 tokens, one in eight in [longest / 2, longest]."""
    return rng.randint(longest // 2, longest) if rng.random() < 1 / 8 else rng.randint(2, 6)


class LongTailAgentLoop(AgentLoopBase):
    """Single turn whose token budget is drawn from the session seed (EOS ignored)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        rng = random.Random(derive_seed(kwargs["uid"], kwargs["session_id"]))
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        params = {
            **sampling_params,
            "max_tokens": budget(rng, self.config.actor_rollout_ref.rollout.response_length),
            "ignore_eos": True,
        }
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=params
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=list(output.token_ids),
            response_mask=[1] * len(output.token_ids),
            response_logprobs=list(output.log_probs),
        )


def mode_overrides(mode: str, device: str) -> list[str]:
    if mode != "separate_async":
        return [f"trainer.v1.trainer_mode={mode}"]
    import torch

    backend = "nccl" if device == "cuda" and torch.cuda.device_count() >= 2 else "gloo"
    pool = ["actor_rollout_ref.rollout.nnodes=1"] if device == "cuda" else []
    return [
        "trainer.v1.trainer_mode=separate_async",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={backend}",
        *pool,
    ]


def run_mode(mode: str, args: argparse.Namespace, work: Path, loop_yaml: Path) -> list[dict]:
    from core_v1.config import load_config
    from core_v1.main_ppo import run_v1

    out = work / mode
    config = load_config(
        [
            f"data.train_files={work / 'data/train.parquet'}",
            "data.val_files=null",
            f"actor_rollout_ref.model.path={work / 'model'}",
            f"trainer.default_local_dir={out}",
            f"trainer.total_training_steps={args.steps}",
            f"data.max_response_length={args.max_response_length}",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loop_yaml}",
            "actor_rollout_ref.rollout.agent.default_agent_loop=long_tail",
            f"trainer.device={args.device}",
            "trainer.test_freq=-1",
            "trainer.logger=[jsonl]",
            "trainer.progress_bar=false",
            *mode_overrides(mode, args.device),
        ],
        config_name="quickstart",
    )
    run_v1(config)
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def summarize(rows: list[dict], rows_per_step: int) -> dict[str, float]:
    timed = rows[1:]
    seconds = sum(r["timing_s/step"] for r in timed)
    response_tokens = sum(r["response_length/mean"] * rows_per_step for r in timed)
    return {
        "seconds": seconds,
        "samples_per_s": rows_per_step * len(timed) / seconds,
        "tokens_per_s": response_tokens / seconds,
        "t_gen": statistics.mean(r["timing_s/gen"] for r in timed),
        "t_train": statistics.mean(r["timing_s/step"] - r["timing_s/gen"] for r in timed),
        "final_score": statistics.mean(r["critic/score/mean"] for r in rows[-3:]),
        "staleness": statistics.mean(r.get("training/off_policy/trajectory_staleness/mean", 0.0) for r in timed),
    }


def workload_percentiles(longest: int, draws: int = 20000) -> tuple[float, float]:
    rng = random.Random(0)
    lengths = sorted(budget(rng, longest) for _ in range(draws))
    return lengths[draws // 2], lengths[int(draws * 0.99)]


def prepare(work: Path, hidden_size: int, num_layers: int) -> Path:
    from examples.quickstart.prepare import NUMBER_WORDS, write_data
    from examples.tiny_model import make_tiny_model

    write_data(work / "data")
    make_tiny_model(work / "model", NUMBER_WORDS, hidden_size=hidden_size, num_layers=num_layers, max_positions=512)
    # The agent loop is imported by name in every agent-loop worker process.
    loop_yaml = work / "agent_loops.yaml"
    loop_yaml.write_text(
        f"- name: long_tail\n  _target_: {__spec__.name if __spec__ else 'trainer_modes'}.LongTailAgentLoop\n"
    )
    return loop_yaml


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--max-response-length", type=int, default=96)
    parser.add_argument("--hidden-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    args = parser.parse_args()
    if args.steps < 4:
        parser.error("--steps must be >= 4 (the first step is not timed, the score uses the last three)")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # workers import this module by name

    p50, p99 = workload_percentiles(args.max_response_length)
    print(
        f"workload: response budgets p50={p50} p99={p99} (p99/p50={p99 / p50:.1f}), EOS ignored; "
        f"{args.steps} steps per mode on {args.device}"
    )
    with tempfile.TemporaryDirectory(prefix="trainer_modes_") as tmp:
        work = Path(tmp)
        loop_yaml = prepare(work, args.hidden_size, args.layers)
        results = {}
        for mode in args.modes:
            started = time.perf_counter()
            rows = run_mode(mode, args, work, loop_yaml)
            rows_per_step = 16 * 8  # the quickstart preset: 16 prompts x 8 samples
            results[mode] = summarize(rows, rows_per_step)
            print(f"  {mode}: done in {time.perf_counter() - started:.0f}s wall")
    report(results)


def report(results: dict[str, dict[str, float]]) -> None:
    base = results.get("sync")
    print(
        f"\n{'mode':<16}{'samples/s':>11}{'tokens/s':>11}{'vs sync':>9}{'T_gen s':>9}{'T_train s':>10}"
        f"{'staleness':>10}{'final score':>12}"
    )
    for mode, r in results.items():
        ratio = f"{r['samples_per_s'] / base['samples_per_s']:.2f}x" if base else "-"
        print(
            f"{mode:<16}{r['samples_per_s']:>11.1f}{r['tokens_per_s']:>11.1f}{ratio:>9}{r['t_gen']:>9.2f}"
            f"{r['t_train']:>10.2f}{r['staleness']:>10.2f}{r['final_score']:>12.3f}"
        )
    if base:
        bound = (base["t_gen"] + base["t_train"]) / max(base["t_gen"], base["t_train"])
        print(
            f"\nideal overlap bound from sync's phases: (T_gen + T_train) / max(T_gen, T_train) = "
            f"({base['t_gen']:.2f} + {base['t_train']:.2f}) / {max(base['t_gen'], base['t_train']):.2f} = {bound:.2f}x"
        )


if __name__ == "__main__":
    main()
