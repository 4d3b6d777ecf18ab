"""One rank of `test_workers_fsdp.py`: update on this rank's half of a batch, for each case given.

Usage: torchrun --nproc-per-node 2 fsdp_rank_main.py <inputs.pt> <out_dir> [<inputs.pt> <out_dir> ...]
(the test sets the same RANK / WORLD_SIZE / MASTER_* variables itself, which saves starting
torchrun's launcher). Each `inputs.pt` holds a case's config overrides and whole batch; the cases
run one after the other in one process group, so the ranks start torch once for all of them.
"""

import faulthandler
import os
import sys

import torch
import torch.distributed as dist

from core_v1.config import load_config
from core_v1.workers import ActorEngine


def main(cases: list[tuple[str, str]]) -> None:
    faulthandler.dump_traceback_later(180 * len(cases), exit=True)  # a hung collective fails with a traceback
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        for inputs_path, out_dir in cases:
            update_on_half(inputs_path, out_dir)
        # Rank 0 hosts the rendezvous store: no rank may tear down while another still talks to it.
        dist.barrier()
    finally:
        dist.destroy_process_group()


def update_on_half(inputs_path: str, out_dir: str) -> None:
    rank, world_size = dist.get_rank(), dist.get_world_size()
    inputs = torch.load(inputs_path, weights_only=False)
    torch.manual_seed(0)  # as build_roles seeds every rank: fresh weights (LoRA's A) start equal everywhere
    actor = ActorEngine(load_config(inputs["overrides"]))
    rows = inputs["batch"].batch_size[0] // world_size
    shard = inputs["batch"][rank * rows : (rank + 1) * rows].clone()
    shard["old_log_probs"] = actor.compute_log_prob(shard)[0]
    metrics = actor.update_policy(shard)
    weights = dict(actor.named_parameters_for_sync())
    actor.save_checkpoint(os.path.join(out_dir, "checkpoint"))
    if rank == 0:
        torch.save(
            {"metrics": metrics, "weights": weights, "model_class": type(actor.model).__name__},
            os.path.join(out_dir, "rank0.pt"),
        )


if __name__ == "__main__":
    paths = sys.argv[1:]
    main(list(zip(paths[::2], paths[1::2])))
