"""Forward passes of vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) over token ids plus images.

One place for what the rollout engine and the training forwards must do identically, so that the
log-probs of training are those of the rollout:

- `multi_modal_inputs` of a prompt (per row, as its processor returned them, without the token
  ids): `pixel_values` [patches, dim] and `image_grid_thw` [images, 3] (`pixel_values_videos`,
  `video_grid_thw`, `second_per_grid_ts` for video). Rows are batched by concatenating each key
  along dim 0 in row order, which is how these models take a batch.
- The image/video slots are the first placeholder ids of each kind in the context (the engine: a
  request's prompt, earlier turns included; training: the whole sequence), as many as the images
  fill, in order: the prompt's images, then those a tool showed (its tokens in the response). A
  sampled token that happens to be a placeholder id is text (the model sees its embedding), where
  transformers' own forward would count it as an image slot and fail; the tool agent loop shows
  no tool image after such a token, so the first slots are always the images'.
- Position ids are the model's own mRoPE positions (`get_rope_index`), [3, B, L]; text after an
  image continues at the largest position so far + 1 on all three axes.
- Qwen3-VL's vision tower also returns intermediate features (deepstack), which its language model
  adds to the hidden states of the image/video slots after each of its first layers. They go to
  the same slots as the merged features; decode steps (no slots) need nothing more, as the prompt's
  keys and values in the cache already hold them.
- The images are encoded inside the model's own forward (a pre-hook on its language model), where
  FSDP2 has gathered the root's weights (token embeddings, the vision tower's patch embedding and
  merger); the model's own forward is not used for the rest, as it would take every placeholder
  id for an image slot.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence

import torch

from core_v1.errors import UserError

VISION_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


# The families whose forward `vision_forward` reproduces: image features placed at the image
# tokens, mRoPE positions, and Qwen3-VL's deepstack features added inside the first language layers.
# Another family (GLM-4.1V, ...) may combine them otherwise: it would train on another model.
VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
VISION_FAMILY_NAMES = "Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE"


class UnsupportedVisionModelError(UserError, TypeError):
    """A vision-language model of a family whose forward `vision_forward` does not reproduce."""


def vision_model_problem(path: str, key: str) -> Optional[str]:
    """Why the model `path` (a folder, or a Hub id in the local cache; named by config key `key`)
    cannot run as a vision-language policy or critic; None for a text model, a supported one, or a
    model not here (which the model check reports; the forwards check again)."""
    config_file = _config_file(path)
    if config_file is None:
        return None
    config = json.loads(config_file.read_text())
    if "vision_config" not in config:
        return None
    model_type = config.get("model_type")
    if model_type not in VISION_MODEL_TYPES:
        return (
            f"{key}={path} is a {model_type} vision-language model; rlbridge trains {VISION_FAMILY_NAMES} "
            f"(model_type {', '.join(VISION_MODEL_TYPES)}) with images; use one of those"
        )
    return None


def _config_file(path: str) -> Optional[Path]:
    local = Path(path).expanduser() / "config.json"
    if local.is_file():
        return local
    from huggingface_hub import try_to_load_from_cache

    try:
        cached = try_to_load_from_cache(path, "config.json")
    except ValueError:  # not a Hub id either
        return None
    return Path(cached) if isinstance(cached, str) else None


def is_vision_config(config: Any) -> bool:
    """Whether a transformers config is a vision-language model's (it has a vision tower)."""
    return getattr(config, "vision_config", None) is not None


def vision_tower(model: torch.nn.Module) -> Optional[torch.nn.Module]:
    """The vision encoder of a vision-language model (`visual` in the Qwen-VL family), else None."""
    return next((module for name, module in model.named_modules() if name.split(".")[-1] == "visual"), None)


def concat_inputs(
    rows: Sequence[Optional[Mapping[str, torch.Tensor]]], device: Optional[torch.device] = None
) -> dict[str, torch.Tensor]:
    """The multimodal inputs of several rows as one batch: each key concatenated in row order
    (rows without images contribute nothing)."""
    batched: dict[str, list[torch.Tensor]] = {}
    for row in rows:
        for key, value in (row or {}).items():
            batched.setdefault(key, []).append(torch.as_tensor(value))
    return {
        key: torch.cat(values).to(device) if device is not None else torch.cat(values)
        for key, values in batched.items()
    }


def placeholder_counts(config: Any, rows: Sequence[Optional[Mapping[str, torch.Tensor]]]) -> torch.Tensor:
    """[B, 2] the image and video placeholder tokens each row's inputs fill (patches / merge^2)."""
    merge = config.vision_config.spatial_merge_size**2
    return torch.tensor(
        [
            [
                int(torch.as_tensor((row or {})[grid]).prod(-1).sum()) // merge if grid in (row or {}) else 0
                for grid in ("image_grid_thw", "video_grid_thw")
            ]
            for row in rows
        ]
    )


