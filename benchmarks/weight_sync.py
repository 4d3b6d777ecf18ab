"""Weight sync, trainer -> one rollout replica, through the broadcast checkpoint engine, against a
plain `torch.distributed.broadcast` of the same bytes over the same backend, in one invocation.

Model: a randomly initialised Qwen2-shaped model made here (hidden 768, 12 layers, vocab 32k,
untied head: ~125M parameters; `--tiny` makes a ~30k-parameter one for a CPU smoke run), saved
with `save_pretrained` so the real loaders run.

Trainer side (this process): `core_v1.workers.ActorEngine` built from the quickstart preset with
that model on `--device`; what is sent is its `named_parameters_for_sync()`. Replica side: one
`RolloutReplica` Ray actor (hf engine, same device kind). A sync is
`BroadcastCheckpointEngine.sync(...)` end to end, as the trainer calls it: bucketing and packing,
the `receive_weights` call, the broadcast, and the replica loading the weights into its model.

Baseline: two fresh processes, `torch.distributed.init_process_group` + `dist.broadcast` of
preallocated buffers with the same sizes as the engine's buckets, then a barrier so the time
includes the receiver finishing. `gloo` moves host memory, so its baseline buffers are on the CPU;
`nccl` buffers sit on one GPU per rank. The ratio engine / baseline is what the engine's own work
(packing, staging CUDA weights through host memory under gloo, allocating receive buffers, the
RPC, loading) costs relative to the wire.

On one GPU the trainer and the replica share the device, and NCCL refuses two ranks on one
device, so the backend there is `gloo`. `--backend nccl` needs two GPUs: the trainer takes the
last one, Ray gives the replica the others.

Each measurement: untimed warm-up, then `--repeats` timed runs; the median is reported (GB =
1e9 bytes). Correctness is checked once, after the timed runs: the trainer's weights are
perturbed (syncing the weights the replica already loaded from disk would prove nothing), synced,
and the replica's greedy continuation of a fixed prompt must equal, token for token, that of a
local server loaded with the trainer's weights, tagged with the synced version, and differ in
log-probs from its continuation before the sync.

Measured 2026-11-29 (124.7M parameters, fp32, 0.499 GB in one 512 MiB bucket, gloo, median of 5):
one H200, trainer and replica sharing it: sync 0.890 s = 0.561 GB/s, baseline 3.456 GB/s, ratio
0.16; the 2-core CPU box (heavily loaded by other jobs): 0.407 vs 2.470 GB/s, ratio 0.16. On that
box, timed apart, the engine's two full memory copies each took longer than the wire (packing into
a fresh bucket buffer ~0.7 s, copying the received views into the model ~0.7 s); the breakdown
on the GPU was not measured.

Run: python benchmarks/weight_sync.py [--device cpu|cuda] [--backend gloo|nccl] [--repeats 5]
                                      [--bucket-mb 512] [--dtype fp32|bf16] [--tiny]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import datetime
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

import torch
import torch.distributed as dist

# Spawned baseline ranks re-import this module: keep the heavy imports (transformers, Ray,
# core_v1) inside the functions that need them.
ROOT = Path(__file__).resolve().parents[1]

MODEL_SHAPES = {
    "full": dict(
        vocab_size=32000,
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
    ),
    "tiny": dict(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    ),
}
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
VERIFY_PROMPT = [11, 7, 42, 99, 5, 3, 64, 128]  # token ids; every shape's vocabulary holds them
PERTURB_SCALE = 0.02  # the models' initializer_range: a change the greedy output notices
# Replica and reference run the same weights but not the same thread count (reduction order).
LOG_PROB_TOLERANCE = {"fp32": 1e-4, "bf16": 5e-2}


class BenchmarkSetupError(RuntimeError):
    """The requested run cannot be set up on this machine (one line says why and what to do)."""


class WeightSyncMismatch(RuntimeError):
    """After a sync the replica does not generate what the trainer's weights generate."""


@dataclasses.dataclass(frozen=True)
class Timings:
    """Seconds of each timed repeat (warm-up excluded)."""

    seconds: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    def gb_per_s(self, nbytes: int) -> float:
        return nbytes / self.median / 1e9

    def spread(self) -> str:
        return f"min {min(self.seconds):.4g}, max {max(self.seconds):.4g}, n={len(self.seconds)}"


@dataclasses.dataclass(frozen=True)
class Verification:
    tokens: int
    max_log_prob_diff: float  # replica vs local reference, same weights
    moved_by_sync: float  # largest log-prob change of the replica's continuation across the sync
    version: int


