"""The sharding keys of actor, reference and critic, and nccl_timeout, reach what two ranks build.

Two CPU ranks (gloo) start as a run's ranks do (`RankWorker.setup`: the process group, then the
roles), then build the roles again under other configs; each build runs a forward and one update
per role. Each key is set to a non-default value in a build and read back where it acts: the
FSDP2 unit's device mesh (fsdp_size), whether it reshards after the forward (and whether its
parameters are still unsharded after one), its offload policy, the process group's timeout. A
build at the defaults shows what the keys changed, and its actor's update is the one the
hybrid-sharded, offloaded, unresharded actor made.

What CPU ranks cannot show, and why: offloading (CPUOffloadPolicy) moves parameters, gradients and
the optimizer state from GPU memory to host memory; on CPU ranks all of them are on the host
anyway, so the test checks the policy FSDP2 was given (and that training under it is unchanged); the
memory it saves needs GPUs to show. nccl_timeout is the process group's timeout, which is gloo's here (the
same argument of `init_process_group`); NCCL itself needs GPUs.
"""

import datetime

import pytest
import torch

from tests.core_v1.workers.test_workers_fsdp import run_two_ranks, RANK_SCRIPT

RANK_MAIN = RANK_SCRIPT.with_name("fsdp_keys_rank_main.py")
ACTOR, REF, CRITIC = "actor_rollout_ref.actor.fsdp_config", "actor_rollout_ref.ref.fsdp_config", "critic.fsdp"
OFFLOAD_KEYS = ("offload_policy", "param_offload", "optimizer_offload")

# One build per row: each role's offload key is set alone, so the policy it shows is that key's.
SHARDING = [
    "actor_rollout_ref.actor.fsdp_config.fsdp_size=1",
    "actor_rollout_ref.ref.fsdp_config.fsdp_size=1",
    "critic.fsdp.fsdp_size=1",
    "actor_rollout_ref.actor.fsdp_config.reshard_after_forward=false",
    "actor_rollout_ref.ref.fsdp_config.reshard_after_forward=false",
    "critic.fsdp.reshard_after_forward=false",
]
OFFLOADS = [
    [
        "actor_rollout_ref.actor.fsdp_config.offload_policy=true",
        "actor_rollout_ref.ref.fsdp_config.param_offload=true",
        "critic.fsdp.optimizer_offload=true",
    ],
    [
        "actor_rollout_ref.actor.fsdp_config.param_offload=true",
        "actor_rollout_ref.ref.fsdp_config.optimizer_offload=true",
        "critic.fsdp.offload_policy=true",
    ],
    [
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload=true",
        "actor_rollout_ref.ref.fsdp_config.offload_policy=true",
        "critic.fsdp.param_offload=true",
    ],
]
NCCL_TIMEOUT = "actor_rollout_ref.nccl_timeout=123"


def base_overrides(model_dir) -> list[str]:
    return [
        f"actor_rollout_ref.model.path={model_dir}",
        "data.train_files=unused.parquet",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "critic.optim.lr=1e-3",
        "critic.enable=true",
        "actor_rollout_ref.actor.use_kl_loss=true",
    ]


@pytest.fixture(scope="module")
def two_ranks(tiny_model_dir, tmp_path_factory):
    """Rank 0's record (the process group's timeout and, per build, each role's FSDP2 settings and
    the actor's weights after its update) and the folder of the first build's actor checkpoint."""
    from tests.core_v1.workers.conftest import build_batch

    out = tmp_path_factory.mktemp("fsdp_keys")
    base = base_overrides(tiny_model_dir)
    builds = [[*base, *SHARDING, *offloads] for offloads in OFFLOADS]
    builds[0].append(NCCL_TIMEOUT)  # the first build starts the process group
    builds.append(base)
    torch.save({"builds": builds, "batch": build_batch(rows=8, seed=3)}, out / "inputs.pt")
    run_two_ranks(out / "inputs.pt", out, script=RANK_MAIN)
    return {**torch.load(out / "rank0.pt", weights_only=False), "checkpoint": out / "checkpoint"}


@pytest.mark.slow  # two Python processes start torch
def test_sharding_keys_reach_each_roles_fsdp2_units(two_ranks):
    *changed, defaults = two_ranks["builds"]
    for role in ("actor", "ref", "critic"):
        assert (defaults[role]["mesh"], defaults[role]["reshard_after_forward"]) == ((2,), True)
        assert (defaults[role]["unsharded_after_forward"], defaults[role]["offload_policy"]) == (False, "OffloadPolicy")
        for build in changed:
            # fsdp_size=1 of 2 ranks: hybrid sharding, 2 replicas of a 1-rank shard group (verl's ddp x fsdp mesh).
            assert build[role]["mesh"] == (2, 1), role
            assert build[role]["reshard_after_forward"] is False and build[role]["unsharded_after_forward"], role
    for build, offloads in zip(changed, OFFLOADS):
        for role, key in zip(("actor", "ref", "critic"), offloads):
            assert build[role]["offload_policy"] == "CPUOffloadPolicy", key


@pytest.mark.slow
def test_a_hybrid_sharded_offloaded_actor_updates_as_the_default_one(two_ranks):
    *changed, defaults = two_ranks["builds"]
    for build in changed:
        for name, tensor in defaults["actor"]["weights"].items():
            torch.testing.assert_close(build["actor"]["weights"][name], tensor, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.slow
def test_a_hybrid_sharded_actors_checkpoint_loads_in_one_process(two_ranks, tiny_model_dir):
    from core_v1.config import load_config
    from core_v1.workers import ActorEngine

    resumed = ActorEngine(load_config(base_overrides(tiny_model_dir)))
    resumed.load_checkpoint(two_ranks["checkpoint"])
    saved = two_ranks["builds"][0]["actor"]["weights"]
    for name, tensor in resumed.model.state_dict().items():
        torch.testing.assert_close(tensor, saved[name], rtol=0, atol=1e-6, msg=name)
    assert all(int(state["step"]) == 1 for state in resumed.optimizer.state_dict()["state"].values())


@pytest.mark.slow
def test_nccl_timeout_is_the_process_groups_timeout(two_ranks):
    assert two_ranks["timeout"] == datetime.timedelta(seconds=123)  # the default is 600 s


@pytest.mark.parametrize("fsdp_size, refused", [(2, False), (8, False), (3, True), (0, True)])
def test_a_shard_group_that_does_not_divide_the_ranks_is_one_line_before_the_start(tiny_model_dir, fsdp_size, refused):
    from core_v1.config import load_config
    from core_v1.workers.errors import WorkerConfigError
    from core_v1.workers.group import check_layout

    config = load_config(
        [*base_overrides(tiny_model_dir), "trainer.n_gpus_per_node=4", f"critic.fsdp.fsdp_size={fsdp_size}"]
    )
    if not refused:
        check_layout(config)  # 2: two groups of 2 ranks (HSDP); 8: at least the ranks, all of them shard
        return
    with pytest.raises(WorkerConfigError) as error:
        check_layout(config)
    assert str(error.value).startswith(f"critic.fsdp.fsdp_size={fsdp_size} with 4 training ranks")
    assert "\n" not in str(error.value)
