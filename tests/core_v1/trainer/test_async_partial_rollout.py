"""Partial rollout through colocate_async's own hooks: a trajectory aborted mid-generation, put to
sleep, given (unchanged) weights and resumed is token for token the uninterrupted one."""

from __future__ import annotations

import time

import pytest

from core_v1.trainer.modes.colocate_async import ColocateAsyncTrainer
from tests.core_v1.trainer._async_harness import build_pipeline, close, pipeline_config


def _generate_one_group(trainer, interrupt: bool) -> dict:
    """Submit one prompt group; with `interrupt`, run the colocate hooks while it generates."""
    trainer.global_steps = 1
    trainer.pipeline.submit(1, trainer.global_steps)
    engine = trainer.server.engine
    if interrupt:
        started = engine.stats.generated_tokens
        while engine.stats.generated_tokens < started + 10:  # well inside the 40-60 token budget
            time.sleep(0.001)
        trainer.on_sample_end()  # abort + sleep
        assert sum(trainer.components.rollout_client.in_flight()) > 0  # resubmitted, held at the gate
        trainer.on_step_end()  # update_weights (same weights, version 1) + resume
    trainer.agent_loop_manager.drain()
    store = trainer.components.store
    tags = {k: t for k, t in store.list("train").items() if "_" in k}
    rows = store.get("train", sorted(tags), fields=["response_ids", "response_logprobs"])
    return {
        key: (rows["response_ids"][i].tolist(), rows["response_logprobs"][i].tolist(), tags[key])
        for i, key in enumerate(sorted(tags))
    }


@pytest.fixture
def pipelines(tiny_assets, tmp_path):
    # Only the long-tail budget's long branch: rows of 40-60 tokens that the abort lands inside.
    config = pipeline_config(
        tiny_assets,
        tmp_path,
        "actor_rollout_ref.rollout.n=1",
        "data.train_batch_size=1",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
    )
    made = [build_pipeline(ColocateAsyncTrainer, config, str(tiny_assets["model"]))[0] for _ in range(2)]
    yield made
    for trainer in made:
        close(trainer)


def test_resumed_partial_rollout_equals_uninterrupted(pipelines, monkeypatch):
    from tests.core_v1.trainer import _async_harness

    monkeypatch.setattr(_async_harness, "long_tail_length", lambda rng: 50)
    interrupted = _generate_one_group(pipelines[0], interrupt=True)
    uninterrupted = _generate_one_group(pipelines[1], interrupt=False)
    assert interrupted.keys() == uninterrupted.keys() and len(interrupted) == 1
    ((tokens, log_probs, tags),) = interrupted.values()
    ((ref_tokens, ref_log_probs, ref_tags),) = uninterrupted.values()
    assert len(tokens) == 50 and tokens == ref_tokens
    assert log_probs == pytest.approx(ref_log_probs, abs=1e-5)
    # The interrupted one really spanned the weight update; the other never saw one.
    assert (tags["min_global_steps"], tags["max_global_steps"]) == (0, 1)
    assert (ref_tags["min_global_steps"], ref_tags["max_global_steps"]) == (0, 0)
