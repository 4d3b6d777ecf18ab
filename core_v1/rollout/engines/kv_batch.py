"""A batch of sequences decoding together over one transformers `DynamicCache`.

Layout: every row is left-padded to the cache length L, so the newest token of every row sits in
the last cache column and one forward of shape [B, 1] advances all rows. `attention_mask` [B, L]
marks real cache entries; `positions` [B] holds each row's next position id (its count of real
tokens), so padding never shifts a row's rotary positions and a row computes the same values
whether it runs alone or beside longer rows.

Rows leave (`select`) and cohorts join (`merge`) only between forward passes: a joining cohort is
prefilled on its own and its K/V are left-padded to the common length. Leading columns that no
remaining row uses are cropped after rows leave, so a finished long row stops costing attention.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from core_v1.utils.vision import vision_forward

PromptImages = tuple[int, Optional[Mapping[str, torch.Tensor]]]
"""A row's prompt length and its prompt's multimodal inputs (None or {} for a text prompt)."""


class UnsupportedModelError(RuntimeError):
    """The model's cache layout is not one the built-in hf engine can batch."""


def check_cache_layout(model: PreTrainedModel) -> None:
    """Fail early unless every layer uses a plain full-attention `DynamicLayer` (whose K/V tensors
    `[B, heads, L, head_dim]` we pad and slice); sliding-window or linear-attention layers are not."""
    layers = DynamicCache(config=model.config).layers
    odd = sorted({type(layer).__name__ for layer in layers if type(layer) is not DynamicLayer})
    if odd:
        raise UnsupportedModelError(
            f"the hf engine batches full-attention models only; this model's cache uses {', '.join(odd)}. "
            f"Disable sliding window in the model config or use actor_rollout_ref.rollout.name=vllm"
        )


@dataclass
class KVBatch:
    cache: DynamicCache
    attention_mask: torch.Tensor  # [B, L] long, 1 = real cache entry
    positions: torch.Tensor  # [B] long, position id of the next token fed
    next_tokens: torch.Tensor | None = None  # [B] long, sampled but not yet in the cache

    def __len__(self) -> int:
        return self.attention_mask.shape[0]

    @property
    def cache_length(self) -> int:
        return self.attention_mask.shape[1]

    @classmethod
    def prefill(
        cls, model: PreTrainedModel, sequences: list[list[int]], images: Optional[Sequence[PromptImages]] = None
    ) -> tuple["KVBatch", torch.Tensor]:
        """Run the sequences through the model, left-padded; returns the batch and the logits
        [B, V] of each sequence's last token. `images`: per row, its prompt length and the
        multimodal inputs of its prompt (a vision-language model's rows; `core_v1.utils.vision`)."""
        length = max(len(s) for s in sequences)
        input_ids = torch.zeros((len(sequences), length), dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, sequence in enumerate(sequences):  # built on the host: one copy to the device, not one per row
            input_ids[row, length - len(sequence) :] = torch.tensor(sequence, dtype=torch.long)
            attention_mask[row, length - len(sequence) :] = 1
        input_ids, attention_mask = input_ids.to(model.device), attention_mask.to(model.device)
        cache = DynamicCache(config=model.config)
        forward = dict(use_cache=True, logits_to_keep=1, **{_cache_argument(type(model)): cache})
        if images is not None and any(inputs for _, inputs in images):
            prompt_mask = _prompt_mask([len(s) for s in sequences], [n for n, _ in images], length)
            out, positions = vision_forward(
                model,
                input_ids,
                attention_mask,
                prompt_mask.to(model.device),
                [inputs for _, inputs in images],
                **forward,
            )
            # Text after the prompt goes on from the largest position of any axis (mRoPE).
            next_positions = positions.amax(dim=(0, 2)) + 1
        else:
            position_ids = (attention_mask.cumsum(dim=1) - 1).clamp_min(0)
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **forward)
            next_positions = attention_mask.sum(dim=1)
        batch = cls(cache=cache, attention_mask=attention_mask, positions=next_positions)
        return batch, out.logits[:, -1, :]

    def decode(self, model: PreTrainedModel) -> torch.Tensor:
        """Feed `next_tokens` (one per row) and return the next logits [B, V]."""
        assert self.next_tokens is not None, "decode() before the previous logits were sampled"
        ones = torch.ones((len(self), 1), dtype=self.attention_mask.dtype, device=self.attention_mask.device)
        self.attention_mask = torch.cat([self.attention_mask, ones], dim=1)
        out = model(
            input_ids=self.next_tokens[:, None],
            attention_mask=self.attention_mask,
            position_ids=self.positions[:, None],
            use_cache=True,
            **{_cache_argument(type(model)): self.cache},
        )  # the cache is updated in place
        self.positions = self.positions + 1
        self.next_tokens = None
        return out.logits[:, -1, :]

    def select(self, keep: list[int]) -> None:
        """Keep only the rows at indices `keep` (in that order), then crop unused leading columns."""
        index = torch.tensor(keep, dtype=torch.long, device=self.attention_mask.device)
        self.attention_mask = self.attention_mask[index]
        self.positions = self.positions[index]
        if self.next_tokens is not None:
            self.next_tokens = self.next_tokens[index]
        # Left padding means each row's mask is 0...0 1...1, so the first column any row uses is
        # the smallest index of a 1.
        first_used = int(self.attention_mask.argmax(dim=1).min())
        self.attention_mask = self.attention_mask[:, first_used:]
        for layer in self.cache.layers:
            layer.keys = layer.keys[index, :, first_used:]
            layer.values = layer.values[index, :, first_used:]

    def merge(self, other: "KVBatch") -> None:
        """Append `other`'s rows after this batch's rows, left-padding whichever cache is shorter."""
        length = max(self.cache_length, other.cache_length)
        self.attention_mask = torch.cat(
            [_left_pad(self.attention_mask, length), _left_pad(other.attention_mask, length)]
        )
        self.positions = torch.cat([self.positions, other.positions])
        if (self.next_tokens is None) != (other.next_tokens is None):
            raise AssertionError("merge() of a sampled batch with an unsampled one")
        if self.next_tokens is not None:
            self.next_tokens = torch.cat([self.next_tokens, other.next_tokens])
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat([_left_pad(mine.keys, length, dim=2), _left_pad(theirs.keys, length, dim=2)])
            mine.values = torch.cat([_left_pad(mine.values, length, dim=2), _left_pad(theirs.values, length, dim=2)])


@functools.cache
def _cache_argument(model_cls: type) -> str:
    """transformers 5 names the forward's cache argument `cache`; earlier releases `past_key_values`."""
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def _prompt_mask(lengths: list[int], prompt_lengths: list[int], width: int) -> torch.Tensor:
    """[B, width] true at each left-padded row's prompt tokens (not padding, not generated tokens)."""
    columns = torch.arange(width).unsqueeze(0)
    start = torch.tensor([width - n for n in lengths]).unsqueeze(1)
    return (columns >= start) & (columns < start + torch.tensor(prompt_lengths).unsqueeze(1))


def _left_pad(tensor: torch.Tensor, length: int, dim: int = 1) -> torch.Tensor:
    """Zero-pad `tensor` at the start of `dim` up to `length`."""
    missing = length - tensor.shape[dim]
    if missing == 0:
        return tensor
    # F.pad lists (before, after) pairs from the last dimension backwards.
    pad = [0, 0] * (tensor.dim() - 1 - dim) + [missing, 0]
    return F.pad(tensor, pad)
