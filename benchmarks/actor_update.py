"""The actor's PPO update (`core_v1.workers.ActorEngine.update_policy`) against a bare PyTorch loop
doing the same work, in one invocation: same model, same batch, same micro-batches, same
optimizer (AdamW, gradient clipping), same precision. Prints tokens/s and MFU for both and their
ratio.

Model: a randomly initialised Qwen2 made here and saved with `save_pretrained`, so the real loader
runs: `--model qwen2-0.5b` has Qwen2-0.5B's shape (hidden 896, 24 layers, 14 heads / 2 KV heads,
MLP 4864, vocab 151936, tied embeddings: 494M parameters); `--model tiny` is a ~0.1M-parameter
one for a CPU smoke run.

Batch: `--rows` sequences whose lengths are drawn uniformly from `[--min-len, --max-len]`
(default 1k-4k tokens), each a `--prompt-len`-token prompt (left-padded) and a response
(right-padded), laid out as docs/CONTRACTS.md says; random tokens, random advantages, and old
log-probs equal to the current policy's (as the first PPO epoch sees them).

Ours: `ActorEngine` from the default config with `use_dynamic_bsz` (micro-batches of at most
`--max-len` real tokens), one mini-batch (one optimizer step per update), `--dtype` as
`fsdp_config.model_dtype`. Bare: the same micro-batches (row groups), each cut to its own longest
row, `model(...)`, log-softmax of the response tokens, the clipped PPO loss (token mean),
`backward` scaled by the micro-batch's token share, `clip_grad_norm_`, `AdamW.step`.

One process, one device: `--device cuda` uses one GPU (FSDP2 only enters with several ranks).
Each side: one untimed warm-up update, then `--repeats` timed updates; the median is reported.
Tokens are real (unpadded) tokens. MFU = (6 x parameters x tokens + 12 x layers x hidden x
sum(len^2)) / time / peak, with peak `--peak-tflops` (default 989, an H200's dense bf16; CPU runs
print no MFU unless a peak is given).

Run: python benchmarks/actor_update.py [--model qwen2-0.5b|tiny] [--device cuda|cpu] [--dtype bf16|fp32]
                                       [--rows 16] [--min-len 1024] [--max-len 4096] [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import torch
from tensordict import TensorDict

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from core_v1.config import load_config  # noqa: E402
from core_v1.workers import ActorEngine  # noqa: E402
from core_v1.workers.model import resolve_dtype  # noqa: E402
from core_v1.workers.training import TokenBudget, micro_batch_indices  # noqa: E402

MODELS = {
    "qwen2-0.5b": dict(
        vocab_size=151936,
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
    ),
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        tie_word_embeddings=True,
    ),
}
CLIP = 0.2
LR = 1e-6


def make_model(name: str, directory: Path) -> str:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    Qwen2ForCausalLM(Qwen2Config(**MODELS[name])).save_pretrained(directory)
    return str(directory)


def make_batch(rows: int, min_len: int, max_len: int, prompt_len: int, vocab: int, seed: int = 0) -> TensorDict:
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(min_len, max_len + 1, (rows,), generator=generator)
    response_lengths = (lengths - prompt_len).clamp(min=1)
    width = int(response_lengths.max())
    columns = torch.arange(prompt_len + width)
    prompt_mask = torch.ones(rows, prompt_len, dtype=torch.bool)
    response_mask = columns[:width] < response_lengths[:, None]
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
    tokens = torch.randint(1, vocab, (rows, prompt_len + width), generator=generator)
    input_ids = torch.where(attention_mask.bool(), tokens, torch.zeros_like(tokens))
    return TensorDict(
        {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
            "responses": input_ids[:, prompt_len:],
            "response_mask": response_mask.long(),
            "advantages": torch.randn(rows, width, generator=generator),
            "old_log_probs": torch.zeros(rows, width),
        },
        batch_size=[rows],
    )


def engine_config(model_dir: str, rows: int, max_len: int, dtype: str):
    return load_config(
        [
            f"actor_rollout_ref.model.path={model_dir}",
            "data.train_files=unused.parquet",
            f"data.train_batch_size={rows}",
            f"actor_rollout_ref.actor.ppo_mini_batch_size={rows}",
            "actor_rollout_ref.actor.use_dynamic_bsz=true",
            f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={max_len}",
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            f"actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu={max_len}",
            f"actor_rollout_ref.actor.optim.lr={LR}",
            "actor_rollout_ref.actor.optim.weight_decay=0.0",
            f"actor_rollout_ref.actor.clip_ratio={CLIP}",
            "actor_rollout_ref.actor.grad_clip=1.0",
            f"actor_rollout_ref.actor.fsdp_config.model_dtype={dtype}",
        ]
    )


class BareLoop:
    """The update written directly against PyTorch and transformers; see the module docstring."""

    def __init__(self, model_dir: str, dtype: str, device: torch.device, groups: list[torch.Tensor]):
        from transformers import AutoModelForCausalLM

        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=resolve_dtype(dtype)).to(device)
        self.model.config.use_cache = False
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=LR, weight_decay=0.0)
        self.device, self.groups = device, groups

    def update(self, batch: TensorDict) -> None:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        total_tokens = batch["response_mask"].sum()
        for group in self.groups:
            micro = _trimmed(batch[group]).to(self.device)
            width = micro["responses"].shape[1]
            logits = self.model(
                input_ids=micro["input_ids"],
                attention_mask=micro["attention_mask"],
                position_ids=micro["position_ids"],
                logits_to_keep=width + 1,
            ).logits[:, :-1]
            log_probs = torch.log_softmax(logits.float(), -1).gather(-1, micro["responses"][..., None]).squeeze(-1)
            ratio = torch.exp(log_probs - micro["old_log_probs"])
            advantages, mask = micro["advantages"], micro["response_mask"].float()
            losses = torch.maximum(-advantages * ratio, -advantages * ratio.clamp(1 - CLIP, 1 + CLIP))
            loss = (losses * mask).sum() / mask.sum()
            (loss * mask.sum() / total_tokens).backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()


def _trimmed(micro: TensorDict) -> TensorDict:
    """The micro-batch cut to its longest row (prompts here are unpadded, so only responses shrink)."""
    width = int(micro["response_mask"].sum(-1).max())
    prompt = micro["input_ids"].shape[1] - micro["responses"].shape[1]
    return TensorDict(
        {
            **{key: micro[key][:, : prompt + width] for key in ("input_ids", "attention_mask", "position_ids")},
            **{key: micro[key][:, :width] for key in ("responses", "response_mask", "advantages", "old_log_probs")},
        },
        batch_size=micro.batch_size,
    )


def timed(update: Callable[[], None], repeats: int, device: torch.device) -> float:
    update()  # warm-up: allocator, kernels, optimizer state
    seconds = []
    for _ in range(repeats):
        _synchronize(device)
        start = time.perf_counter()
        update()
        _synchronize(device)
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def model_flops(batch: TensorDict, parameters: int, layers: int, hidden: int) -> float:
    """Forward + backward FLOPs of one update over the real tokens (dense part plus attention scores)."""
    lengths = batch["attention_mask"].sum(-1).double()
    return float(6 * parameters * lengths.sum() + 12 * layers * hidden * (lengths**2).sum())


def report(name: str, seconds: float, tokens: int, flops: float, peak_tflops: Optional[float]) -> str:
    mfu = f", MFU {flops / seconds / (peak_tflops * 1e12):.3f}" if peak_tflops else ""
    return f"{name:>5}: {seconds:.3f} s/update, {tokens / seconds:,.0f} tokens/s{mfu}"


def main(argv: Optional[list[str]] = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="qwen2-0.5b")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bf16")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--min-len", type=int, default=1024)
    parser.add_argument("--max-len", type=int, default=4096)
    parser.add_argument("--prompt-len", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--peak-tflops", type=float, default=None)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)
        device = torch.device("cuda", torch.cuda.current_device())
    peak = args.peak_tflops or (989.0 if device.type == "cuda" else None)
    shape = MODELS[args.model]

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_model(args.model, Path(tmp) / "model")
        batch = make_batch(args.rows, args.min_len, args.max_len, args.prompt_len, shape["vocab_size"])
        ours = ActorEngine(engine_config(model_dir, args.rows, args.max_len, args.dtype), device=device)
        ours.set_total_training_steps(args.repeats + 1)
        batch["old_log_probs"] = ours.compute_log_prob(batch)[0]
        groups = micro_batch_indices(batch, TokenBudget(args.max_len, "--max-len"))
        parameters = sum(p.numel() for p in ours.model.parameters())
        ours_s = timed(lambda: ours.update_policy(batch), args.repeats, device)  # noqa: F821 - timed before the del
        del ours
        if device.type == "cuda":
            torch.cuda.empty_cache()
        bare = BareLoop(model_dir, args.dtype, device, groups)
        bare_s = timed(lambda: bare.update(batch), args.repeats, device)

    tokens = int(batch["attention_mask"].sum())
    flops = model_flops(batch, parameters, shape["num_hidden_layers"], shape["hidden_size"])
    print(
        f"actor update: {args.model} ({parameters / 1e6:.1f}M parameters, {args.dtype}) on {device}; {args.rows} rows "
        f"of {args.min_len}-{args.max_len} tokens ({tokens} tokens) in {len(groups)} micro-batches"
    )
    print(report("ours", ours_s, tokens, flops, peak))
    print(report("bare", bare_s, tokens, flops, peak))
    print(f"ours / bare throughput: {bare_s / ours_s:.3f}")
    return {"ours_s": ours_s, "bare_s": bare_s, "tokens": tokens, "ratio": bare_s / ours_s}


if __name__ == "__main__":
    main()
