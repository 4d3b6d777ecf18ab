"""`build_components` on a start-up whose last step fails: everything it started is shut down."""

from __future__ import annotations

import time

import pytest

from core_v1.config import load_config
from core_v1.trainer.setup import build_components
from tests.conftest import quickstart_overrides_on_ray


def _alive_actor_ids() -> set[str]:
    """The cluster's live actors, read from its control store (Ray's state API needs the dashboard,
    which the tests' runtime does not start)."""
    from ray._private import state

    return {actor_id for actor_id, actor in state.actors().items() if actor["State"] in ("ALIVE", 2)}


def _settled(before: set[str], timeout_s: float = 90.0) -> set[str]:
    """The actors alive now that were not before (killed actors take a moment to be reported dead:
    over 30 s once on the 2-core machine at load 16)."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = _alive_actor_ids() - before
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


@pytest.mark.slow
def test_a_failed_last_step_leaves_no_ray_actor_behind(tiny_assets, ray_runtime, tmp_path):
    # The reward model is the last part built: by then the store actor, the replica, the agent-loop
    # workers, the training rank and the weight sync are all up.
    config = load_config(
        quickstart_overrides_on_ray(
            tiny_assets,
            tmp_path,
            1,
            "reward.reward_model.enable=true",
            f"reward.reward_model.model_path={tmp_path / 'no_such_model'}",
        ),
        config_name="quickstart",
    )
    before = _alive_actor_ids()
    with pytest.raises(OSError, match="no_such_model"):
        build_components(config)
    assert _classes(_settled(before)) == []


def _classes(actor_ids: set[str]) -> list[str]:
    """The class names of these actors (what a failure should name)."""
    from ray._private import state

    return sorted(state.actors()[actor_id].get("ActorClassName", actor_id) for actor_id in actor_ids)


def test_the_actors_are_counted(tiny_assets, ray_runtime):
    """The count above sees an actor a start-up leaves (else its zero would prove nothing)."""
    import ray

    before = _alive_actor_ids()
    actor = ray.remote(num_cpus=0)(type("Idle", (), {"ping": lambda self: 1})).remote()
    ray.get(actor.ping.remote())
    assert len(_alive_actor_ids() - before) == 1
    ray.kill(actor)
    assert _settled(before) == set()
