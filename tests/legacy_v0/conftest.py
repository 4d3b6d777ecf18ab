"""Fixtures for the V0 tests: small V0/V1 configs on the shared tiny model, and V0/V1 runners."""

from __future__ import annotations

from pathlib import Path

import pytest

from core_v1.config import PPOConfig, load_config
from tests.conftest import quickstart_overrides

DENSE_REWARD = Path(__file__).with_name("dense_reward.py")
AGENT_LOOP_PLUGINS = Path(__file__).with_name("agent_loop_plugins.py")
TOOL_YAML = "tools:\n  - class_name: core_v1.agent_loop.tools.gsm8k.Gsm8kTool\n    config: {type: native}\n"


def small_run_overrides(assets: dict, out_dir: Path, steps: int, *extra: str, placement: str = "local") -> list[str]:
    """4 prompts x 4 samples per step, two mini-batches, a dense reward (see dense_reward.py), and no
    rollout importance weights: in sync they are 1 up to float noise that depends on how the engine
    batched each request, which V0 and V1 do differently; number-for-number comparisons leave it out."""
    return quickstart_overrides(
        assets,
        out_dir,
        steps,
        "data.train_batch_size=4",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.rollout.n=4",
        "trainer.test_freq=-1",
        "trainer.logger=[jsonl]",
        f"reward.custom_reward_function.path={DENSE_REWARD}",
        "algorithm.rollout_correction.rollout_is=null",
        *extra,
        placement=placement,
    )


def tool_agent_overrides(tmp_path: Path, loop: str = "tool_agent") -> tuple[str, ...]:
    """A `loop` run (`tool_agent` or one built on it) with rlbridge's Gsm8kTool from a tool YAML and
    the test tool-call format of agent_loop_plugins.py (loaded as a plug-in, so V1's agent-loop
    workers have it too): one tool round per session with budget left after its first turn."""
    tools = tmp_path / "tools.yaml"
    tools.write_text(TOOL_YAML)
    return (
        f"actor_rollout_ref.rollout.agent.default_agent_loop={loop}",
        f"actor_rollout_ref.rollout.multi_turn.tool_config_path={tools}",
        "actor_rollout_ref.rollout.multi_turn.format=every_turn_submits_for_v0_test",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        "data.max_response_length=48",
        f"trainer.v1.plugins=[{AGENT_LOOP_PLUGINS}]",
    )


def with_agent_names(assets: dict, out_dir: Path) -> dict:
    """`assets` with a train file whose rows alternate `agent_name` "tool_agent" and None (the
    run's default loop), as verl's multi-turn data routes rows per row."""
    import pandas as pd

    rows = pd.read_parquet(assets["train"])
    rows["agent_name"] = [None if row % 2 else "tool_agent" for row in range(len(rows))]
    out_dir.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(out_dir / "train_with_agent_names.parquet")
    return {**assets, "train": out_dir / "train_with_agent_names.parquet"}


@pytest.fixture
def small_config(tiny_assets, tmp_path):
    """`small_config(steps, *overrides, out=None) -> PPOConfig` on the quickstart preset."""

    def build(steps: int, *extra: str, out: Path | None = None) -> PPOConfig:
        return load_config(
            small_run_overrides(tiny_assets, out or tmp_path / "run", steps, *extra), config_name="quickstart"
        )

    return build


def run_v1_sync(config: PPOConfig) -> list[dict]:
    """V1 `sync` as the entrypoint runs it, plus the algorithm's stages (ReMax's baseline); returns
    the trainer's per-step metrics."""
    from core_v1.trainer import get_trainer_cls
    from core_v1.trainer.setup import build_components

    trainer_cls = get_trainer_cls("sync")
    trainer_cls.check_config(config)
    components = build_components(config, replay_buffer_cls=trainer_cls.replay_buffer_cls)
    try:
        return trainer_cls(config, components).fit()
    finally:
        components.close()


@pytest.fixture(scope="package")
def ray_runtime():
    """One Ray runtime for every V1 run of this package (starting Ray costs more than the runs)."""
    from tests.conftest import local_ray

    with local_ray():
        yield