def token_types(config: Any, input_ids: torch.Tensor, slot_mask: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """[B, L] 0 text, 1 image placeholder, 2 video placeholder. Only tokens where `slot_mask`
    [B, L] is true can be placeholders, and in each row only the first `counts` [B, 2] of each kind:
    the text after the images may contain a sampled placeholder id."""
    types = torch.zeros_like(input_ids)
    for kind, token_id in ((1, config.image_token_id), (2, config.video_token_id)):
        candidates = (input_ids == token_id) & slot_mask
        first = candidates & (candidates.long().cumsum(dim=1) <= counts[:, kind - 1 : kind].to(input_ids.device))
        types = types + kind * first.long()
    return types


def vision_forward(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    slot_mask: torch.Tensor,
    rows: Sequence[Optional[Mapping[str, torch.Tensor]]],
    **forward_kwargs: Any,
) -> tuple[Any, torch.Tensor]:
    """`model(...)` over `input_ids` [B, L] with each row's multimodal inputs `rows` (`slot_mask`
    [B, L] marks the tokens that may be image slots: the engine's prompt, or every training token);
    returns the model output and the mRoPE position ids [3, B, L]."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in VISION_MODEL_TYPES:
        raise UnsupportedVisionModelError(
            f"a {model_type} vision-language model cannot take images here: rlbridge "
            f"feeds them to {VISION_FAMILY_NAMES} ({', '.join(VISION_MODEL_TYPES)})"
        )
    types = token_types(model.config, input_ids, slot_mask, placeholder_counts(model.config, rows))
    inputs = concat_inputs(rows, input_ids.device)
    positions = mrope_positions(model, input_ids, types, attention_mask, inputs)
    with _vision_features_into(model, types, inputs):
        output = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=positions, **forward_kwargs)
    return output, positions


def mrope_positions(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    types: torch.Tensor,
    attention_mask: torch.Tensor,
    inputs: Mapping[str, torch.Tensor],
) -> torch.Tensor:
    """The model's own 3-axis position ids [3, B, L] (0 at padding)."""
    extra = {"second_per_grid_ts": inputs["second_per_grid_ts"]} if "second_per_grid_ts" in inputs else {}
    positions, _ = _rope_owner(model).get_rope_index(
        input_ids,
        mm_token_type_ids=types,
        image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"),
        attention_mask=attention_mask,
        **extra,
    )
    return positions * attention_mask.unsqueeze(0).to(positions.dtype)


@contextlib.contextmanager
def _vision_features_into(
    model: torch.nn.Module, types: torch.Tensor, inputs: Mapping[str, torch.Tensor]
) -> Iterator[None]:
    """While open, the language model inside `model` takes the encoded images/videos at their
    slots (`types` [B, L]) in its input embeddings, and Qwen3-VL's deepstack features.

    The encoding runs inside `model`'s own forward, as the language model's pre-hook: under FSDP2
    the root's weights (token embeddings, the vision tower's patch embedding and merger) are
    gathered only there. The outer forward could not carry the deepstack arguments anyway: it
    passes the language model its own (None, as it saw no pixels)."""
    if not any(pixels in inputs for pixels in ("pixel_values", "pixel_values_videos")):
        yield
        return
    owner = _rope_owner(model)

    def add_vision(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        embeds, deepstack = _embed(owner, kwargs["inputs_embeds"], types, inputs)
        extra = {"visual_pos_masks": types != 0, "deepstack_visual_embeds": deepstack} if deepstack else {}
        return args, {**kwargs, "inputs_embeds": embeds, **extra}

    handle = owner.language_model.register_forward_pre_hook(add_vision, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def _embed(
    owner: Any, embeds: torch.Tensor, types: torch.Tensor, inputs: Mapping[str, torch.Tensor]
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The token embeddings `embeds` with the encoded images/videos at their slots, and the
    deepstack features (one [slots, hidden] per language layer that takes them, slots in sequence
    order; empty for a family without them)."""
    deepstack: dict[int, list[torch.Tensor]] = {}
    for kind, pixels, grid in ((1, "pixel_values", "image_grid_thw"), (2, "pixel_values_videos", "video_grid_thw")):
        if pixels not in inputs:
            continue
        features_of = owner.get_image_features if kind == 1 else owner.get_video_features
        encoded = features_of(inputs[pixels], inputs[grid], return_dict=True)
        features = torch.cat(list(encoded.pooler_output))
        slots = types == kind
        if int(slots.sum()) != features.shape[0]:
            raise ValueError(
                f"the prompts hold {int(slots.sum())} {pixels} placeholder tokens for "
                f"{features.shape[0]} encoded patches; prompt_ids and multi_modal_inputs must come "
                "from one processor call"
            )
        embeds = embeds.masked_scatter(slots.unsqueeze(-1), features.to(embeds.dtype))
        deepstack[kind] = [torch.cat(list(layer)) for layer in getattr(encoded, "deepstack_features", None) or ()]
    return embeds, _interleave_deepstack(types, deepstack)


def _interleave_deepstack(types: torch.Tensor, features: Mapping[int, list[torch.Tensor]]) -> list[torch.Tensor]:
    """Per language layer, the image and video deepstack features in the order of their slots
    (`types != 0` over [B, L] flattened), as the model's own forward joins them."""
    layers = [layer for layer in features.values() if layer]
    if not layers:
        return []
    kinds = types[types != 0]
    joined = []
    for depth in range(len(layers[0])):
        first = layers[0][depth]
        layer = first.new_zeros(kinds.shape[0], first.shape[-1])
        for kind, per_layer in features.items():
            layer[kinds == kind] = per_layer[depth].to(layer.dtype)
        joined.append(layer)
    return joined


def _rope_owner(model: torch.nn.Module) -> Any:
    """The submodule that computes the model's mRoPE index and encodes images (`Qwen2VLModel`
    inside the LM head class, also under LoRA or FSDP wrappers)."""
    owner = next((m for m in model.modules() if hasattr(type(m), "get_rope_index")), None)
    if owner is None:
        raise TypeError(
            f"{type(model).__name__} has no get_rope_index: only mRoPE vision-language models "
            f"({VISION_FAMILY_NAMES}) take images here"
        )
    return owner
