"""The built-in `hf` rollout engine on a vision-language model: prompts with an image each, long-tailed budgets.

A Qwen2.5-VL-shaped model with random weights is made locally (`save_pretrained`, reloaded by the
engine), each request carries one image as the processor would give it (`pixel_values` of its
patches and `image_grid_thw`, the prompt holding the image's pad tokens between its vision markers),
EOS is off so every request generates exactly its budget, all requests are submitted at once, and
sampling runs at temperature 1. Reported, as `benchmarks/rollout_engine.py` does for text models:

- hf engine: `LLMServer` over the built-in engine, its KV runner picked by `--kv-cache` (default
  "auto": the fixed-slot runner with CUDA graphs on cuda, the prompts prefilled by the model's own
  forward; "dynamic": transformers' forward over a growing cache) and its decode step by
  `--fused-decode` (off, compile, triton; `core_v1/rollout/engines/fused_decode.py`); one warm-up
  pass, then a timed pass split into prefill (vision tower included) and decode windows;
- padded generate: one `model.generate` over the left-padded batch with every image, each row run
  to the longest budget (the baseline the ratio is against);
- floor (cuda): the longest budget's decode steps x the language model's weight bytes / the device's
  measured copy bandwidth.

Presets by --device: cpu, a tiny model (2 layers, a 2-block vision tower), 8 requests with 4 x 4
patch images; cuda, the Qwen2.5-VL-3B shape (36 layers, hidden 2048, 16/2 heads, vocab 151936,
tied embeddings; a 32-block vision tower of width 1280), 64 requests, 392 x 392-pixel images
(28 x 28 patches, 196 image tokens), text of 32-128 tokens, budgets lognormal around 128 (longest
512), bfloat16.

Run: python -m benchmarks.vision_rollout [--device cpu|cuda] [--requests N] [--skip generate]
    [--kv-cache auto|slots|dynamic] [--fused-decode off|compile|triton]
Measured on one H100 (torch 2.11, transformers 5.17; 2026-12-05), before the fixed-slot runner ran
vision-language models, i.e. what `--kv-cache dynamic` measures now: 64 requests, 11,039 useful
tokens; hf engine 587 tok/s (timed pass 18.80 s = decode windows 17.02 s + prefill 1.73 s; cold pass
64.66 s), 2.45x padded generate (240 tok/s, 46.01 s), 5.6% of the floor.
With the fixed-slot runner (one H100, torch 2.11, transformers 5.17; 2026-12-05 evening, separate
calls on the same kind of card): default (`--kv-cache auto`, fused off, CUDA graphs) 2688 tok/s
(timed pass 4.11 s = decode 2.77 s + prefill 1.32 s), 7.15x padded generate (376 tok/s in that run),
25.4% of the floor; `--fused-decode triton --skip generate` 3527 tok/s (3.13 s), 33.4% of the floor;
`--kv-cache dynamic --skip generate` 621 tok/s (17.79 s), 5.9% of the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from benchmarks.rollout_engine import _synchronize, copy_bandwidth
from core_v1.rollout import LLMServer, SamplingParams
from core_v1.rollout.engines.fused_decode import FUSED_DECODE_CHOICES
from core_v1.rollout.engines.hf import KV_CACHE_CHOICES


@dataclass(frozen=True)
class Preset:
    text: dict
    vision: dict
    dtype: torch.dtype
    requests: int
    grid: int  # patches per image side (before the 2 x 2 merge)
    text_range: tuple[int, int]
    median_budget: int
    longest_budget: int


PRESETS = {
    "cpu": Preset(
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 2, 2]},
        ),
        dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=64, window_size=28),
        torch.float32,
        8,
        4,
        (8, 24),
        8,
        32,
    ),
    "cuda": Preset(
        dict(
            vocab_size=151936,
            hidden_size=2048,
            intermediate_size=11008,
            num_hidden_layers=36,
            num_attention_heads=16,
            num_key_value_heads=2,
            rms_norm_eps=1e-6,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]},
        ),
        dict(
            depth=32,
            hidden_size=1280,
            intermediate_size=3420,
            num_heads=16,
            out_hidden_size=2048,
            window_size=112,
            fullatt_block_indexes=[7, 15, 23, 31],
        ),
        torch.bfloat16,
        64,
        28,
        (32, 128),
        128,
        512,
    ),
}

PATCH_VALUES = 3 * 2 * 14 * 14  # channels x temporal patch x patch side^2: one row of pixel_values


def make_model(path: str, preset: Preset, device: str) -> tuple[Qwen2_5_VLConfig, int]:
    """Save a random Qwen2.5-VL of the preset's shape to `path`; returns its config and the language
    model's weight bytes (what each decode step reads)."""
    vocab = preset.text["vocab_size"]
    config = Qwen2_5_VLConfig(
        text_config=dict(preset.text, max_position_embeddings=32768, eos_token_id=None, bos_token_id=None),
        vision_config=dict(preset.vision, patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        vision_start_token_id=vocab - 4,
        vision_end_token_id=vocab - 3,
        image_token_id=vocab - 2,
        video_token_id=vocab - 1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForConditionalGeneration(config).to(preset.dtype)
    model.save_pretrained(path)
    language = {id(p): p for name, p in model.named_parameters() if "visual" not in name}.values()
    return config, sum(p.numel() * p.element_size() for p in language)


def make_workload(preset: Preset, config: Qwen2_5_VLConfig, num_requests: int, seed: int = 0):
    """Prompts (text, the image's markers and pads, text), their images and long-tailed budgets."""
    rng = np.random.default_rng(seed)
    image_tokens = preset.grid * preset.grid // 4
    text_vocab = config.vision_start_token_id  # ordinary tokens lie below the vision markers
    prompts, images = [], []
    for _ in range(num_requests):
        before, after = (int(n) for n in rng.integers(preset.text_range[0], preset.text_range[1] + 1, size=2) // 2)
        prompts.append(
            rng.integers(1, text_vocab, size=before).tolist()
            + [config.vision_start_token_id]
            + [config.image_token_id] * image_tokens
            + [config.vision_end_token_id]
            + rng.integers(1, text_vocab, size=after).tolist()
        )
        pixels = torch.from_numpy(rng.standard_normal((preset.grid * preset.grid, PATCH_VALUES)).astype(np.float32))
        images.append({"pixel_values": pixels, "image_grid_thw": torch.tensor([[1, preset.grid, preset.grid]])})
    budgets = np.clip(
        np.round(rng.lognormal(np.log(preset.median_budget), 0.8, size=num_requests)), 4, preset.longest_budget
    ).astype(int)
    budgets[int(np.argmax(budgets))] = preset.longest_budget
    return prompts, images, budgets.tolist()


def run_hf_engine(
    path: str, prompts, images, budgets, device: str, kv_cache: str, fused_decode: str
) -> tuple[float, int]:
    async def one_pass(server: LLMServer) -> tuple[float, int]:
        _synchronize(device)
        start = time.perf_counter()
        outputs = await asyncio.gather(
            *(
                server.generate(
                    f"r{i}",
                    prompt,
                    SamplingParams(temperature=1.0, max_tokens=budget, seed=i, ignore_eos=True),
                    multi_modal_inputs=image,
                )
                for i, (prompt, image, budget) in enumerate(zip(prompts, images, budgets))
            )
        )
        _synchronize(device)
        return time.perf_counter() - start, sum(len(o.token_ids) for o in outputs)

    async def main() -> tuple[float, int]:
        server = LLMServer.from_model(
            path,
            device=device,
            max_num_seqs=len(prompts),
            max_model_len=max(map(len, prompts)) + max(budgets),
            gpu_memory_utilization=0.9,
            kv_cache=kv_cache,
            fused_decode=fused_decode,
        )
        try:
            cold, _ = await one_pass(server)
            stats = server.engine.stats
            decode_before, prefill_before = stats.decode_seconds, stats.prefill_seconds
            timed = await one_pass(server)
            print(
                f"  hf engine: cold pass {cold:.2f} s; timed pass {timed[0]:.2f} s = decode windows "
                f"{stats.decode_seconds - decode_before:.2f} s + prefill {stats.prefill_seconds - prefill_before:.2f} s "
                f"+ the rest; runner {type(server.engine.runner).__name__}"
            )
            return timed
        finally:
            server.shutdown()

    return asyncio.run(main())


def run_padded_generate(path: str, prompts, images, budgets, device: str) -> tuple[float, int]:
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(path).to(device).eval()
    length = max(map(len, prompts))
    input_ids = torch.zeros((len(prompts), length), dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, prompt in enumerate(prompts):
        input_ids[row, length - len(prompt) :] = torch.tensor(prompt)
        attention_mask[row, length - len(prompt) :] = 1
    pixel_values = torch.cat([image["pixel_values"] for image in images]).to(device, model.dtype)
    grid = torch.cat([image["image_grid_thw"] for image in images]).to(device)
    with torch.inference_mode():
        _synchronize(device)
        start = time.perf_counter()
        out = model.generate(
            input_ids=input_ids.to(device),
            attention_mask=attention_mask.to(device),
            pixel_values=pixel_values,
            image_grid_thw=grid,
            max_new_tokens=max(budgets),
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            pad_token_id=0,
            eos_token_id=None,
        )
        _synchronize(device)
        elapsed = time.perf_counter() - start
    generated = out.shape[1] - length
    return elapsed, sum(min(budget, generated) for budget in budgets)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu", choices=sorted(PRESETS))
    parser.add_argument("--requests", type=int, default=None, help="default: the preset's")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--skip", nargs="*", default=[], choices=["generate"])
    parser.add_argument("--kv-cache", default="auto", choices=KV_CACHE_CHOICES, help="the hf engine's KV runner")
    parser.add_argument(
        "--fused-decode", default="off", choices=FUSED_DECODE_CHOICES, help="the slots runner's decode step"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    preset = PRESETS[args.device]
    with tempfile.TemporaryDirectory() as path:
        config, weight_bytes = make_model(path, preset, args.device)
        prompts, images, budgets = make_workload(preset, config, args.requests or preset.requests)
        print(
            f"model: Qwen2.5-VL shape, language model {weight_bytes / 1e9:.3f} GB; {len(prompts)} requests, "
            f"prompts {min(map(len, prompts))}-{max(map(len, prompts))} tokens with {preset.grid * preset.grid // 4} "
            f"image tokens each; budgets p50 {int(np.median(budgets))}, max {max(budgets)}, total {sum(budgets)}; "
            f"device {args.device}"
        )
        results = {
            "hf engine": run_hf_engine(path, prompts, images, budgets, args.device, args.kv_cache, args.fused_decode)
        }
        if "generate" not in args.skip:
            results["padded generate"] = run_padded_generate(path, prompts, images, budgets, args.device)
        floor = None
        if args.device == "cuda":
            bandwidth = copy_bandwidth(args.device)
            floor = sum(budgets) / (max(budgets) * weight_bytes / bandwidth)
        baseline = results.get("padded generate")
        for name, (elapsed, tokens) in results.items():
            rate = tokens / elapsed
            versus = f"{rate / (baseline[1] / baseline[0]):.2f}x padded generate" if baseline else "no baseline"
            of_floor = f", {100 * rate / floor:.1f}% of the floor" if floor else ""
            print(f"{name:>16}: {tokens:6d} useful tokens in {elapsed:7.2f} s = {rate:8.0f} tok/s ({versus}{of_floor})")


if __name__ == "__main__":
    main()
