"""Built-in `hf` rollout engine vs transformers' own generation paths, on a long-tailed workload.

Two presets, picked by --device:

- cpu: 32 requests, prompts of 8-32 tokens, budgets lognormal (median 20, longest 136); a
  ~0.66M-parameter Qwen2-shaped model; float32.
- cuda: 256 requests, prompts of 64-256 tokens, budgets lognormal (median 124, longest 1024); a
  Qwen2-0.5B-shaped model (24 layers, hidden 896, 14/2 heads, vocab 151936, tied embeddings) with
  random bf16 weights; `--shape 1.5b` / `--shape 7b` take the config shapes of Qwen2.5-1.5B (28
  layers, hidden 1536, 12/2 heads, tied) and Qwen2.5-7B (28 layers, hidden 3584, 28/4 heads,
  vocab 152064, untied) instead, the same workload.

Models are made locally (random weights, saved and reloaded with `from_pretrained`). EOS is off,
so every request generates exactly its budget; all requests are submitted at once; sampling at
temperature 1. Each path reports useful tokens (sum of budgets) per second of wall time:

- hf engine: `LLMServer` over the built-in engine (kv_cache "auto": fixed slots and CUDA graphs on
  CUDA, transformers' forward on CPU). Warmed up with one whole pass of the workload (it captures
  the graphs that pass needs); the cold pass is printed too.
- hf engine, compile / triton: the same with `fused_decode="compile"` (torch.compile of the decode
  forward) or `"triton"` (the hand-written kernels), picked by `--fused-decode off compile triton`
  (default: off only); see core_v1/rollout/engines/fused_decode.py.
- hf engine, unfused sampler (cuda): the same with the sampler in plain tensor operations
  (RLBRIDGE_FUSED_SAMPLER=0) instead of the fused Triton kernel; `--skip unfused-sampler` leaves it out.
- padded generate: one `model.generate` over the left-padded batch; every row runs to the longest
  budget and the excess is thrown away (the baseline all ratios are relative to).
- continuous batching: transformers' continuous-batching manager (`init_continuous_batching`)
  with per-request max_new_tokens, warmed up, results collected in completion order
  (`get_result(request_id=...)` returns None while another result heads its queue).
- floor (cuda): every decode step must read all weights once, so the longest budget x weight bytes
  / device copy bandwidth (measured here, bytes read + written) bounds the run's time from below.

--profile prints a torch.profiler summary of one more pass of the engine (GPU kernels by total
time; on CPU, operators by CPU time).

Run: python benchmarks/rollout_engine.py [--device cpu|cuda] [--threads 2] [--requests N] [--profile]
(the cuda preset takes ~5 minutes, padded generate and continuous batching ~80 s each).

The fused decode step on a GPU, one command per shape (each prints tok/s, % of the floor and x
padded generate for fused off / compile / triton; continuous batching and the unfused sampler are
left out to stay inside a 10-minute run):

    PYTHONPATH=. python3 benchmarks/rollout_engine.py --device cuda --shape 0.5b \
        --fused-decode off compile triton --skip continuous-batching unfused-sampler --profile
    PYTHONPATH=. python3 benchmarks/rollout_engine.py --device cuda --shape 1.5b \
        --fused-decode off compile triton --skip continuous-batching unfused-sampler
    PYTHONPATH=. python3 benchmarks/rollout_engine.py --device cuda --shape 7b \
        --fused-decode off compile triton --skip continuous-batching unfused-sampler

Measured with the fused step on one H100 (torch 2.11, Triton 3.6; 2026-12-05, one run per shape,
the commands above; `--fused-decode off triton` at 0.5B, `triton` at 1.5B and 7B; the floor from each
run's own copy-bandwidth measurement):

    shape  fused   tok/s   timed pass (decode + prefill)  x padded generate  % of the floor
    0.5B   off     12,677  3.17 s                         30.7x              10.8%
    0.5B   triton  21,104  1.90 s (1.41 + 0.41)           51.1x              18.0%
    1.5B   triton  12,248  3.28 s (2.54 + 0.63)           36.4x              37.3%
    7B     triton   4,756  8.45 s (6.97 + 1.37)           21.1x              71.3%

At 0.5B the floor (0.34 s) is below what launch-bound small GEMMs reach: the profile of the triton
pass (1.34 s of GPU time) is slot attention 10.8% + its merge 5.4%, the layers' cuBLAS GEMMs
~34% (nvjet 64x8 and 128x8 tiles at 4-10 us each, split-K reduces 2.8% more), the LM head 4.1%,
add+RMSNorm 6.2%, rotary + K/V write 3.6%, SiLU*up 2.5%, the sampler 2.9%; prefill is 0.41 s of the 1.90 s,
in two cohorts (116 rows in 210 ms, 140 in 201 ms) against 143 ms for all 256 called directly.
Earlier, before the merge kernel (same day):
on one H100 (torch 2.11, Triton 3.6), 0.5B, before the merge kernel: timed pass off 3.28 s
(decode windows 2.67 s + prefill 0.50 s), triton 2.16 s (decode 1.49 s + prefill 0.57 s): 1.52x,
18.6k tok/s; compile did not finish its cold pass (one recompilation per graph bucket) in the
run's 6 minutes. Then, on one H100, `--fused-decode triton` timed passes: 1.5B 3.40 s (decode 2.55 s
+ prefill 0.75 s), 7B 8.64 s (decode 6.98 s + prefill 1.52 s); off at 0.5B 3.67 s. The floor and
padded generate were cut by the run's timeouts. The runner alone on one H200, 16-step decode
windows (triton vs off): 256 rows 31.7 vs 51.7 ms, 64 rows 24.2 vs 42.7 ms, 8 rows 18.7 vs 39.3 ms,
1 row 18.7 vs 35.3 ms: about 1.17 ms a step at small batch, where the floor is 0.26 ms; the GEMMs
at 1-8 rows take ~22 us a layer (cuBLAS split-K, ~40% of bandwidth on the small projections), the
four fused kernels and attention ~14 us. Prefill of the 256 prompts called directly: 143 ms (104 ms
of GPU time); inside the engine the same prompts took 0.66 s in two cohorts (85 and 171 rows) while
the event loop was still submitting: the prefill's ~2,300 kernel launches share the GIL with it.

Measured on one H200 (torch 2.11, transformers 5.17, Triton 3.6), `PYTHONPATH=. python3
benchmarks/rollout_engine.py --device cuda --profile --timeout 120`, one run: hf engine 11,661 tok/s
(40,163 useful tokens in 3.44 s = decode windows 2.49 s + prefill 0.87 s; 25.2x padded generate, 7.7%
of the floor); the same engine with the unfused sampler 7,713 tok/s (5.21 s, decode 4.20 s; 16.7x);
padded generate 462 tok/s; continuous batching 446 tok/s; floor 150,570 tok/s (1024 steps x 0.988 GB /
3.79 TB/s). Profile of the fused pass (2.33 s of GPU time): decode attention (cuDNN SDPA over the
slots, ~20 us a layer) 21%; small elementwise kernels (RMSNorm, rotary, residual adds, K/V writes,
SiLU, concatenation) ~40%; matrix products ~20%; the race kernel 1.8% (40 us a step for 256 rows of
a 151,936 vocabulary, where the unfused sampler's thirty int64 passes took ~1.6 ms). On 2 shared CPU
cores the numbers swing with the load from the other jobs: 2.0x padded generate (slots runner) at the
quietest measurement here.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import functools
import gc
import os
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from core_v1.rollout import LLMServer, SamplingParams
from core_v1.rollout.engines import sampling


@dataclass(frozen=True)
class Preset:
    config: dict
    dtype: torch.dtype
    requests: int
    prompt_range: tuple[int, int]  # inclusive
    median_budget: int
    longest_budget: int
    repeats: int


PRESETS = {
    "cpu": Preset(
        dict(
            vocab_size=3072,
            hidden_size=64,
            intermediate_size=256,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=512,
            tie_word_embeddings=False,
        ),
        torch.float32,
        32,
        (8, 32),
        20,
        136,
        3,
    ),
    "cuda": Preset(
        dict(
            vocab_size=151936,
            hidden_size=896,
            intermediate_size=4864,
            num_hidden_layers=24,
            num_attention_heads=14,
            num_key_value_heads=2,
            max_position_embeddings=32768,
            tie_word_embeddings=True,
            rope_theta=1000000.0,
            rms_norm_eps=1e-6,
        ),
        torch.bfloat16,
        256,
        (64, 256),
        124,
        1024,
        1,
    ),
}

# The cuda preset's model shape by --shape: the config shapes of Qwen2-0.5B, Qwen2.5-1.5B and
# Qwen2.5-7B (random weights; max_position_embeddings plays no part, the engine gets max_model_len).
SHAPES = {
    "0.5b": PRESETS["cuda"].config,
    "1.5b": dict(
        vocab_size=151936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
    ),
    "7b": dict(
        vocab_size=152064,
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        max_position_embeddings=32768,
        tie_word_embeddings=False,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
    ),
}


def make_model(path: str, preset: Preset, device: str) -> tuple[int, int]:
    """Save a Qwen2-shaped model with random weights to `path`; returns (parameters, weight bytes)."""
    config = Qwen2Config(**preset.config, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    with torch.device(device):  # initialising 0.5B parameters on a CPU takes a while
        model = Qwen2ForCausalLM(config).to(preset.dtype)
    model.save_pretrained(path)
    params = {id(p): p for p in model.parameters()}.values()  # tied weights once
    return sum(p.numel() for p in params), sum(p.numel() * p.element_size() for p in params)


def make_workload(preset: Preset, num_requests: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """Prompts and long-tailed token budgets (lognormal around the median, the longest set exactly)."""
    rng = np.random.default_rng(seed)
    low, high = preset.prompt_range
    vocab = preset.config["vocab_size"]
    prompts = [rng.integers(1, vocab, size=int(rng.integers(low, high + 1))).tolist() for _ in range(num_requests)]
    budgets = np.clip(
        np.round(rng.lognormal(mean=np.log(preset.median_budget), sigma=0.8, size=num_requests)),
        4,
        preset.longest_budget,
    ).astype(int)
    budgets[int(np.argmax(budgets))] = preset.longest_budget
    return prompts, budgets.tolist()


def run_hf_engine(
    path: str, prompts: list[list[int]], budgets: list[int], device: str, args, fused_decode: str = "off"
) -> tuple[float, int]:
    engine_kwargs = {
        "device": device,
        "max_num_seqs": len(prompts),
        "max_model_len": max(len(p) for p in prompts) + max(budgets),
        "kv_cache": args.kv_cache,
        "enforce_eager": args.enforce_eager,
        "gpu_memory_utilization": 0.9,
        "fused_decode": fused_decode,
    }

    async def one_pass(server: LLMServer) -> tuple[float, int]:
        _synchronize(device)
        start = time.perf_counter()
        outputs = await asyncio.gather(
            *(
                server.generate(
                    f"r{i}", prompt, SamplingParams(temperature=1.0, max_tokens=budget, seed=i, ignore_eos=True)
                )
                for i, (prompt, budget) in enumerate(zip(prompts, budgets))
            )
        )
        _synchronize(device)
        return time.perf_counter() - start, sum(len(o.token_ids) for o in outputs)

    async def main() -> tuple[float, int]:
        server = LLMServer.from_model(path, **engine_kwargs)
        try:
            cold, tokens = await one_pass(server)
            print(
                f"  hf engine: cold pass {cold:.2f} s ({tokens / cold:.0f} tok/s, captures included); "
                f"runner {type(server.engine.runner).__name__}, {server.engine.max_num_seqs} slots"
            )
            stats = server.engine.stats
            decode_before, prefill_before = stats.decode_seconds, stats.prefill_seconds
            cohorts = _record_cohorts(server.engine.runner)
            timed = await one_pass(server)
            print(
                f"  hf engine: timed pass {timed[0]:.2f} s = decode windows {stats.decode_seconds - decode_before:.2f} s"
                f" + prefill {stats.prefill_seconds - prefill_before:.2f} s + the rest (commands, retiring rows); "
                f"prefill cohorts (rows, ms): {', '.join(f'({n}, {1e3 * t:.0f})' for n, t in cohorts)}"
            )
            cohorts.clear()
            if args.profile:  # a further pass, so the profiler's overhead stays out of the figures
                await profiled(server)
            return timed
        finally:
            stats = server.engine.stats
            graphs = getattr(server.engine.runner, "num_graphs", lambda: 0)()
            print(
                f"  hf engine (all passes): {stats.decode_steps} decode steps in {stats.decode_seconds:.2f} s, "
                f"{stats.prefill_cohorts} prefill cohorts in {stats.prefill_seconds:.2f} s, {graphs} CUDA graphs"
            )
            server.shutdown()

    async def profiled(server: LLMServer) -> tuple[float, int]:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
        with profile(activities=activities) as prof:
            result = await one_pass(server)
        sort_key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=sort_key, row_limit=25, max_name_column_width=60))
        return result

    return asyncio.run(main())


def _record_cohorts(runner) -> list[tuple[int, float]]:
    """(rows, seconds) of each prefill call the runner makes from now on (the engine's own figure
    sums them)."""
    cohorts: list[tuple[int, float]] = []
    prefill = runner.prefill

    def timed_prefill(rows):
        started = time.perf_counter()
        try:
            return prefill(rows)
        finally:
            cohorts.append((len(rows), time.perf_counter() - started))

    runner.prefill = timed_prefill
    return cohorts


def run_hf_engine_unfused(
    path: str, prompts: list[list[int]], budgets: list[int], device: str, args
) -> tuple[float, int]:
    """The hf engine with the sampler in plain tensor operations (RLBRIDGE_FUSED_SAMPLER=0)."""
    previous = os.environ.get("RLBRIDGE_FUSED_SAMPLER")
    os.environ["RLBRIDGE_FUSED_SAMPLER"] = "0"
    sampling._fused_sampler.cache_clear()
    try:
        return run_hf_engine(path, prompts, budgets, device, args)
    finally:
        os.environ.pop("RLBRIDGE_FUSED_SAMPLER") if previous is None else os.environ.update(
            RLBRIDGE_FUSED_SAMPLER=previous
        )
        sampling._fused_sampler.cache_clear()


def run_padded_generate(
    path: str, prompts: list[list[int]], budgets: list[int], device: str, args
) -> tuple[float, int]:
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    length = max(len(p) for p in prompts)
    input_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt) :] = torch.tensor(prompt)
        attention_mask[row, length - len(prompt) :] = 1
    config = GenerationConfig(
        max_new_tokens=max(budgets),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=0,
        eos_token_id=None,
    )
    with torch.inference_mode():
        model.generate(
            input_ids[:1].to(device),
            attention_mask=attention_mask[:1].to(device),
            generation_config=GenerationConfig(max_new_tokens=4, pad_token_id=0),
        )  # warm-up
        _synchronize(device)
        start = time.perf_counter()
        out = model.generate(input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config)
        _synchronize(device)
        elapsed = time.perf_counter() - start
    generated = out.shape[1] - length
    return elapsed, sum(min(budget, generated) for budget in budgets)


def run_continuous_batching(
    path: str, prompts: list[list[int]], budgets: list[int], device: str, args
) -> tuple[float, int]:
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    config = GenerationConfig(
        max_new_tokens=max(budgets),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        pad_token_id=0,
        eos_token_id=None,
    )
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    try:
        manager.add_request(prompts[0], request_id="warmup", max_new_tokens=4)
        _collect(manager, 1, args.timeout)
        start = time.perf_counter()
        for i, (prompt, budget) in enumerate(zip(prompts, budgets)):
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=budget)
        results = _collect(manager, len(prompts), args.timeout)
        elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    return elapsed, sum(len(r.generated_tokens) for r in results)


def _collect(manager, count: int, timeout: float) -> list:
    """The next `count` finished results from a continuous-batching manager (or fail after `timeout` s)."""
    results = []
    deadline = time.monotonic() + timeout
    while len(results) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(results)} of {count} results after {timeout:.0f} s")
        result = manager.get_result(timeout=1)
        if result is None and not manager.is_running():
            raise RuntimeError("the continuous-batching manager stopped before finishing")
        if result is not None and result.is_finished():
            results.append(result)
    return results


def copy_bandwidth(device: str, megabytes: int = 2048) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written (median of 10)."""
    source = torch.randn(megabytes * 2**20 // 4, device=device)
    target = torch.empty_like(source)
    times = []
    for _ in range(12):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        target.copy_(source)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * source.numel() * 4 / float(np.median(times[2:]))


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _free(device: str) -> None:
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def best_of(repeats: int, run, *args) -> tuple[float, int]:
    """Fastest of `repeats` runs: the machine is shared, so the minimum is the least disturbed."""
    return min((run(*args) for _ in range(repeats)), key=lambda result: result[0] / max(result[1], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--device", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--shape", default="0.5b", choices=sorted(SHAPES), help="the cuda preset's model shape")
    parser.add_argument(
        "--fused-decode",
        nargs="+",
        default=["off"],
        choices=["off", "compile", "triton"],
        help="hf engine decode step(s) to run, one engine run each (fused_decode.py)",
    )
    parser.add_argument("--requests", type=int, default=None, help="default: the preset's")
    parser.add_argument("--repeats", type=int, default=None, help="report the fastest of this many runs")
    parser.add_argument("--kv-cache", default="auto", choices=["auto", "slots", "dynamic"], help="hf engine runner")
    parser.add_argument("--enforce-eager", action="store_true", help="hf engine without CUDA graphs")
    parser.add_argument("--skip", nargs="*", default=[], choices=["generate", "continuous-batching", "unfused-sampler"])
    parser.add_argument("--timeout", type=float, default=600, help="continuous batching gives up after this")
    parser.add_argument("--profile", action="store_true", help="torch.profiler summary of the engine's timed pass")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.device]
    if args.device == "cuda":
        preset = dataclasses.replace(preset, config=SHAPES[args.shape])
    repeats = args.repeats or preset.repeats

    with tempfile.TemporaryDirectory() as path:
        num_params, weight_bytes = make_model(path, preset, args.device)
        prompts, budgets = make_workload(preset, args.requests or preset.requests)
        print(
            f"model: {num_params / 1e6:.2f}M params ({weight_bytes / 1e9:.3f} GB); {len(prompts)} requests; "
            f"prompts {min(map(len, prompts))}-{max(map(len, prompts))}; budgets p50 {int(np.median(budgets))}, "
            f"max {max(budgets)}, total {sum(budgets)}; device {args.device}, {args.threads} threads"
            + (f"; shape {args.shape}" if args.device == "cuda" else "")
        )
        runs = {}
        for mode in args.fused_decode:
            runs["hf engine" if mode == "off" else f"hf engine, {mode}"] = functools.partial(
                run_hf_engine, fused_decode=mode
            )
        if args.device == "cuda" and "unfused-sampler" not in args.skip:
            runs["hf engine, unfused sampler"] = run_hf_engine_unfused
        if "generate" not in args.skip:
            runs["padded generate"] = run_padded_generate
        if "continuous-batching" not in args.skip:
            runs["continuous batching"] = run_continuous_batching
        results = {}
        for name, run in runs.items():
            try:
                results[name] = best_of(repeats, run, path, prompts, budgets, args.device, args)
            except Exception as err:  # report, and still print the others
                print(f"{name}: failed: {type(err).__name__}: {err}")
            _free(args.device)
        floor = None
        if args.device == "cuda":
            bandwidth = copy_bandwidth(args.device)
            floor = sum(budgets) / (max(budgets) * weight_bytes / bandwidth)
            print(
                f"floor: {max(budgets)} steps x {weight_bytes / 1e9:.3f} GB / {bandwidth / 1e12:.2f} TB/s "
                f"(measured copy) = {max(budgets) * weight_bytes / bandwidth:.3f} s"
            )
        baseline = results.get("padded generate")
        for name, (elapsed, tokens) in results.items():
            rate = tokens / elapsed
            versus = f"{rate / (baseline[1] / baseline[0]):.2f}x padded generate" if baseline else "no baseline"
            of_floor = f", {100 * rate / floor:.1f}% of the floor" if floor else ""
            print(f"{name:>20}: {tokens:6d} useful tokens in {elapsed:7.2f} s = {rate:9.0f} tok/s ({versus}{of_floor})")
        if floor:
            print(f"{'floor':>20}: {floor:9.0f} tok/s")


if __name__ == "__main__":
    main()
