"""Triton kernels of `fused_decode.FusedOps` (fused_decode="triton"; see `fused_decode` for what
each computes and its pure-torch reference). Each reads its inputs once, computes in float32 and
rounds once. No host synchronisation, so they run inside the runner's CUDA graphs."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_SILU_BLOCK = 1024


@triton.jit
def _add_rms_norm_kernel(x_ptr, residual_ptr, weight_ptr, out_ptr, total_ptr, width, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    x = tl.load(x_ptr + row * width + cols, mask=inside, other=0.0).to(tl.float32)
    residual = tl.load(residual_ptr + row * width + cols, mask=inside, other=0.0).to(tl.float32)
    # The sum is rounded to the stream's dtype before the norm reads it, as the reference does.
    total = (x + residual).to(total_ptr.dtype.element_ty)
    tl.store(total_ptr + row * width + cols, total, mask=inside)
    total = total.to(tl.float32)
    scale = 1.0 / tl.sqrt(tl.sum(total * total, 0) / width + eps)
    weight = tl.load(weight_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * width + cols, (total * scale * weight).to(out_ptr.dtype.element_ty), mask=inside)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    x, residual = x.contiguous(), residual.contiguous()
    rows, width = x.shape
    out, total = torch.empty_like(x), torch.empty_like(residual)
    _add_rms_norm_kernel[(rows,)](x, residual, weight, out, total, width, eps, BLOCK=triton.next_power_of_2(width))
    return out, total


@triton.jit
def _rotary_write_kernel(
    qkv_ptr,
    positions_ptr,
    cos_ptr,
    sin_ptr,
    q_out_ptr,
    keys_ptr,
    values_ptr,
    write_index_ptr,
    num_heads,
    num_kv_heads,
    HEAD_DIM: tl.constexpr,
    HALF: tl.constexpr,
):
    row = tl.program_id(0)
    head = tl.program_id(1)  # q heads, then k heads, then v heads
    source = qkv_ptr + (row * (num_heads + 2 * num_kv_heads) + head) * HEAD_DIM
    half = tl.arange(0, HALF)
    low = tl.load(source + half)
    high = tl.load(source + HALF + half)
    if head >= num_heads + num_kv_heads:  # v: copied into its slot as it is
        slot = tl.load(write_index_ptr + row * num_kv_heads + head - num_heads - num_kv_heads)
        tl.store(values_ptr + slot * HEAD_DIM + half, low)
        tl.store(values_ptr + slot * HEAD_DIM + HALF + half, high)
    else:
        position = tl.load(positions_ptr + row)
        cos_low = tl.load(cos_ptr + position * HEAD_DIM + half).to(tl.float32)
        cos_high = tl.load(cos_ptr + position * HEAD_DIM + HALF + half).to(tl.float32)
        sin_low = tl.load(sin_ptr + position * HEAD_DIM + half).to(tl.float32)
        sin_high = tl.load(sin_ptr + position * HEAD_DIM + HALF + half).to(tl.float32)
        low32, high32 = low.to(tl.float32), high.to(tl.float32)
        out_low = (low32 * cos_low - high32 * sin_low).to(low.dtype)
        out_high = (high32 * cos_high + low32 * sin_high).to(low.dtype)
        if head < num_heads:
            target = q_out_ptr + (row * num_heads + head) * HEAD_DIM
            tl.store(target + half, out_low)
            tl.store(target + HALF + half, out_high)
        else:
            slot = tl.load(write_index_ptr + row * num_kv_heads + head - num_heads)
            tl.store(keys_ptr + slot * HEAD_DIM + half, out_low)
            tl.store(keys_ptr + slot * HEAD_DIM + HALF + half, out_high)


def rotary_write(
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
    qkv = qkv.contiguous()
    rows, heads, head_dim = qkv.shape
    q = torch.empty((rows, num_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    _rotary_write_kernel[(rows, heads)](
        qkv,
        positions,
        cos.contiguous(),
        sin.contiguous(),
        q,
        keys,
        values,
        write_index,
        num_heads,
        num_kv_heads,
        HEAD_DIM=head_dim,
        HALF=head_dim // 2,
    )
    return q


@triton.jit
def _silu_mul_kernel(gate_up_ptr, out_ptr, width, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < width
    gate = tl.load(gate_up_ptr + row * 2 * width + cols, mask=inside, other=0.0).to(tl.float32)
    up = tl.load(gate_up_ptr + row * 2 * width + width + cols, mask=inside, other=0.0).to(tl.float32)
    out = gate / (1.0 + tl.exp(-gate)) * up
    tl.store(out_ptr + row * width + cols, out.to(out_ptr.dtype.element_ty), mask=inside)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    gate_up = gate_up.contiguous()
    rows, width = gate_up.shape[0], gate_up.shape[1] // 2
    out = torch.empty((rows, width), dtype=gate_up.dtype, device=gate_up.device)
    _silu_mul_kernel[(rows, triton.cdiv(width, _SILU_BLOCK))](gate_up, out, width, BLOCK=_SILU_BLOCK)
    return out


_ATTENTION_BLOCK = 64  # keys per inner step
_ATTENTION_PROGRAMS = 1024  # split the keys until about this many programs run
_SPLIT_BLOCKS = 2  # shortest slice, in blocks: a few rows over long slots still fill the device


@triton.jit
def _decode_attention_kernel(
    q_ptr,
    keys_ptr,
    values_ptr,
    positions_ptr,
    acc_ptr,
    max_ptr,
    sum_ptr,
    out_ptr,
    kv_heads,
    slot_length,
    split_len,
    num_splits,
    scale,
    GROUPS: tl.constexpr,
    GROUPS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK: tl.constexpr,
    PRECISION: tl.constexpr,
    ONE_SLICE: tl.constexpr,
):
    row = tl.program_id(0)
    kv_head = tl.program_id(1)
    split = tl.program_id(2)
    group = tl.arange(0, GROUPS_PAD)
    dim = tl.arange(0, HEAD_DIM)
    q = tl.load(
        q_ptr + ((row * kv_heads + kv_head) * GROUPS + group[:, None]) * HEAD_DIM + dim[None, :],
        mask=group[:, None] < GROUPS,
        other=0.0,
    )
    base = (row * kv_heads + kv_head) * slot_length  # row r's keys live in slot r
    start = split * split_len
    end = tl.minimum(start + split_len, tl.load(positions_ptr + row) + 1)  # a row sees keys up to its position
    run_max = tl.full([GROUPS_PAD], float("-inf"), tl.float32)
    run_sum = tl.zeros([GROUPS_PAD], tl.float32)
    acc = tl.zeros([GROUPS_PAD, HEAD_DIM], tl.float32)
    for offset in range(start, end, BLOCK):
        key = offset + tl.arange(0, BLOCK)
        valid = key < end
        k = tl.load(keys_ptr + (base + key[:, None]) * HEAD_DIM + dim[None, :], mask=valid[:, None], other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale
        scores = tl.where(valid[None, :], scores, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(scores, 1))
        weights = tl.exp(scores - new_max[:, None])
        rescale = tl.exp(run_max - new_max)
        v = tl.load(values_ptr + (base + key[:, None]) * HEAD_DIM + dim[None, :], mask=valid[:, None], other=0.0)
        acc = acc * rescale[:, None] + tl.dot(weights.to(v.dtype), v, input_precision=PRECISION)
        run_sum = run_sum * rescale + tl.sum(weights, 1)
        run_max = new_max
    if ONE_SLICE:  # the whole answer: normalise and write it, no merge kernel
        target = out_ptr + ((row * kv_heads + kv_head) * GROUPS + group[:, None]) * HEAD_DIM + dim[None, :]
        tl.store(target, (acc / run_sum[:, None]).to(out_ptr.dtype.element_ty), mask=group[:, None] < GROUPS)
    else:
        part = (row * kv_heads + kv_head) * num_splits + split
        tl.store(acc_ptr + (part * GROUPS_PAD + group[:, None]) * HEAD_DIM + dim[None, :], acc)
        tl.store(max_ptr + part * GROUPS_PAD + group, run_max)
        tl.store(sum_ptr + part * GROUPS_PAD + group, run_sum)


def decode_attention(
    q: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    positions: torch.Tensor,
    kv_length: int,
    mask: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Flash-decoding over the slots: programs per (row, kv head, slice of the first `kv_length`
    keys), each an online softmax over its slice, then the slices merged by their maxima. `mask`
    is not read (the positions say which keys a row sees); it keeps the reference's signature."""
    rows, heads, head_dim = q.shape
    kv_heads, slot_length = keys.shape[1], keys.shape[2]
    groups = heads // kv_heads
    groups_pad = max(16, triton.next_power_of_2(groups))  # tl.dot's smallest tile
    num_splits = max(
        1,
        min(
            triton.cdiv(_ATTENTION_PROGRAMS, rows * kv_heads), triton.cdiv(kv_length, _SPLIT_BLOCKS * _ATTENTION_BLOCK)
        ),
    )
    split_len = triton.cdiv(triton.cdiv(kv_length, num_splits), _ATTENTION_BLOCK) * _ATTENTION_BLOCK
    num_splits = triton.cdiv(kv_length, split_len)
    acc = torch.empty((rows, kv_heads, num_splits, groups_pad, head_dim), dtype=torch.float32, device=q.device)
    run_max = torch.empty((rows, kv_heads, num_splits, groups_pad), dtype=torch.float32, device=q.device)
    run_sum = torch.empty_like(run_max)
    out = torch.empty((rows, heads * head_dim), dtype=q.dtype, device=q.device)
    _decode_attention_kernel[(rows, kv_heads, num_splits)](
        q.contiguous(),
        keys,
        values,
        positions,
        acc,
        run_max,
        run_sum,
        out,
        kv_heads,
        slot_length,
        split_len,
        num_splits,
        scale,
        GROUPS=groups,
        GROUPS_PAD=groups_pad,
        HEAD_DIM=head_dim,
        BLOCK=_ATTENTION_BLOCK,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        ONE_SLICE=num_splits == 1,
    )
    if num_splits == 1:
        return out
    _merge_slices_kernel[(rows * kv_heads,)](
        acc, run_max, run_sum, out, num_splits, GROUPS=groups, GROUPS_PAD=groups_pad, HEAD_DIM=head_dim
    )
    return out


