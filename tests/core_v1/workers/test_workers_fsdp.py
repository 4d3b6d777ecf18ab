"""FSDP2 across two CPU processes (gloo) trains exactly as one process does.

Two ranks each get half of the batch, with different token counts; after one update their
sharded weights, gathered by `named_parameters_for_sync`, must equal those of a single process
that updated on the whole batch, and the checkpoint they write together must load in one process.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from core_v1.config import load_config
from core_v1.workers import ActorEngine
from tests.core_v1.workers.conftest import build_batch

WORLD_SIZE = 2
RANK_SCRIPT = Path(__file__).with_name("fsdp_rank_main.py")
REPO_ROOT = Path(__file__).resolve().parents[3]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_two_ranks(inputs_path, out_dir, *more_cases, script=RANK_SCRIPT):
    """Start both ranks of `script` as plain processes with the environment torchrun would give them;
    `more_cases`: further (inputs path, out dir) pairs, given after the first (RANK_SCRIPT runs each)."""
    port = free_port()
    ranks = []
    for rank in range(WORLD_SIZE):
        environment = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(WORLD_SIZE),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        ranks.append(
            subprocess.Popen(
                [sys.executable, str(script), str(inputs_path), str(out_dir), *map(str, more_cases)],
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    for process in ranks:
        try:
            outputs.append(process.communicate(timeout=240)[0])
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            outputs.append(process.communicate()[0])
    for process, output in zip(ranks, outputs):
        assert process.returncode == 0, output[-4000:]


COMMON = [
    "data.train_files=unused.parquet",
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
]
CASES = {
    "full": ["actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.grad_clip=0.5"],
    # Frozen base and trainable adapters share FSDP units; weights leave merged, gathered tensor by tensor.
    "lora": [
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.model.lora_rank=4",
        "actor_rollout_ref.model.lora_alpha=8",
    ],
}


@pytest.fixture(scope="module")
def two_rank_updates(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """{case: its folder}: both cases run by one pair of rank processes (starting torch costs each
    process several seconds of CPU). A folder holds the case's `inputs.pt` (overrides and whole
    batch), rank 0's `rank0.pt` (metrics, gathered weights, model class) and their `checkpoint`."""
    folders = {case: tmp_path_factory.mktemp(f"fsdp_{case}") for case in CASES}
    for case, folder in folders.items():
        overrides = [f"actor_rollout_ref.model.path={tiny_model_dir}", *COMMON, *CASES[case]]
        torch.save({"overrides": overrides, "batch": build_batch(rows=8, seed=3)}, folder / "inputs.pt")
    (first, first_dir), *rest = ((folder / "inputs.pt", folder) for folder in folders.values())
    run_two_ranks(first, first_dir, *(path for pair in rest for path in pair))
    return folders


def _case(folder: Path) -> tuple[list[str], TensorDict, dict]:
    """(overrides, whole batch, rank 0's result) of one case."""
    inputs = torch.load(folder / "inputs.pt", weights_only=False)
    return inputs["overrides"], inputs["batch"], torch.load(folder / "rank0.pt", weights_only=False)


@pytest.mark.slow  # two rank processes (shared by both cases) and this one start torch (about 15 s of CPU)
def test_two_fsdp2_ranks_match_one_process(two_rank_updates):
    overrides, batch, sharded = _case(two_rank_updates["full"])
    checkpoint = two_rank_updates["full"] / "checkpoint"

    single = ActorEngine(load_config(overrides))
    batch["old_log_probs"] = single.compute_log_prob(batch)[0]
    metrics = single.update_policy(batch)

    assert sharded["model_class"].startswith("FSDP")
    assert set(sharded["weights"]) == set(single.model.state_dict())
    for name, tensor in single.model.state_dict().items():
        torch.testing.assert_close(sharded["weights"][name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    for name in ("actor/pg_loss", "actor/grad_norm"):
        torch.testing.assert_close(sharded["metrics"][name], metrics[name], rtol=1e-4, atol=1e-6, msg=name)

    resumed = ActorEngine(load_config(overrides))
    resumed.load_checkpoint(checkpoint)
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, sharded["weights"][name]), name
    assert all(int(state["step"]) == 1 for state in resumed.optimizer.state_dict()["state"].values())


@pytest.mark.slow
def test_lora_under_two_fsdp2_ranks_matches_one_process(two_rank_updates):
    overrides, batch, sharded = _case(two_rank_updates["lora"])
    checkpoint = two_rank_updates["lora"] / "checkpoint"

    torch.manual_seed(0)  # the ranks' seed: LoRA's A starts as theirs
    single = ActorEngine(load_config(overrides))
    batch["old_log_probs"] = single.compute_log_prob(batch)[0]
    metrics = single.update_policy(batch)
    merged = dict(single.named_parameters_for_sync())

    assert set(sharded["weights"]) == set(merged)
    for name, tensor in merged.items():
        torch.testing.assert_close(sharded["weights"][name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    for name in ("actor/pg_loss", "actor/grad_norm"):
        torch.testing.assert_close(sharded["metrics"][name], metrics[name], rtol=1e-4, atol=1e-6, msg=name)
    resumed = ActorEngine(load_config(overrides))
    resumed.load_checkpoint(checkpoint)
    for name, tensor in resumed.named_parameters_for_sync():
        torch.testing.assert_close(tensor, sharded["weights"][name], rtol=0, atol=1e-6, msg=name)
