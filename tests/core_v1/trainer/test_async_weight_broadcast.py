"""The `gloo` broadcast weight-sync backend (real process groups, real servers) and the start-up
checks of the async modes."""

from __future__ import annotations

import copy

import pytest
import torch

from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS, GlooCheckpointEngine
from core_v1.checkpoint_engine.broadcast import layout_bucket, pack_bucket, unpack_bucket
from core_v1.config import ConfigError, load_config
from core_v1.config.schema import CheckpointEngineConfig
from core_v1.main_ppo import main
from core_v1.rollout import LLMServerClient
from core_v1.rollout.server import LLMServer
from core_v1.trainer import get_trainer_cls
from core_v1.utils.aio import BackgroundLoop
from tests.conftest import quickstart_overrides_on_ray


def test_bucket_layout_round_trips_mixed_dtypes_and_shapes():
    bucket = [
        ("a", torch.randn(3, 5, dtype=torch.bfloat16)),
        ("scalar", torch.tensor(7, dtype=torch.int64)),
        ("b", torch.randn(7)),
        ("c", torch.arange(6, dtype=torch.int32).reshape(2, 3).t()),
    ]  # non-contiguous
    layout = layout_bucket(bucket)
    assert all(slot.offset % 64 == 0 for slot in layout.slots)
    received = unpack_bucket(pack_bucket(bucket, layout, torch.device("cpu")).clone(), layout)
    for (name, sent), (got_name, got) in zip(bucket, received):
        assert name == got_name and got.dtype == sent.dtype and torch.equal(got, sent)


@pytest.fixture
def servers(tiny_assets):
    made = [LLMServer.from_model(str(tiny_assets["model"]), "hf", device="cpu") for _ in range(2)]
    yield made
    for server in made:
        server.shutdown()


def _perturbed(model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """New weights for the same architecture (tied weights stay tied), as state-dict pairs."""
    changed = copy.deepcopy(model)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in changed.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator).to(parameter.dtype))
    return {name: t.detach().clone() for name, t in changed.state_dict().items()}


@pytest.mark.parametrize("bucket_megabytes", [0, 512])  # 0: every tensor in a bucket of its own
def test_gloo_broadcast_loads_new_weights_into_every_replica(servers, bucket_megabytes):
    engine = CHECKPOINT_BACKENDS.get("gloo")(CheckpointEngineConfig(update_weights_bucket_megabytes=bucket_megabytes))
    assert isinstance(engine, GlooCheckpointEngine)
    client, loop = LLMServerClient(servers), BackgroundLoop("test-broadcast")
    try:
        for version, seed in ((3, 0), (4, 1)):  # the second sync reuses the group
            weights = _perturbed(servers[0].engine.model, seed)
            metrics = loop.run(engine.sync(iter(weights.items()), client, version), timeout=120)
            for server in servers:
                assert server.weight_version == version
                state = server.engine.model.state_dict()
                assert all(torch.equal(state[name], tensor) for name, tensor in weights.items())
            assert metrics["weight_sync/bytes"] >= sum(t.numel() * t.element_size() for t in weights.values())
            assert (metrics["weight_sync/buckets"] == len(weights)) == (bucket_megabytes == 0)
        assert engine.num_replicas == 2
    finally:
        engine.close()
        loop.close()


def test_receive_before_join_is_a_clear_error(servers):
    from core_v1.rollout.types import RolloutError

    loop = BackgroundLoop("test-broadcast")
    try:
        with pytest.raises(RolloutError, match="join_weight_group"):
            loop.run(servers[0].receive_weights([], 1))
    finally:
        loop.close()


def test_nccl_without_a_gpu_is_refused():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    with pytest.raises(ConfigError, match="on CPU use gloo"):
        CHECKPOINT_BACKENDS.get("nccl")(CheckpointEngineConfig())


# ---------------------------------------------------------------------------- start-up checks
def _quickstart(tiny_assets, tmp_path, *extra):
    return load_config(quickstart_overrides_on_ray(tiny_assets, tmp_path, 1, *extra), config_name="quickstart")


def test_quickstart_needs_only_the_mode_and_backend(tiny_assets, tmp_path):
    get_trainer_cls("colocate_async").check_config(_quickstart(tiny_assets, tmp_path))
    get_trainer_cls("separate_async").check_config(
        _quickstart(tiny_assets, tmp_path, "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo")
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ((), "backend=naive"),
        (
            (
                "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
                "trainer.v1.separate_async.parameter_sync_step=2",
            ),
            r"train_batch_size \(16\) == trainer.v1.separate_async.parameter_sync_step \(2\)",
        ),
    ],
)
def test_separate_async_constraints_are_checked_with_the_fix(tiny_assets, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message):
        get_trainer_cls("separate_async").check_config(_quickstart(tiny_assets, tmp_path, *overrides))


def test_threshold_below_the_pipeline_depth_is_refused(tiny_assets, tmp_path):
    config = _quickstart(
        tiny_assets,
        tmp_path,
        "trainer.v1.colocate_async.num_warmup_batches=3",
        "trainer.v1.sampler.max_off_policy_threshold=2",
    )
    with pytest.raises(ConfigError, match="raise the threshold to >= 4"):
        get_trainer_cls("colocate_async").check_config(config)


def test_decoupled_loss_with_rollout_is_is_refused(tiny_assets, tmp_path):
    config = _quickstart(
        tiny_assets,
        tmp_path,
        "actor_rollout_ref.actor.use_decoupled_loss=true",
        "algorithm.rollout_correction.rollout_is=token",
    )
    with pytest.raises(ConfigError, match="unset algorithm.rollout_correction.rollout_is"):
        get_trainer_cls("colocate_async").check_config(config)


def test_entrypoint_reports_a_violated_constraint_in_one_line(tiny_assets, tmp_path, capsys):
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides_on_ray(tiny_assets, tmp_path, 1),
            "trainer.v1.trainer_mode=separate_async",
        ]
    )
    assert code == 2
    assert capsys.readouterr().err.strip().startswith("error: separate_async cannot sync weights")