# ---------------------------------------------------------------------------------------- model
def make_model(path: Path, shape: str, dtype: str) -> int:
    """Save a randomly initialised Qwen2-shaped model to `path`; returns its parameter count."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        **MODEL_SHAPES[shape],
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(TORCH_DTYPES[dtype])
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def build_trainer_side(model_path: Path, args: argparse.Namespace, trainer_device: torch.device) -> tuple[Any, Any]:
    """The run config (quickstart preset + this benchmark's keys) and an `ActorEngine` on the device."""
    from core_v1.config import load_config
    from core_v1.workers import ActorEngine

    overrides = [
        f"actor_rollout_ref.model.path={model_path}",
        f"actor_rollout_ref.actor.fsdp_config.model_dtype={args.dtype}",
        f"actor_rollout_ref.rollout.checkpoint_engine.backend={args.backend}",
        f"actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes={args.bucket_mb}",
        f"trainer.device={args.device}",
    ]
    if args.backend == "nccl":  # Ray hands the replica GPUs 0..n-2; the trainer keeps the last
        overrides.append(f"+ray_kwargs.ray_init.num_gpus={torch.cuda.device_count() - 1}")
    config = load_config(overrides, config_name="quickstart")
    return config, ActorEngine(config, device=trainer_device)


def bucket_sizes(named_tensors: Iterable[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[int]:
    """Bytes of each buffer the engine will broadcast (its bucketing and 64-byte alignment)."""
    from core_v1.checkpoint_engine import bucket_tensors
    from core_v1.checkpoint_engine.broadcast import layout_bucket

    return [layout_bucket(bucket).nbytes for bucket in bucket_tensors(named_tensors, bucket_bytes)]


# ------------------------------------------------------------------------------- engine timing
async def time_engine_syncs(engine: Any, actor: Any, client: Any, warmup: int, repeats: int) -> tuple[float, Timings]:
    """Seconds of the first sync (it also builds the process group), then `repeats` timed syncs."""
    version = 0

    async def one_sync() -> float:
        nonlocal version
        version += 1
        start = time.perf_counter()
        await engine.sync(actor.named_parameters_for_sync(), client, version)
        return time.perf_counter() - start

    first = await one_sync()
    for _ in range(warmup):
        await one_sync()
    return first, Timings(tuple([await one_sync() for _ in range(repeats)]))


# ----------------------------------------------------------------------------- correctness
async def verify_replica_weights(
    engine: Any, actor: Any, client: Any, model_path: Path, trainer_device: torch.device, version: int, tolerance: float
) -> Verification:
    """Perturb the trainer's weights, sync them, and compare the replica's greedy output with a
    local server's loaded with the same weights (see the module docstring)."""
    from core_v1.rollout import LLMServer, SamplingParams

    greedy = SamplingParams(temperature=0.0, max_tokens=16, ignore_eos=True)
    before = await client.generate("verify-before", VERIFY_PROMPT, greedy)
    perturb_(actor.model, seed=1)
    await engine.sync(actor.named_parameters_for_sync(), client, version)
    after = await client.generate("verify-after", VERIFY_PROMPT, greedy)

    reference = LLMServer.from_model(str(model_path), "hf", device=str(trainer_device))
    try:
        await reference.update_weights(list(actor.named_parameters_for_sync()), version)
        expected = await reference.generate("verify-reference", VERIFY_PROMPT, greedy)
    finally:
        reference.shutdown()

    if (after.min_weight_version, after.max_weight_version) != (version, version):
        raise WeightSyncMismatch(
            f"the replica tagged its output with weight versions "
            f"{after.min_weight_version}..{after.max_weight_version}, expected {version}"
        )
    if after.token_ids != expected.token_ids:
        raise WeightSyncMismatch(
            f"after the sync the replica generated {after.token_ids}, a local model with "
            f"the trainer's weights generated {expected.token_ids}"
        )
    mismatch = _max_abs_diff(after.log_probs, expected.log_probs)
    if mismatch > tolerance:
        raise WeightSyncMismatch(
            f"the replica's log-probs differ from a local model's with the trainer's weights "
            f"by {mismatch:.2e} (tolerance {tolerance:.0e})"
        )
    moved = _max_abs_diff(before.log_probs, after.log_probs)
    if moved < 1e-3:
        raise WeightSyncMismatch(
            f"the replica's log-probs moved by only {moved:.2e} after syncing perturbed "
            "weights: the sync did not change its model"
        )
    return Verification(len(after.token_ids), mismatch, moved, version)


def perturb_(model: torch.nn.Module, seed: int) -> None:
    """Add seeded noise to every parameter in place (what an optimizer step does, without data)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            noise = torch.randn(parameter.shape, generator=generator) * PERTURB_SCALE
            parameter.add_(noise.to(device=parameter.device, dtype=parameter.dtype))


def _max_abs_diff(a: list[float], b: list[float]) -> float:
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


# ------------------------------------------------------------------------------------ baseline
def time_plain_broadcast(
    sizes: list[int], backend: str, warmup: int, repeats: int, timeout_s: float = 600.0
) -> Timings:
    """Two spawned processes broadcast buffers of `sizes` bytes, rank 0 -> rank 1, with plain
    `torch.distributed`; rank 0's timings of the whole set (barrier included) come back."""
    context = multiprocessing.get_context("spawn")
    store = dist.TCPStore(
        "127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    results = context.Queue()
    ranks = [
        context.Process(
            target=_baseline_rank,
            args=(rank, store.port, backend, sizes, warmup, repeats, results),
            name=f"broadcast-baseline-{rank}",
        )
        for rank in (0, 1)
    ]
    for process in ranks:
        process.start()
    try:
        reports = _collect_reports(results, ranks, time.monotonic() + timeout_s)
    finally:
        for process in ranks:
            process.join(timeout=30)
    if reports[1] is not True:
        raise BenchmarkSetupError(f"baseline rank 1 did not receive rank 0's bytes: {reports[1]}")
    return Timings(tuple(reports[0]))


def _collect_reports(results: Any, ranks: list[Any], deadline: float) -> dict[int, Any]:
    """One report per rank; fails as soon as a rank dies instead of waiting out the deadline."""
    reports: dict[int, Any] = {}
    while len(reports) < len(ranks):
        try:
            rank, report = results.get(timeout=1.0)
            reports[rank] = report
            continue
        except queue.Empty:
            pass
        crashed = [p.name for p in ranks if p.exitcode not in (None, 0)]
        if crashed or time.monotonic() > deadline:
            raise BenchmarkSetupError(
                f"the baseline broadcast failed ({', '.join(crashed)} died; see its traceback above)"
                if crashed
                else "the baseline broadcast timed out"
            )
    return reports


def _baseline_rank(
    rank: int, port: int, backend: str, sizes: list[int], warmup: int, repeats: int, results: Any
) -> None:
    """One baseline process: join, broadcast (timed on rank 0), check the bytes (rank 1)."""
    torch.set_num_threads(1)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    store = dist.TCPStore("127.0.0.1", port, is_master=False)
    dist.init_process_group(backend, store=store, rank=rank, world_size=2)
    try:
        fill = 7 if rank == 0 else 0
        buffers = [torch.full((size,), fill, dtype=torch.uint8, device=device) for size in sizes]
        seconds = []
        for _ in range(warmup + repeats):
            _barrier(backend, device)
            start = time.perf_counter()
            for buffer in buffers:
                dist.broadcast(buffer, src=0)
            _barrier(backend, device)  # the receiver has everything
            seconds.append(time.perf_counter() - start)
        if rank == 0:
            results.put((0, seconds[warmup:]))
        else:
            received = all(bool((buffer == 7).all()) for buffer in buffers)
            results.put((1, True if received else "some bytes differ"))
    finally:
        dist.destroy_process_group()


def _barrier(backend: str, device: torch.device) -> None:
    if backend == "nccl":
        dist.barrier(device_ids=[device.index])
        torch.cuda.synchronize(device)
    else:
        dist.barrier()


# ---------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement (median reported)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed repeats before them")
    parser.add_argument(
        "--bucket-mb",
        type=int,
        default=512,
        help="checkpoint_engine.update_weights_bucket_megabytes (the config default)",
    )
    parser.add_argument(
        "--dtype",
        default="fp32",
        choices=tuple(TORCH_DTYPES),
        help="saved and trained dtype (the actor trains in fp32 by default)",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads in this process")
    parser.add_argument("--tiny", action="store_true", help="a ~30k-parameter model: a CPU smoke run")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        parser.error("--repeats must be >= 1 and --warmup >= 0")
    return args


def check_devices(args: argparse.Namespace) -> torch.device:
    """The trainer's device; refuses combinations this machine cannot run."""
    if args.device == "cuda" and not torch.cuda.is_available():
        raise BenchmarkSetupError("--device cuda but no GPU is visible; use --device cpu")
    if args.backend == "nccl":
        if args.device != "cuda" or torch.cuda.device_count() < 2:
            raise BenchmarkSetupError(
                "--backend nccl needs --device cuda and two GPUs (NCCL refuses two ranks on "
                "one device); with one GPU or on CPU use --backend gloo"
            )
        return torch.device("cuda", torch.cuda.device_count() - 1)
    if args.device == "cuda":  # an explicit index: set_device and the reports need one
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def run(args: argparse.Namespace) -> None:
    trainer_device = check_devices(args)
    torch.set_num_threads(args.threads)
    if trainer_device.type == "cuda":
        torch.cuda.set_device(trainer_device)  # the engine's nccl wire uses the current device
    with tempfile.TemporaryDirectory(prefix="weight_sync_") as tmp:
        model_path = Path(tmp) / "model"
        num_params = make_model(model_path, "tiny" if args.tiny else "full", args.dtype)
        config, actor = build_trainer_side(model_path, args, trainer_device)
        sizes = bucket_sizes(actor.named_parameters_for_sync(), int(args.bucket_mb) * 1024 * 1024)
        payload = sum(t.numel() * t.element_size() for _, t in actor.named_parameters_for_sync())
        baseline = time_plain_broadcast(sizes, args.backend, args.warmup, args.repeats)
        first, syncs, verification = run_engine_side(config, actor, model_path, args, trainer_device)
    report(args, trainer_device, num_params, payload, sizes, first, syncs, baseline, verification)


def run_engine_side(
    config: Any, actor: Any, model_path: Path, args: argparse.Namespace, trainer_device: torch.device
) -> tuple[float, Timings, Verification]:
    """Start Ray and one replica, time the engine's syncs, verify once, tear everything down."""
    import ray

    from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS
    from core_v1.rollout.replica import RolloutReplicaGroup
    from core_v1.trainer.setup import init_ray

    init_ray(config)
    engine = CHECKPOINT_BACKENDS.get(args.backend)(config.actor_rollout_ref.rollout.checkpoint_engine)
    gpus_per_replica = {"cpu": 0, "cuda": 0.5 if args.backend == "gloo" else 1}[args.device]
    group = RolloutReplicaGroup(
        str(model_path), 1, engine_kwargs={"device": args.device}, num_cpus=1, num_gpus=gpus_per_replica
    )
    try:
        client = group.client()

        async def measure() -> tuple[float, Timings, Verification]:
            first, syncs = await time_engine_syncs(engine, actor, client, args.warmup, args.repeats)
            version = 2 + args.warmup + args.repeats
            return (
                first,
                syncs,
                await verify_replica_weights(
                    engine, actor, client, model_path, trainer_device, version, LOG_PROB_TOLERANCE[args.dtype]
                ),
            )

        return asyncio.run(measure())
    finally:
        engine.close()
        group.shutdown()
        ray.shutdown()


def report(
    args: argparse.Namespace,
    trainer_device: torch.device,
    num_params: int,
    payload: int,
    sizes: list[int],
    first: float,
    syncs: Timings,
    baseline: Timings,
    verification: Verification,
) -> None:
    shape = MODEL_SHAPES["tiny" if args.tiny else "full"]
    if trainer_device.type == "cuda":
        where = f"cuda ({torch.cuda.get_device_name(trainer_device)}; trainer on {trainer_device})"
    else:
        where = f"cpu ({args.threads} torch threads in the trainer, 1 in the replica)"
    if args.backend == "gloo" and args.device == "cuda":
        wire = (
            "gloo: CUDA weights are staged through host memory (trainer and replica share one GPU, and NCCL "
            "refuses two ranks on one device)"
        )
    else:
        wire = args.backend
    engine_rate, baseline_rate = syncs.gb_per_s(payload), baseline.gb_per_s(payload)
    print(
        f"weight sync: ActorEngine -> 1 rollout replica (Ray actor, hf engine) through "
        f"BroadcastCheckpointEngine\n"
        f"  model       Qwen2 (random), hidden {shape['hidden_size']}, {shape['num_hidden_layers']} layers, "
        f"vocab {shape['vocab_size']}: {num_params:,} parameters, {args.dtype}\n"
        f"  bytes       {payload:,} ({payload / 1e9:.3f} GB) in {len(sizes)} bucket(s) of <= {args.bucket_mb} MiB\n"
        f"  backend     {wire}\n"
        f"  device      {where}\n"
        f"  first sync  {first:.4g} s (includes building the process group)\n"
        f"  sync        median {syncs.median:.4g} s ({syncs.spread()}) -> {engine_rate:.3f} GB/s\n"
        f"  baseline    plain torch.distributed.broadcast, 2 processes, {args.backend}, same buffer sizes: "
        f"median {baseline.median:.4g} s ({baseline.spread()}) -> {baseline_rate:.3f} GB/s\n"
        f"  ratio       {engine_rate / baseline_rate:.2f} of the baseline\n"
        f"  verify      passed: after syncing perturbed weights (version {verification.version}) the replica's "
        f"{verification.tokens} greedy tokens equal a local model's with the trainer's weights (log-prob max "
        f"diff {verification.max_log_prob_diff:.1e}; the sync moved them by up to {verification.moved_by_sync:.2f})"
    )


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # loading bars would bury the report
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast is off on the lent machines
    sys.path.insert(0, str(ROOT))  # core_v1 importable when run as a script
    args = parse_args(argv)
    try:
        run(args)
    except (BenchmarkSetupError, WeightSyncMismatch) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
