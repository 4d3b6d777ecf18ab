"""Soak: both async modes train for 200+ steps on the tiny model under faults, and nothing is lost.

Faults, each through the project's own mechanism:

- aborts: on ABORT_RATE of the steps, while the batch is generating, the trainer aborts every
  in-flight request (the rollout client's `abort_all`) and resumes; partial rollout resubmits them;
- failing rewards: the reward function (benchmarks/soak_faults.py) raises on some samples and hangs
  past `reward.timeout_s` on others; those samples are marked failed and counted;
- tool timeouts: every trajectory calls a function tool in the tool sandbox (benchmarks/soak_tools.py)
  that now and then hangs past `multi_turn.tool_timeout_s`; the sandbox kills its worker process
  and the model is told the call timed out (counted where the trajectory is trained: a group that
  waited on a hung tool is often evicted as stale instead).

After EVERY step it checks, and prints, the accounting of prompt groups

    submitted == trained + evicted + in flight

from four independent counters: `submitted` from the agent-loop manager, `trained` from the uids of
the batches the actor trained on, `evicted` from the replay buffer's eviction counts (stale,
wholly failed), `in flight` from the group rows live in the transfer store (generating, or finished
and not yet trained); plus the store's own row accounting (put == consumed + evicted + live). A
broken invariant raises `InvariantBroken` with the numbers: the run stops loudly.

    nice -n 10 python -m benchmarks.soak [--steps 200] [--modes colocate_async separate_async]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
MODES = ("colocate_async", "separate_async")
ABORT_RATE = 0.3
MODE_OVERRIDES = {
    "colocate_async": ["trainer.v1.trainer_mode=colocate_async"],
    # One step is then one update (batch 4 = 1 x mini-batch 4), and weights sync after each.
    "separate_async": [
        "trainer.v1.trainer_mode=separate_async",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
        "trainer.v1.separate_async.parameter_sync_step=1",
    ],
}


class InvariantBroken(AssertionError):
    """A prompt group (or a store row) was lost or counted twice."""


@dataclass
class GroupLedger:
    """What happened to the prompt groups so far, and the faults that were injected."""

    trained: int = 0
    evicted: int = 0
    aborted_requests: int = 0
    failed_samples: int = 0
    tool_timeouts: int = 0
    lines: list[str] = field(default_factory=list)


def check_invariant(step: int, submitted: int, ledger: GroupLedger, in_flight: int, store_stats: Any) -> str:
    """The step's accounting line; raises InvariantBroken when it does not balance."""
    groups_balance = submitted == ledger.trained + ledger.evicted + in_flight
    line = (
        f"step {step:4d}  submitted {submitted:5d} {'==' if groups_balance else '!='} trained {ledger.trained:5d}"
        f" + evicted {ledger.evicted:3d} + in flight {in_flight:3d}   store rows: {store_stats.describe()}"
        f"   faults so far: aborted requests {ledger.aborted_requests}, failed samples "
        f"{ledger.failed_samples}, tool timeouts {ledger.tool_timeouts}"
    )
    if not groups_balance or not store_stats.balanced:
        raise InvariantBroken(f"accounting broken after step {step}: {line}")
    return line


def with_faults(trainer_cls: type, abort_rate: float, rng: random.Random, report: Callable[[str], None]) -> type:
    """`trainer_cls` (an async mode) that aborts generation at random and checks the accounting
    after every step."""
    from core_v1.trainer.generation import live_group_count

    class SoakTrainer(trainer_cls):
        def __init__(self, config: Any, components: Any):
            super().__init__(config, components)
            self.ledger = GroupLedger()

        def on_sample_begin(self):
            metrics = super().on_sample_begin() or {}
            if rng.random() < abort_rate:
                # A random point early in the batch's generation, with requests running: the batch of
                # a tiny model can finish within tens of milliseconds, so the wait comes first and the
                # random part stays short (a longer pause missed every request on a fast machine).
                self._wait_for_requests_in_flight(deadline=time.monotonic() + 2.0)
                time.sleep(rng.uniform(0.0, 0.005))
                aborted = self.checkpoint_manager.loop.run(self.components.rollout_client.abort_all())
                self.checkpoint_manager.resume_generation_replicas()
                self.ledger.aborted_requests += aborted
            return metrics

        def _wait_for_requests_in_flight(self, deadline: float) -> None:
            # An abort is a fault only while requests run: on a busy machine a fixed pause could fire
            # it when generation had not started yet (or had already finished) and test nothing.
            client = self.components.rollout_client
            while time.monotonic() < deadline:
                if sum(self.checkpoint_manager.loop.run(client.call_all("get_num_running"))) > 0:
                    return
                time.sleep(0.005)

        def _update_actor(self, batch, metrics):
            self.ledger.trained += len(set(batch.column("uid")))
            self.ledger.tool_timeouts += sum(int(m.get("tool_timeouts", 0)) for m in batch.column("agent_metrics"))
            return super()._update_actor(batch, metrics)

        def step(self) -> dict:
            metrics = super().step()
            self.ledger.evicted += int(metrics["training/off_policy/evicted_samples"])
            self.ledger.failed_samples += int(metrics["rollout/failed_samples"])
            line = check_invariant(
                self.global_steps,
                self.agent_loop_manager.submitted,
                self.ledger,
                live_group_count(self.components.store),
                self.components.store.stats("train"),
            )
            self.ledger.lines.append(line)
            report(f"{self.config.trainer.v1.trainer_mode:<15}{line}")
            return metrics

    return SoakTrainer


