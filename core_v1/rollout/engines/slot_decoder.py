"""A Llama-family decoder run over KV storage allocated once: one fixed slot per running sequence.

`SlotKVCache` holds K and V for every layer as one tensor [layers, 2, slots, kv_heads, length,
head_dim], allocated when the engine starts (or wakes) and never concatenated or re-allocated per
step. Running rows occupy slots 0..B-1 in row order, so a decode step reads the storage through a
plain view (no gather); when rows finish, the last rows move into the holes (`move`).

`SlotDecoder` runs the HF model's own weights (embedding, q/k/v/o projections, RMSNorms, MLP,
lm_head, the rotary table from its rotary embedding) layer by layer, with attention over that
storage through PyTorch's `scaled_dot_product_attention`. Each layer's q/k/v projections and its
gate/up projections are fused into one matrix product each: `fuse_projections` re-points the HF
parameters at slices of one fused tensor, so `update_weights` (which copies into the parameters)
updates the fused weights too, with no second copy in memory.

- decode: one token per row, written at its position, attending over the first `kv_length`
  columns; the query heads sharing a K/V head are folded into the query length, so grouped-query
  attention needs no repeated K/V;
- decode_fused: the decode step in residual-stream form over four fused pieces (residual add +
  RMSNorm, rotary + K/V slot write, SiLU * up, attention over the slots), as `fused_decode.py`
  supplies them;
- prefill: right-padded rows [n, t] starting at per-row offsets (a later chunk of a long prompt
  attends to the chunks already written), causal within the chunk.

Supported: the architectures whose decoder layer is Llama's (Llama, Qwen2, Qwen3, Mistral without
sliding window), and the language models of the vision-language families Qwen2-VL, Qwen2.5-VL and
Qwen3-VL (dense). Anything else runs on transformers' own forward (`kv_batch.KVBatch`).

A vision-language model's prompt is prefilled by the model's own forward (the runner copies its K/V
into the slots); decoding is text only. Its rotary embedding is mRoPE: each axis (time, height,
width) rotates its own sections of the head dimensions, but every token after the prompt has the
same position on all three axes (the prompt's largest position + 1, then + 1 a token), and with
equal positions the sections recombine into the ordinary rotary table of that position, whatever
the sections (transformers' `Qwen2VLTextRotaryEmbedding.recomposition_frequencies`; Qwen3-VL
interleaves them, with the same result). So decode rotates by the table at `rope_positions` = the
slot position + the row's rope delta (its next mRoPE position less its length, <= 0 after images),
while K/V are written and attended at the slot position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

# The language models' config types: a vision-language model is judged by its text config.
SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral", "qwen2_vl_text", "qwen2_5_vl_text", "qwen3_vl_text")


def language_model(model: PreTrainedModel) -> torch.nn.Module:
    """The decoder stack (embed_tokens, layers, norm, rotary_emb): `model.model` of a causal LM, the
    `language_model` inside it for a vision-language model."""
    return getattr(model.model, "language_model", model.model)


def unsupported_reason(model: PreTrainedModel) -> str | None:
    """Why `SlotDecoder` cannot run `model` (None when it can)."""
    config = model.config.get_text_config()
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return f"model type {config.model_type!r} is not one of {', '.join(SUPPORTED_MODEL_TYPES)}"
    if set(getattr(config, "layer_types", None) or ["full_attention"]) != {"full_attention"}:
        return "the model has sliding-window layers"
    if (
        getattr(config, "sliding_window", None)
        and getattr(config, "use_sliding_window", True)
        and config.model_type == "mistral"
    ):
        return "the model uses a sliding window"
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    if rope.get("rope_type", "default") in ("dynamic", "longrope"):
        return f"rope type {rope['rope_type']!r} changes with the sequence length"
    layer = language_model(model).layers[0]
    needed = ("input_layernorm", "post_attention_layernorm", "mlp", "self_attn")
    if not all(hasattr(layer, name) for name in needed) or not all(
        hasattr(layer.self_attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj")
    ):
        return "its decoder layer is not shaped like Llama's"
    return None


class SlotKVCache:
    """K/V storage for `num_slots` sequences of up to `length` positions each, for every layer."""

    def __init__(self, config, num_slots: int, length: int, dtype: torch.dtype, device: torch.device):
        self.num_slots, self.length = num_slots, length
        self.kv = torch.zeros(slot_shape(config, num_slots, length), dtype=dtype, device=device)

    @staticmethod
    def bytes_per_slot(config, length: int, dtype: torch.dtype) -> int:
        numel = 1
        for size in slot_shape(config, 1, length):
            numel *= size
        return numel * torch.empty((), dtype=dtype).element_size()

    def move(self, sources: list[int], targets: list[int], used_length: int) -> None:
        """Copy slots `sources` into slots `targets` (disjoint), the first `used_length` positions."""
        if not sources:
            return
        device = self.kv.device
        src = torch.tensor(sources, device=device)
        dst = torch.tensor(targets, device=device)
        self.kv[:, :, dst, :, :used_length] = self.kv[:, :, src, :, :used_length]

    def load_left_padded(self, layers, slots: list[int], lengths: list[int]) -> None:
        """Copy K/V computed by transformers' forward into slots `slots`: `layers` holds per layer
        `keys`/`values` [rows, kv_heads, width, head_dim], row r left-padded (its `lengths[r]` real
        tokens in the last columns), which land at positions 0.. of its slot."""
        counts = torch.tensor(lengths)
        width = layers[0].keys.shape[2]
        positions = torch.cat([torch.arange(n) for n in lengths])  # one entry per real token
        rows, slot_index, columns = (
            index.to(self.kv.device)
            for index in (
                torch.arange(len(lengths)).repeat_interleave(counts),
                torch.tensor(slots).repeat_interleave(counts),
                positions + (width - counts).repeat_interleave(counts),
            )
        )
        positions = positions.to(self.kv.device)
        for index, layer in enumerate(layers):
            # [tokens, kv_heads, head_dim] on both sides: the two index tensors are not adjacent
            self.kv[index, 0][slot_index, :, positions] = layer.keys[rows, :, columns].to(self.kv.dtype)
            self.kv[index, 1][slot_index, :, positions] = layer.values[rows, :, columns].to(self.kv.dtype)


def slot_shape(config, num_slots: int, length: int) -> tuple[int, ...]:
    config = config.get_text_config()
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return (config.num_hidden_layers, 2, num_slots, config.num_key_value_heads, length, head_dim)


class SlotDecoder:
    """Forward passes of a Llama-family HF model over a `SlotKVCache` (see the module docstring)."""

    def __init__(self, model: PreTrainedModel, max_positions: int):
        config = model.config.get_text_config()
        self.model = model
        self.body = language_model(model)
        self.layers = list(self.body.layers)
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        self.scaling = self.layers[0].self_attn.scaling
        self.vocab_size = config.vocab_size
        self.max_positions = max_positions
        self.cos = self.sin = None
        self.fused: list[dict[str, torch.Tensor | None]] = []

    def prepare(self) -> None:
        """Fuse the projections and tabulate the rotary embedding where the weights are now (at
        start and after a wake-up moved them back)."""
        self.fused = [fuse_projections(layer) for layer in self.layers]
        self.refresh_rotary(self.max_positions)

    def release(self) -> None:
        self.cos = self.sin = None
        self.fused = []

    def cover(self, max_positions: int) -> bool:
        """Make the rotary tables reach `max_positions` (a row whose rope delta is positive rotates
        past its slot); True when they were re-made, so CUDA graphs that read the old ones are stale."""
        if max_positions <= self.max_positions:
            return False
        self.max_positions = max_positions
        if self.cos is not None:
            self.refresh_rotary(max_positions)
        return True

    def refresh_rotary(self, max_positions: int) -> None:
        """Tabulate cos/sin for positions [0, max_positions) on the model's device (after it moved)."""
        weight = self.body.embed_tokens.weight
        positions = torch.arange(max_positions, device=weight.device)[None, :]
        if _is_mrope(self.body.config):  # older transformers' mRoPE tables take only (t, h, w) axes
            positions = positions.expand(3, 1, max_positions)
        cos, sin = self.body.rotary_emb(weight[:1], positions)
        self.cos, self.sin = cos[0].contiguous(), sin[0].contiguous()  # [positions, head_dim]

    # ---- decode ------------------------------------------------------------------------------

    def decode(
        self,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        kv_length: int,
        rope_positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One step for rows 0..B-1 (B = len(tokens)): feed `tokens` [B] at `positions` [B] (writing
        their K/V there) and return the next-token logits [B, V]. No host synchronisation.
        `rope_positions` [B]: the positions the rotary embedding takes, where they differ from the
        slot positions (a vision-language model's rows; see the module docstring)."""
        batch = tokens.shape[0]
        write_index, mask = self._decode_index(cache, positions, kv_length)
        rope = positions if rope_positions is None else rope_positions
        cos, sin = self.cos[rope][:, None, :], self.sin[rope][:, None, :]
        hidden = self.body.embed_tokens(tokens)
        for index, layer in enumerate(self.layers):
            keys, values = cache.kv[index, 0], cache.kv[index, 1]  # [slots, kv_heads, length, head_dim]

            def attend(q, k, v, keys=keys, values=values):
                flat = (-1, self.head_dim)
                keys.view(flat).index_copy_(0, write_index, k.reshape(flat))
                values.view(flat).index_copy_(0, write_index, v.reshape(flat))
                groups = self.num_heads // self.num_kv_heads
                q = q.reshape(batch, self.num_kv_heads, groups, self.head_dim)
                out = F.scaled_dot_product_attention(
                    q, keys[:batch, :, :kv_length], values[:batch, :, :kv_length], attn_mask=mask, scale=self.scaling
                )
                return out.reshape(batch, self.num_heads * self.head_dim)

            hidden = self._layer(index, hidden, cos, sin, attend)
        return self.model.lm_head(_rms_norm(self.body.norm, hidden))

    def decode_fused(
        self,
        ops,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        kv_length: int,
        rope_positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """`decode` in the residual-stream form, with the pieces of `ops` (a `fused_decode.FusedOps`):
        each norm after the first adds the residual it normalises, rotary writes K/V into the slots,
        SiLU multiplies the gate, attention reads the slots. Same arguments, same logits up to rounding."""
        batch = tokens.shape[0]
        write_index, mask = self._decode_index(cache, positions, kv_length)
        rope = positions if rope_positions is None else rope_positions
        heads, kv_heads = self.num_heads, self.num_kv_heads
        residual = self.body.embed_tokens(tokens)
        x = _rms_norm(self.layers[0].input_layernorm, residual)
        for index, layer in enumerate(self.layers):
            fused, attn = self.fused[index], layer.self_attn
            qkv = F.linear(x, fused["qkv_weight"], fused["qkv_bias"]).view(batch, -1, self.head_dim)
            if hasattr(attn, "q_norm"):  # Qwen3 normalises q and k per head before the rotation
                qkv = torch.cat(
                    [
                        _rms_norm(attn.q_norm, qkv[:, :heads]),
                        _rms_norm(attn.k_norm, qkv[:, heads : heads + kv_heads]),
                        qkv[:, heads + kv_heads :],
                    ],
                    1,
                )
            keys, values = cache.kv[index, 0], cache.kv[index, 1]
            q = ops.rotary_write(
                qkv,
                rope,
                self.cos,
                self.sin,
                keys.view(-1, self.head_dim),
                values.view(-1, self.head_dim),
                write_index,
                heads,
                kv_heads,
            )
            out = ops.decode_attention(q, keys, values, positions, kv_length, mask, self.scaling)
            norm = layer.post_attention_layernorm
            x, residual = ops.add_rms_norm(attn.o_proj(out), residual, norm.weight, _eps(norm))
            mlp_out = layer.mlp.down_proj(ops.silu_mul(F.linear(x, fused["gate_up_weight"])))
            norm = self.layers[index + 1].input_layernorm if index + 1 < len(self.layers) else self.body.norm
            x, residual = ops.add_rms_norm(mlp_out, residual, norm.weight, _eps(norm))
        return self.model.lm_head(x)

    def _decode_index(
        self, cache: SlotKVCache, positions: torch.Tensor, kv_length: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(flat index [B * kv_heads] of each (row, kv_head) at its position in one layer's K (or V)
        viewed as [-1, head_dim], attention mask [B, 1, 1, kv_length])."""
        batch, device = positions.shape[0], positions.device
        rows = torch.arange(batch, device=device)
        heads = torch.arange(self.num_kv_heads, device=device)
        write_index = (
            (rows[:, None] * self.num_kv_heads + heads[None, :]) * cache.length + positions[:, None]
        ).reshape(-1)
        visible = torch.arange(kv_length, device=device)[None, :] <= positions[:, None]
        return write_index, visible[:, None, None, :]  # every folded query row sees the same keys

    # ---- prefill -----------------------------------------------------------------------------

    def prefill(
        self,
        cache: SlotKVCache,
        tokens: torch.Tensor,
        lengths: torch.Tensor,
        start: int,
        slots: torch.Tensor,
        kv_length: int,
    ) -> torch.Tensor:
        """Feed right-padded `tokens` [n, t] (row r: `lengths[r]` real tokens at positions
        start...) into slots `slots` [n]; return the logits [n, V] of each row's last real token.
        `kv_length` >= start + t. A first piece (start 0) attends within itself through causal
        attention on its own K/V (a flash kernel on CUDA: right padding never precedes a real
        token); a later piece reads the pieces before it from the slots under a mask."""
        n, t = tokens.shape
        device = tokens.device
        offsets = torch.arange(t, device=device)
        positions = start + offsets[None, :].expand(n, t)  # [n, t]
        real = offsets[None, :] < lengths[:, None]
        positions_clamped = torch.where(real, positions, torch.zeros_like(positions))
        heads = torch.arange(self.num_kv_heads, device=device)
        # Flat indices of the real (not padding) tokens, found once: a boolean-mask index in every
        # layer would synchronise with the host each time.
        real_tokens = real.reshape(-1).nonzero().squeeze(1)
        write_index = (
            (slots[:, None, None] * self.num_kv_heads + heads[None, None, :]) * cache.length
            + positions_clamped[:, :, None]
        ).reshape(n * t, -1)[real_tokens]  # [real tokens, kv_heads]
        mask = None  # a first piece needs none (causal within itself)
        if start > 0:
            keys_seen = torch.arange(kv_length, device=device)
            mask = (keys_seen[None, None, :] <= positions[:, :, None])[:, None]  # [n, 1, t, kv_length]
        cos, sin = self.cos[positions_clamped][:, :, None, :], self.sin[positions_clamped][:, :, None, :]
        groups = self.num_heads // self.num_kv_heads
        hidden = self.body.embed_tokens(tokens)
        for index, layer in enumerate(self.layers):
            keys, values = cache.kv[index, 0], cache.kv[index, 1]

            def attend(q, k, v, keys=keys, values=values):
                flat = (-1, self.head_dim)
                keys.view(flat).index_copy_(0, write_index.reshape(-1), k.reshape(n * t, -1)[real_tokens].reshape(flat))
                values.view(flat).index_copy_(
                    0, write_index.reshape(-1), v.reshape(n * t, -1)[real_tokens].reshape(flat)
                )
                if start == 0:
                    out = F.scaled_dot_product_attention(
                        q.transpose(1, 2),
                        k.transpose(1, 2),
                        v.transpose(1, 2),
                        is_causal=True,
                        scale=self.scaling,
                        enable_gqa=True,
                    )
                    return out.transpose(1, 2).reshape(n, t, self.num_heads * self.head_dim)
                k_all = keys[slots, :, :kv_length].repeat_interleave(groups, dim=1)
                v_all = values[slots, :, :kv_length].repeat_interleave(groups, dim=1)
                out = F.scaled_dot_product_attention(
                    q.transpose(1, 2), k_all, v_all, attn_mask=mask, scale=self.scaling
                )
                return out.transpose(1, 2).reshape(n, t, self.num_heads * self.head_dim)

            hidden = self._layer(index, hidden, cos, sin, attend)
        last = hidden[torch.arange(n, device=device), lengths - 1]
        return self.model.lm_head(_rms_norm(self.body.norm, last))

    # ---- shared ------------------------------------------------------------------------------

    def _layer(self, index: int, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attend) -> torch.Tensor:
        """One decoder layer on hidden [..., hidden_size]; `attend(q, k, v)` ([..., heads, head_dim]
        each, rotary applied) stores K/V and returns the attention output [..., heads * head_dim]."""
        layer, fused = self.layers[index], self.fused[index]
        attn = layer.self_attn
        x = _rms_norm(layer.input_layernorm, hidden)
        shape = x.shape[:-1]
        qkv = F.linear(x, fused["qkv_weight"], fused["qkv_bias"]).view(*shape, -1, self.head_dim)
        q_and_k = qkv[..., : self.num_heads + self.num_kv_heads, :]
        v = qkv[..., self.num_heads + self.num_kv_heads :, :]
        if hasattr(attn, "q_norm"):  # Qwen3 normalises q and k per head before the rotation
            q_and_k = torch.cat(
                [
                    _rms_norm(attn.q_norm, q_and_k[..., : self.num_heads, :]),
                    _rms_norm(attn.k_norm, q_and_k[..., self.num_heads :, :]),
                ],
                dim=-2,
            )
        q_and_k = _rotate(q_and_k, cos, sin)  # one rotation for q and k together
        q, k = q_and_k[..., : self.num_heads, :], q_and_k[..., self.num_heads :, :]
        hidden = hidden + attn.o_proj(attend(q, k, v))
        gate, up = F.linear(_rms_norm(layer.post_attention_layernorm, hidden), fused["gate_up_weight"]).chunk(2, -1)
        return hidden + layer.mlp.down_proj(layer.mlp.act_fn(gate) * up)


def fuse_projections(layer) -> dict[str, torch.Tensor | None]:
    """Concatenate the layer's q/k/v weights (and biases) and its gate/up weights into one tensor
    each, and make the HF parameters views of those tensors (so later in-place weight updates land
    in the fused tensors)."""
    attn, mlp = layer.self_attn, layer.mlp
    return {
        "qkv_weight": _fuse([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
        "qkv_bias": None if attn.q_proj.bias is None else _fuse([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]),
        "gate_up_weight": _fuse([mlp.gate_proj.weight, mlp.up_proj.weight]),
    }


def _fuse(params: list[torch.nn.Parameter]) -> torch.Tensor:
    fused = torch.cat([p.data for p in params], dim=0)
    offset = 0
    for p in params:
        p.data = fused[offset : offset + p.shape[0]]
        offset += p.shape[0]
    return fused


def _rms_norm(norm, x: torch.Tensor) -> torch.Tensor:
    """An HF RMSNorm module's function in one fused call."""
    return F.rms_norm(x, (x.shape[-1],), norm.weight, _eps(norm))


def _eps(norm) -> float:
    return getattr(norm, "variance_epsilon", None) or getattr(norm, "eps", 1e-6)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding as Llama applies it (halves rotated, not interleaved pairs)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def _is_mrope(config) -> bool:
    """Whether the rotary embedding is multimodal (Qwen2-VL family: one axis each for t, h, w)."""
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {}
    return "mrope_section" in rope
