"""The exponential-race draw of `sampling.sample` as one Triton kernel, for CUDA.

`sampling.sample` builds the per-token uniforms with about thirty int64 tensor operations over
[rows, vocab], each a full pass through memory; at a 150k vocabulary and 256 rows that is ~10 GB of
traffic per decode step, more than the model's weights. Here each program hashes, draws and
reduces its slice of the vocabulary in registers, reading the logits once:

- per (row, vocabulary slice): the running log-sum-exp of logits / temperature, and the race
  winner argmax(value - log(-log u)) with `value` the tempered logits (or the top-k/top-p filtered
  ones) and `u` the same 32-bit hash of (seed key, position, token) as `sampling.token_uniforms`;
- then a few [rows, slices] tensor operations pick the winning slice and the log-prob.

The draw is the one `sampling.sample` makes (the same uniforms; argmax(log softmax(v) - log E)
equals argmax(v - log E), the row's log-sum-exp being a constant), so a request's tokens do not
depend on which path ran. Greedy rows race without noise. No host synchronisation: safe inside a
CUDA graph capture once compiled (the runners warm up every graph eagerly before capturing it).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from core_v1.rollout.engines.sampling_rows import U_MAX, SamplingRows

_BLOCK = 2048
_SLICES = 16  # vocabulary slices per row: enough programs to fill the device at a few rows


@triton.jit
def _fmix32(h):
    h ^= h >> 16
    h *= 0x85EBCA6B
    h ^= h >> 13
    h *= 0xC2B2AE35
    return h ^ (h >> 16)


@triton.jit
def _race_kernel(
    logits_ptr,
    logits_stride,
    support_ptr,
    support_stride,
    temperature_ptr,
    greedy_ptr,
    key_lo_ptr,
    key_hi_ptr,
    position_ptr,
    max_out,
    sum_out,
    best_out,
    index_out,
    vocab,
    slice_len,
    num_slices,
    HAS_SUPPORT: tl.constexpr,
    U_MAX: tl.constexpr,
    BLOCK: tl.constexpr,
):
    row = tl.program_id(0)
    part = tl.program_id(1)
    temperature = tl.load(temperature_ptr + row)
    greedy = tl.load(greedy_ptr + row) != 0
    key_hi = tl.load(key_hi_ptr + row).to(tl.uint32)
    position = tl.load(position_ptr + row).to(tl.uint32)
    row_key = _fmix32(tl.load(key_lo_ptr + row).to(tl.uint32) ^ (position * 0x9E3779B9))

    run_max = tl.full([], float("-inf"), tl.float32)
    run_sum = tl.full([], 0.0, tl.float32)
    best = tl.full([], float("-inf"), tl.float32)
    best_index = tl.full([], 0, tl.int32)
    start = part * slice_len
    end = tl.minimum(start + slice_len, vocab)
    for offset in range(start, end, BLOCK):
        token = offset + tl.arange(0, BLOCK)
        inside = token < end
        scaled = (
            tl.load(logits_ptr + row * logits_stride + token, mask=inside, other=float("-inf")).to(tl.float32)
            / temperature
        )
        block_max = tl.maximum(run_max, tl.max(scaled, 0))
        run_sum = run_sum * tl.exp(run_max - block_max) + tl.sum(tl.exp(scaled - block_max), 0)
        run_max = block_max

        if HAS_SUPPORT:
            value = tl.load(support_ptr + row * support_stride + token, mask=inside, other=float("-inf"))
        else:
            value = scaled
        hashed = _fmix32(_fmix32(row_key ^ (token.to(tl.uint32) * 0x85EBCA77)) ^ key_hi)
        uniform = tl.minimum(((hashed >> 9).to(tl.float32) + 0.5) * (2.0**-23), U_MAX)
        race = tl.where(greedy, value, value - tl.log(-tl.log(uniform)))
        race = tl.where(inside, race, float("-inf"))
        block_best = tl.max(race, 0)
        block_index = offset + tl.argmax(race, 0)
        take = block_best > best  # strict: the first of equal values wins, as torch.argmax
        best_index = tl.where(take, block_index, best_index)
        best = tl.where(take, block_best, best)

    out = row * num_slices + part
    tl.store(max_out + out, run_max)
    tl.store(sum_out + out, run_sum)
    tl.store(best_out + out, best)
    tl.store(index_out + out, best_index)


def fused_sample(
    logits: torch.Tensor, rows: SamplingRows, support: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(token_ids [B] long, log_probs [B] float32) as `sampling.sample` returns them; `support` is
    the filtered tempered logits [B, V] (float32) when some row uses top-k or top-p."""
    logits = logits.contiguous()
    batch, vocab = logits.shape
    slice_len = triton.cdiv(triton.cdiv(vocab, _SLICES), _BLOCK) * _BLOCK
    num_slices = triton.cdiv(vocab, slice_len)  # every slice holds at least one token
    parts = torch.empty((3, batch, num_slices), dtype=torch.float32, device=logits.device)
    index = torch.empty((batch, num_slices), dtype=torch.int32, device=logits.device)
    support_arg = logits if support is None else support.contiguous()
    _race_kernel[(batch, num_slices)](
        logits,
        logits.stride(0),
        support_arg,
        support_arg.stride(0),
        rows.temperature,
        rows.greedy,
        rows.key_lo,
        rows.key_hi,
        rows.position,
        parts[0],
        parts[1],
        parts[2],
        index,
        vocab,
        slice_len,
        num_slices,
        HAS_SUPPORT=support is not None,
        U_MAX=U_MAX,
        BLOCK=_BLOCK,
    )
    part_max, part_sum, part_best = parts[0], parts[1], parts[2]
    log_sum_exp = torch.logsumexp(part_max + part_sum.log(), dim=1)
    tokens = index.gather(1, part_best.argmax(dim=1, keepdim=True)).long()
    chosen = logits.gather(1, tokens).squeeze(1).float() / rows.temperature
    return tokens.squeeze(1), chosen - log_sum_exp