def soak_overrides(assets: dict[str, Path], out: Path, mode: str, steps: int) -> list[str]:
    """The quickstart preset on the tiny model, small batches, the tool agent, and the faults."""
    return [
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['val']}",
        f"actor_rollout_ref.model.path={assets['model']}",
        f"trainer.default_local_dir={out}",
        f"trainer.total_training_steps={steps}",
        "trainer.test_freq=-1",
        "trainer.progress_bar=false",
        "trainer.logger=[jsonl]",
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.rollout.n=2",
        "data.max_response_length=24",
        # One sequence at a time: the requests of a step then stay in flight long enough for an
        # injected abort to hit them (all at once, a tiny model's turn is over in about 3 ms).
        "actor_rollout_ref.rollout.max_num_seqs=1",
        # A group may wait one step beyond the pipeline's depth; stragglers (a hung tool) are evicted.
        "trainer.v1.sampler.max_off_policy_threshold=2",
        f"trainer.v1.plugins=[{HERE / 'soak_faults.py'}]",
        f"reward.custom_reward_function.path={HERE / 'soak_faults.py'}",
        "reward.timeout_s=0.3",
        "actor_rollout_ref.rollout.agent.default_agent_loop=soak_tool_agent",
        "actor_rollout_ref.rollout.multi_turn.enable=true",
        "actor_rollout_ref.rollout.multi_turn.format=soak_check_every_answer",
        f"actor_rollout_ref.rollout.multi_turn.function_tool_path={HERE / 'soak_tools.py'}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "actor_rollout_ref.rollout.multi_turn.tool_timeout_s=1.0",
        *MODE_OVERRIDES[mode],
    ]


def run_soak(
    assets: dict[str, Path],
    out: Path,
    mode: str,
    steps: int,
    *,
    abort_rate: float = ABORT_RATE,
    seed: int = 0,
    report: Callable[[str], None] = print,
) -> GroupLedger:
    """Train `mode` for `steps` steps under the faults, checking the accounting after each step, as
    `core_v1.main_ppo.run_v1` runs a mode (the same checks, components and `fit`)."""
    from core_v1.config import load_config
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.constraints import refuse_unrunnable
    from core_v1.trainer.setup import build_components

    config = load_config(soak_overrides(assets, out, mode, steps), config_name="quickstart")
    refuse_unrunnable(config)
    trainer_cls = with_faults(get_trainer_cls(mode), abort_rate, random.Random(seed), report)
    components = build_components(
        config, replay_buffer_cls=trainer_cls.replay_buffer_cls, partial_rollout=trainer_cls.partial_rollout
    )
    try:
        trainer = trainer_cls(config, components)
        trainer.fit()
    finally:
        components.close()
    return trainer.ledger


def make_tiny_assets(root: Path) -> dict[str, Path]:
    """The test suite's tiny fixture model (tests/conftest.py) and the quickstart data."""
    from examples.quickstart.prepare import NUMBER_WORDS, write_data
    from examples.tiny_model import make_tiny_model

    train, val = write_data(root / "data")
    return {
        "model": make_tiny_model(root / "model", NUMBER_WORDS, hidden_size=32, num_layers=2),
        "train": train,
        "val": val,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument("--abort-rate", type=float, default=ABORT_RATE, help="share of steps with an abort")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    import os

    import ray
    import torch

    out = args.out or Path(tempfile.mkdtemp(prefix="soak_"))
    assets = make_tiny_assets(out / "assets")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    torch.set_num_threads(1)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    for mode in args.modes:
        started = time.perf_counter()
        ledger = run_soak(
            assets,
            out / mode,
            mode,
            args.steps,
            abort_rate=args.abort_rate,
            report=lambda line: print(line, flush=True),
        )
        print(
            f"{mode}: {args.steps} steps in {time.perf_counter() - started:.0f} s, the invariant held after every "
            f"step; trained {ledger.trained} groups, evicted {ledger.evicted}; injected: "
            f"{ledger.aborted_requests} aborted requests, {ledger.failed_samples} failed samples, "
            f"{ledger.tool_timeouts} tool timeouts",
            flush=True,
        )


if __name__ == "__main__":
    main()
