"""Built-in `hf` rollout engine vs transformers' own generation paths, on a long-tailed workload.

Workload: 32 requests, prompts of 8-32 tokens, per-request token budgets drawn long-tailed
(median ~20, longest 136), EOS disabled so every request generates exactly its budget. Model:
a ~0.66M-parameter Qwen2-shaped model created locally (random weights, saved and reloaded with
`from_pretrained`). Sampling at temperature 1.

Compared, each as useful tokens (sum of budgets) per second of wall time:
- hf engine: all requests submitted at once to `LLMServer`; rows leave the batch as they finish.
- padded generate: one `model.generate` over the left-padded batch; every row runs to the longest
  budget, the excess is thrown away (the baseline all ratios are relative to).
- continuous batching: transformers' continuous-batching manager (`init_continuous_batching`)
  with per-request max_new_tokens, if it runs on this machine. Two traps made it look ~20x slower
  in an earlier measurement: its first requests pay a long warm-up, and
  `get_result(request_id=...)` returns None whenever another request's result is at the head of
  the queue. Here it is warmed up and results are collected in completion order.

Every path is warmed up and run `--repeats` times; the fastest run counts (the machine is shared).

Run: python benchmarks/rollout_engine.py [--threads 2] [--device cpu] [--requests 32]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

import numpy as np
import torch
from transformers import AutoModelForCausalLM, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

from core_v1.rollout import LLMServer, SamplingParams


def make_model(path: str) -> int:
    """Save a Qwen2-shaped model of ~0.66M parameters to `path`; returns its parameter count."""
    config = Qwen2Config(vocab_size=3072, hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         tie_word_embeddings=False, eos_token_id=None, bos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(path)
    return sum(p.numel() for p in model.parameters())


def make_workload(num_requests: int, vocab_size: int, seed: int = 0) -> tuple[list[list[int]], list[int]]:
    """Prompts and long-tailed token budgets (lognormal, median 20, clipped to [4, 136], max 136)."""
    rng = np.random.default_rng(seed)
    prompts = [rng.integers(1, vocab_size, size=int(rng.integers(8, 33))).tolist() for _ in range(num_requests)]
    budgets = np.clip(np.round(rng.lognormal(mean=np.log(20), sigma=0.8, size=num_requests)), 4, 136).astype(int)
    budgets[int(np.argmax(budgets))] = 136
    return prompts, budgets.tolist()


def run_hf_engine(path: str, prompts: list[list[int]], budgets: list[int], device: str) -> tuple[float, int]:
    async def main() -> tuple[float, int]:
        server = LLMServer.from_model(path, device=device)
        await server.generate("warmup", prompts[0], SamplingParams(max_tokens=4, ignore_eos=True))
        start = time.perf_counter()
        outputs = await asyncio.gather(*(
            server.generate(f"r{i}", prompt,
                            SamplingParams(temperature=1.0, max_tokens=budget, seed=i, ignore_eos=True))
            for i, (prompt, budget) in enumerate(zip(prompts, budgets))))
        elapsed = time.perf_counter() - start
        server.shutdown()
        return elapsed, sum(len(o.token_ids) for o in outputs)
    return asyncio.run(main())


def run_padded_generate(path: str, prompts: list[list[int]], budgets: list[int], device: str) -> tuple[float, int]:
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    length = max(len(p) for p in prompts)
    input_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt):] = torch.tensor(prompt)
        attention_mask[row, length - len(prompt):] = 1
    config = GenerationConfig(max_new_tokens=max(budgets), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              pad_token_id=0, eos_token_id=None)
    with torch.inference_mode():
        model.generate(input_ids[:1].to(device), attention_mask=attention_mask[:1].to(device),
                       generation_config=GenerationConfig(max_new_tokens=4, pad_token_id=0))  # warm-up
        start = time.perf_counter()
        out = model.generate(input_ids.to(device), attention_mask=attention_mask.to(device), generation_config=config)
        elapsed = time.perf_counter() - start
    generated = out.shape[1] - length
    return elapsed, sum(min(budget, generated) for budget in budgets)


def run_continuous_batching(path: str, prompts: list[list[int]], budgets: list[int], device: str) -> tuple[float, int]:
    model = AutoModelForCausalLM.from_pretrained(path).to(device).eval()
    config = GenerationConfig(max_new_tokens=max(budgets), do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                              pad_token_id=0, eos_token_id=None)
    manager = model.init_continuous_batching(generation_config=config)
    manager.start()
    try:
        manager.add_request(prompts[0], request_id="warmup", max_new_tokens=4)
        _collect(manager, 1)
        start = time.perf_counter()
        for i, (prompt, budget) in enumerate(zip(prompts, budgets)):
            manager.add_request(prompt, request_id=f"r{i}", max_new_tokens=budget)
        results = _collect(manager, len(prompts))
        elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True)
    return elapsed, sum(len(r.generated_tokens) for r in results)


def _collect(manager, count: int, timeout: float = 600) -> list:
    """The next `count` finished results from a continuous-batching manager."""
    results = []
    deadline = time.monotonic() + timeout
    while len(results) < count and time.monotonic() < deadline:
        result = manager.get_result(timeout=1)
        if result is None and not manager.is_running():
            raise RuntimeError("the continuous-batching manager stopped before finishing")
        if result is not None and result.is_finished():
            results.append(result)
    return results


def best_of(repeats: int, run, *args) -> tuple[float, int]:
    """Fastest of `repeats` runs: the machine is shared, so the minimum is the least disturbed."""
    return min((run(*args) for _ in range(repeats)), key=lambda result: result[0] / max(result[1], 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--requests", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="report the fastest of this many runs")
    parser.add_argument("--skip-continuous-batching", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as path:
        num_params = make_model(path)
        prompts, budgets = make_workload(args.requests, vocab_size=3072)
        print(f"model: {num_params / 1e6:.2f}M params; {len(prompts)} requests; budgets p50 "
              f"{int(np.median(budgets))}, max {max(budgets)}, total {sum(budgets)}; device {args.device}, "
              f"{args.threads} threads")
        runs = {"padded generate": run_padded_generate, "hf engine": run_hf_engine}
        if not args.skip_continuous_batching:
            runs["continuous batching"] = run_continuous_batching
        results = {}
        for name, run in runs.items():
            try:
                results[name] = best_of(args.repeats, run, path, prompts, budgets, args.device)
            except Exception as err:  # report, and still print the others
                print(f"{name}: failed: {type(err).__name__}: {err}")
        baseline_elapsed, baseline_tokens = results["padded generate"]
        baseline = baseline_tokens / baseline_elapsed
        for name, (elapsed, tokens) in results.items():
            rate = tokens / elapsed
            print(f"{name:>20}: {tokens:5d} useful tokens in {elapsed:6.2f} s = {rate:8.0f} tok/s "
                  f"({rate / baseline:.2f}x padded generate)")


if __name__ == "__main__":
    main()
