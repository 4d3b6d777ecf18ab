"""The fused pieces of the slots runner's decode step, picked by `HFEngine(fused_decode=...)`.

A decode step at a few hundred rows is launch-bound: most of its kernels are small elementwise
passes (RMSNorm, residual adds, rotary, K/V writes, SiLU). `SlotDecoder.decode_fused` runs the
same layers in the residual-stream form that lets four pieces each become one kernel:

- `add_rms_norm`: residual += x, then RMSNorm of the new residual (every norm after the first);
- `rotary_write`: rotary of q and k, k and v written into their slots, rotated q returned;
- `silu_mul`: SiLU(gate) * up of the fused gate/up projection;
- `decode_attention`: each row's query heads over its slot's keys up to its position (the
  reference: PyTorch's SDPA under a mask; the kernel: flash-decoding, the keys split into slices
  that run in parallel and merge by their maxima).

Modes (`FUSED_DECODE_CHOICES`):

- "off": `SlotDecoder.decode`, each piece a few PyTorch kernels.
- "compile": `decode_fused` with the pure-torch references below, through `torch.compile`
  (Inductor generates the fused kernels: Triton on CUDA, C++ loops on CPU); on CUDA the runner
  captures the compiled step in its CUDA graphs as it does the plain one.
- "triton": `decode_fused` with the hand-written Triton kernels of `fused_decode_triton.py` (CUDA
  only; on the CPU they run only under Triton's interpreter, `TRITON_INTERPRET=1`, which the
  tests use).

Each Triton kernel has a pure-torch reference (`*_reference`) with the same arguments; the
kernels compute in float32 and round once, so in bfloat16 they may differ from the reference by
a rounding. Tested on the CPU (equality with the references, Triton under the interpreter) and
on one H100 (each kernel against its reference in float32 and bfloat16; greedy and seeded tokens of
"compile" and "triton" equal to "off" for every request, inside the CUDA graphs) before the slices'
merge became a kernel; that change is tested on the CPU only. Speed: benchmarks/rollout_engine.py's
docstring ("triton" 1.52x "off" on the 0.5B workload).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from core_v1.rollout.engines.slot_decoder import _rotate

FUSED_DECODE_CHOICES = ("off", "compile", "triton")


@dataclass(frozen=True)
class FusedOps:
    """The four fused pieces `SlotDecoder.decode_fused` calls."""

    add_rms_norm: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    rotary_write: Callable[..., torch.Tensor]
    silu_mul: Callable[[torch.Tensor], torch.Tensor]
    decode_attention: Callable[..., torch.Tensor]


# ---- references ----------------------------------------------------------------------------


def add_rms_norm_reference(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(RMSNorm(x + residual), x + residual) for x, residual [rows, width]."""
    total = x + residual
    return F.rms_norm(total, (total.shape[-1],), weight, eps), total


def rotary_write_reference(
    qkv: torch.Tensor,
    positions: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    write_index: torch.Tensor,
    num_heads: int,
    num_kv_heads: int,
) -> torch.Tensor:
    """qkv [rows, heads + 2 kv_heads, head_dim] at `positions` [rows]: rotate q and k by the rows of
    the tables `cos`/`sin` [positions, head_dim], write k and v into `keys`/`values` [-1, head_dim]
    at `write_index` [rows * kv_heads], return the rotated q [rows, heads, head_dim]."""
    rows, _, head_dim = qkv.shape
    q_and_k = _rotate(qkv[:, : num_heads + num_kv_heads], cos[positions][:, None], sin[positions][:, None])
    keys.index_copy_(0, write_index, q_and_k[:, num_heads:].reshape(-1, head_dim))
    values.index_copy_(0, write_index, qkv[:, num_heads + num_kv_heads :].reshape(-1, head_dim))
    return q_and_k[:, :num_heads]


def silu_mul_reference(gate_up: torch.Tensor) -> torch.Tensor:
    """SiLU(gate) * up of gate_up [rows, 2 * width] (gate first)."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.silu(gate) * up


def decode_attention_reference(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    positions: torch.Tensor,
    kv_length: int,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Attention of q [rows, heads, head_dim] (row r in slot r) over the first `kv_length` keys of
    one layer's `keys`/`values` [slots, kv_heads, length, head_dim], `mask` [rows, 1, 1, kv_length]
    true where a row sees a key (up to its position); returns [rows, heads * head_dim]. The query
    heads sharing a K/V head are folded into the query length (no repeated K/V)."""
    rows, heads, head_dim = q.shape
    kv_heads = keys.shape[1]
    out = F.scaled_dot_product_attention(
        q.reshape(rows, kv_heads, heads // kv_heads, head_dim),
        keys[:rows, :, :kv_length],
        values[:rows, :, :kv_length],
        attn_mask=mask,
        scale=scale,
    )
    return out.reshape(rows, heads * head_dim)


REFERENCE_OPS = FusedOps(add_rms_norm_reference, rotary_write_reference, silu_mul_reference, decode_attention_reference)


def triton_missing() -> str | None:
    """Why the Triton kernels cannot run here (None when they can)."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "Triton is not installed (pip install triton)"
    return None


@functools.cache
def triton_ops() -> FusedOps:
    """The Triton kernels (imported on first use: Triton is optional)."""
    from core_v1.rollout.engines import fused_decode_triton as kernels

    return FusedOps(kernels.add_rms_norm, kernels.rotary_write, kernels.silu_mul, kernels.decode_attention)


def decode_forward(decoder, mode: str) -> Callable[..., torch.Tensor]:
    """The decode forward `SlotRunner` runs for `mode`: (cache, tokens, positions, kv_length,
    rope_positions) -> logits."""
    if mode == "off":
        return decoder.decode
    ops = triton_ops() if mode == "triton" else REFERENCE_OPS

    def forward(
        cache, tokens: torch.Tensor, positions: torch.Tensor, kv_length: int, rope_positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        return decoder.decode_fused(ops, cache, tokens, positions, kv_length, rope_positions)

    return torch.compile(forward) if mode == "compile" else forward


def fused_unsupported_reason(model, mode: str) -> str | None:
    """Why `decode_fused` in `mode` cannot run a model the slots runner runs (None when it can)."""
    config = model.config.get_text_config()
    if getattr(config, "hidden_act", "silu") not in ("silu", "swish"):
        return f"its MLP activation is {config.hidden_act!r}, the fused step computes SiLU"
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if mode == "triton" and (head_dim & (head_dim - 1) or head_dim < 16):
        return f"its head size {head_dim} is not a power of two of at least 16 (the kernels' blocks)"
    return None
