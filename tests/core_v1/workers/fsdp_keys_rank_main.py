"""One rank of `test_fsdp_keys_reach_the_ranks.py`: start as a run's rank does, build the roles of
each config in turn, and record what FSDP2 and the process group were given.

Usage: python fsdp_keys_rank_main.py <inputs.pt> <out_dir>, with RANK / WORLD_SIZE / MASTER_* set
(the test starts both ranks). `inputs.pt` holds `builds` (one override list per build of the
actor, reference and critic; the first one starts the process group) and the batch.
"""

import datetime
import faulthandler
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule

from core_v1.config import load_config
from core_v1.workers.rank import RankWorker, build_roles

CPU = torch.device("cpu")


def main(inputs_path: str, out_dir: str) -> None:
    faulthandler.dump_traceback_later(240, exit=True)  # a hung collective fails with a traceback
    torch.set_num_threads(1)
    inputs = torch.load(inputs_path, weights_only=False)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    first, *others = inputs["builds"]
    worker = RankWorker(load_config(first), store=None, rank=rank, world_size=world_size, device_type="cpu")
    worker.setup((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
    try:
        rows = inputs["batch"].batch_size[0] // world_size
        shard = inputs["batch"][rank * rows : (rank + 1) * rows]
        builds = [observe(worker.roles, shard.clone())]
        # The first build's actor (hybrid-sharded when its config says so) saves its sharded checkpoint.
        worker.roles["actor"].save_checkpoint(os.path.join(out_dir, "checkpoint"))
        for overrides in others:
            builds.append(observe(build_roles(load_config(overrides), CPU), shard.clone()))
        if rank == 0:
            torch.save({"timeout": process_group_timeout(), "builds": builds}, os.path.join(out_dir, "rank0.pt"))
        dist.barrier()  # rank 0 hosts the rendezvous store: no rank may tear down while another still talks to it
    finally:
        dist.destroy_process_group()


def process_group_timeout() -> datetime.timedelta:
    """The timeout the default group's backend runs its collectives under (gloo's on CPU ranks)."""
    return dist.distributed_c10d._get_default_group()._get_backend(CPU).options._timeout


def observe(roles: dict, shard) -> dict:
    """What each role's FSDP2 units were built with, read after the role's forward on this rank's rows;
    then the actor updates once (its weights after the update are returned)."""
    actor, ref, critic = roles["actor"], roles["ref"], roles["critic"]
    seen = {}
    shard["old_log_probs"] = actor.compute_log_prob(shard)[0]
    seen["actor"] = units(actor.model)
    shard["ref_log_prob"] = ref.compute_ref_log_prob(shard)
    seen["ref"] = units(ref.model)
    critic.compute_values(shard)
    seen["critic"] = units(critic.model)
    actor.update_policy(shard)
    seen["actor"]["weights"] = dict(actor.named_parameters_for_sync())
    return seen


def units(model: torch.nn.Module) -> dict:
    """The settings of the model's first FSDP2 unit below the root (a transformer block), read right
    after a forward: the root never reshards after its forward, so the blocks show the setting."""
    block = next(module for module in model.modules() if isinstance(module, FSDPModule) and module is not model)
    group = block._get_fsdp_state()._fsdp_param_group
    return {
        "mesh": tuple(group.mesh_info.mesh.shape),
        "reshard_after_forward": group.post_forward_mesh_info is not None,
        "unsharded_after_forward": group.is_unsharded,
        "offload_policy": type(group.offload_policy).__name__,
    }


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