@triton.jit
def _merge_slices_kernel(
    acc_ptr,
    max_ptr,
    sum_ptr,
    out_ptr,
    num_splits,
    GROUPS: tl.constexpr,
    GROUPS_PAD: tl.constexpr,
    HEAD_DIM: tl.constexpr,
):
    """One (row, kv head): the slices' partial softmax sums merged by their maxima, divided once."""
    pair = tl.program_id(0)
    group = tl.arange(0, GROUPS_PAD)
    dim = tl.arange(0, HEAD_DIM)
    # Slice 0 always sees key 0, so its maximum is finite and seeds the merge; a later slice past
    # the row's position saw no key (maximum -inf) and gets weight exp(-inf) = 0.
    first = pair * num_splits
    run_max = tl.load(max_ptr + first * GROUPS_PAD + group)
    run_sum = tl.load(sum_ptr + first * GROUPS_PAD + group)
    acc = tl.load(acc_ptr + (first * GROUPS_PAD + group[:, None]) * HEAD_DIM + dim[None, :])
    for split in range(1, num_splits):
        part = first + split
        part_max = tl.load(max_ptr + part * GROUPS_PAD + group)
        new_max = tl.maximum(run_max, part_max)
        old_weight, part_weight = tl.exp(run_max - new_max), tl.exp(part_max - new_max)
        part_acc = tl.load(acc_ptr + (part * GROUPS_PAD + group[:, None]) * HEAD_DIM + dim[None, :])
        acc = acc * old_weight[:, None] + part_acc * part_weight[:, None]
        run_sum = run_sum * old_weight + tl.load(sum_ptr + part * GROUPS_PAD + group) * part_weight
        run_max = new_max
    out = acc / run_sum[:, None]
    target = out_ptr + (pair * GROUPS + group[:, None]) * HEAD_DIM + dim[None, :]
    tl.store(target, out.to(out_ptr.dtype.element_ty), mask=group[:, None] < GROUPS)
