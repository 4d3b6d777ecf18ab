"""Which device a run trains and generates on: `trainer.device` (auto, cpu or cuda) resolved once.

Its own module because the trainer, the constraint pass, the composition root and V0's workers all
ask the same question; none of them should import another's module for it.
"""

from __future__ import annotations

import math
import os

import torch

from core_v1.config.schema import ConfigError, PPOConfig


def resolve_device(config: PPOConfig) -> str:
    wanted = config.trainer.device
    if wanted == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if wanted == "cuda" and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda but no GPU is visible; use trainer.device=cpu or auto")
    return wanted


def share_cores_with_the_replicas(config: PPOConfig) -> int | None:
    """Cap torch's CPU threads in the driver, where a one-rank CPU run trains (call it there only),
    to the cores the rollout replicas leave it (each computes with `num_cpus_per_replica` threads);
    returns the count set, or None where it leaves torch alone (a GPU run, or OMP_NUM_THREADS set
    by the user).

    Why: torch's CPU build waits for its threads by spinning, so a trainer with a thread per core
    beside a replica computing on one of them burns the cores it waits on. The 2-core quickstart
    (30 steps, replica on Ray) beside one other busy process: 140 s with two trainer threads, 52 s
    with one; alone on the machine 22-23 s either way."""
    if resolve_device(config) != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return None
    rollout = config.actor_rollout_ref.rollout
    replica_cores = math.ceil(rollout.num_replicas * rollout.num_cpus_per_replica)
    threads = max(1, _usable_cores() - replica_cores)
    torch.set_num_threads(threads)
    return threads


def _usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it, as on Linux)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
