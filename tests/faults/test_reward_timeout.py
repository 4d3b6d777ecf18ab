"""A reward function that hangs marks its sample failed after `reward.timeout_s`; the run goes on
and nothing else is lost."""

from __future__ import annotations

import asyncio
import json
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest

from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from core_v1.reward.loop import RewardScorer, RewardTimeoutError
from tests.conftest import quickstart_overrides_on_ray


def _scorer(tmp_path, body: str, timeout_s: float) -> RewardScorer:
    reward_file = tmp_path / "reward.py"
    reward_file.write_text(textwrap.dedent(body))
    custom = SimpleNamespace(path=str(reward_file), name="compute_score", reward_kwargs={})
    return RewardScorer(SimpleNamespace(custom_reward_function=custom, reward_kwargs={}, timeout_s=timeout_s))


def test_a_hung_sync_reward_times_out_without_blocking_the_loop(tmp_path):
    scorer = _scorer(
        tmp_path,
        """
        import time
        def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            if solution_str == "hang":
                time.sleep(3600)
            return 1.0
    """,
        timeout_s=0.5,
    )

    async def both():
        return await asyncio.gather(scorer.score({}, "hang"), scorer.score({}, "fine"), return_exceptions=True)

    started = time.monotonic()
    hung, fine = asyncio.run(both())
    assert isinstance(hung, RewardTimeoutError) and "reward.timeout_s" in str(hung)
    assert fine == (1.0, {})
    assert time.monotonic() - started < 5
    assert all(t.daemon for t in threading.enumerate() if t.name.startswith("rlbridge-compute_score"))


def test_an_async_reward_is_bounded_too(tmp_path):
    scorer = _scorer(
        tmp_path,
        """
        import asyncio
        async def compute_score(data_source, solution_str, ground_truth, extra_info=None):
            await asyncio.sleep(3600)
    """,
        timeout_s=0.3,
    )
    with pytest.raises(RewardTimeoutError):
        asyncio.run(scorer.score({}, "x"))


@pytest.mark.slow
def test_a_run_with_a_hanging_reward_counts_the_failures_and_finishes(tiny_assets, ray_runtime, tmp_path):
    reward_file = tmp_path / "hanging_reward.py"
    reward_file.write_text(
        textwrap.dedent("""
        import time
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            if ground_truth in ("3", "5"):
                time.sleep(3600)
            return 1.0 if solution_str.strip() == ground_truth else 0.0
    """)
    )
    config = load_config(
        quickstart_overrides_on_ray(
            tiny_assets,
            tmp_path,
            2,
            f"reward.custom_reward_function.path={reward_file}",
            "reward.timeout_s=0.5",
            "trainer.test_freq=-1",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=2",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    failed = sum(r["rollout/failed_samples"] for r in rows)
    assert failed > 0 and failed % 2 == 0  # whole groups of the hanging prompts
