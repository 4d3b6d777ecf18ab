"""A tiny Qwen2-VL learns to count white squares in an image with GRPO on the CPU
(examples/vision_count: verl's multimodal parquet format, the launch in its train.py), on V1 sync,
V1 colocate_async and V0 (`trainer.use_v1=false`), one run per mode shared by the tests of this
module: 20 steps in sync (V1 and V0), 22 in colocate_async, which trains on batches sampled a step
earlier and climbs a step or two later.

The bar is the quickstart's (the last three steps' mean score at least 0.8 and 0.4 above the first
three's). Blind to the image, a policy scores at most 0.625 (always answering 2), so reaching 0.8
needs the images in the rollout and in the training forwards. colocate_async's bar is 0.7: its curve
sways around 0.8 at these lengths (timing decides which groups fill a batch), and 0.7 still needs
the images. The recomputed log-probs of the sampled tokens match the rollout's to float noise only
when the actor sees the images the engine saw. V0 and V1 run the same training.
"""

from __future__ import annotations

import pytest

from benchmarks.async_reliability import BAR_GAIN, quickstart_bar
from core_v1.main_ppo import main
from core_v1.utils.tracking import read_metrics
from examples.vision_count.train import launch_args
from tests.conftest import local_ray

# The learning rate is constant, so a shorter run is the first steps of a longer one. Measured here
# (2026-12-05, 25 steps): sync's last three means were 0.877 at step 20 (0.823 at 18), colocate_async's
# 0.833 at 20 and 0.880 at 22; from 0.06-0.08 over the first three. colocate_async's last three at
# step 22 (2026-12-06): 0.783 beside the rest of the suite, 0.732 twice with reproducible=true (its
# peak 0.844 at step 19).
SYNC_STEPS = 20
ASYNC_STEPS = 22
ASYNC_BAR_FINAL = 0.7  # above what a policy blind to the image can score (0.625)
EXACT_STEPS = 15  # V0 and V1 agree to 1e-4 per step over these (see the parity test)


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    from examples.vision_count.prepare import prepare

    root = tmp_path_factory.mktemp("vision_count")
    prepare(root / "data", root / "model")
    return root


def _train(task, out, steps: int, *extra: str) -> list[dict]:
    # Ray per run, cleared after it when something still holds its CPUs: on a loaded 2-core machine
    # the V0 run, started after both V1 runs in one runtime, once waited 600 s on its weight sync.
    with local_ray():
        code = main(
            [
                *launch_args(task / "data", task / "model", out),
                f"trainer.total_training_steps={steps}",
                "trainer.progress_bar=false",
                "trainer.logger=[jsonl]",
                *extra,
            ]
        )
    assert code == 0
    return [row for row in read_metrics(out / "metrics.jsonl") if row["step"] > 0]


@pytest.fixture(scope="module")
def v1_sync(task, tmp_path_factory) -> list[dict]:
    # In one process: the numbers of Ray actors (tests/core_v1/trainer/test_placement.py) without
    # starting three processes that load the VLM; the async run below keeps its actors (the images'
    # way through Ray's object store and the agent-loop workers).
    return _train(task, tmp_path_factory.mktemp("v1_sync"), SYNC_STEPS, "trainer.v1.placement=local")


@pytest.fixture(scope="module")
def v1_colocate_async(task, tmp_path_factory) -> list[dict]:
    return _train(
        task, tmp_path_factory.mktemp("colocate_async"), ASYNC_STEPS, "trainer.v1.trainer_mode=colocate_async"
    )


@pytest.fixture(scope="module")
def v0(task, tmp_path_factory) -> list[dict]:
    # Its replica in this process too (V0 follows the placement), as the V1 run it is compared with.
    return _train(task, tmp_path_factory.mktemp("v0"), SYNC_STEPS, "trainer.use_v1=false", "trainer.v1.placement=local")


def _assert_learns(rows: list[dict], name: str, steps: int, final_bar: float | None = None) -> None:
    scores = [row["critic/score/mean"] for row in rows]
    assert len(scores) == steps
    first, final, reached = quickstart_bar(scores)
    if final_bar is not None:
        reached = final >= final_bar and final >= first + BAR_GAIN
    assert reached, f"{name} scores: {[round(s, 2) for s in scores]}"


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run it sets up took 170-380 s on a 2-core machine at load 20
def test_v1_sync_learns_to_count_from_the_images(v1_sync):
    _assert_learns(v1_sync, "V1 sync", SYNC_STEPS)
    # Synchronous: the actor recomputes the rollout policy's log-probs, images included.
    assert max(row["training/rollout_actor_logprob_diff/mean"] for row in v1_sync) < 1e-5


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run it sets up took 170-380 s on a 2-core machine at load 20
def test_colocate_async_learns_to_count_from_batches_sampled_a_step_earlier(v1_colocate_async):
    _assert_learns(v1_colocate_async, "colocate_async", ASYNC_STEPS, ASYNC_BAR_FINAL)
    assert max(row["training/off_policy/trajectory_spans/mean"] for row in v1_colocate_async) >= 2
    assert max(row["training/off_policy/off_policy_token_fraction"] for row in v1_colocate_async) > 0


@pytest.mark.slow
@pytest.mark.timeout(1200)  # the run it sets up took 170-380 s on a 2-core machine at load 20
def test_v0_learns_to_count_as_v1_does_step_by_step(v0, v1_sync):
    _assert_learns(v0, "V0", SYNC_STEPS)
    assert max(row["training/rollout_actor_logprob_diff/mean"] for row in v0) < 1e-5
    # The two trainers' updates agree to float noise, which every update carries into the weights: by
    # step 22 the gradient norms were 0.5% apart, and in one CI run a single one of 512 sampled answers
    # flipped at step 24 (score 0.9043 against 0.9062). So the step-by-step bar holds over the steps
    # before the noise can flip a sample, and the later steps must stay within a few flipped answers.
    for step, (new, old) in enumerate(zip(v1_sync, v0), start=1):
        exact = step <= EXACT_STEPS
        assert new["critic/score/mean"] == pytest.approx(old["critic/score/mean"], abs=1e-4 if exact else 0.02), step
        assert new["actor/pg_loss"] == pytest.approx(old["actor/pg_loss"], abs=1e-4 if exact else 1e-2), step
        if exact:
            assert new["actor/grad_norm"] == pytest.approx(old["actor/grad_norm"], rel=2e-2), step
