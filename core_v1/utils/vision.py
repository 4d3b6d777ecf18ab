"""Forward passes of vision-language models (Qwen2-VL, Qwen2.5-VL) over token ids plus images.

One place for what the rollout engine and the training forwards must do identically, so that the
log-probs of training are those of the rollout:

- `multi_modal_inputs` of a prompt (per row, as its processor returned them, without the token
  ids): `pixel_values` [patches, dim] and `image_grid_thw` [images, 3] (`pixel_values_videos`,
  `video_grid_thw`, `second_per_grid_ts` for video). Rows are batched by concatenating each key
  along dim 0 in row order, which is how these models take a batch.
- The image/video placeholder positions come from the PROMPT's token ids only, the first ones of
  each kind, as many as the images fill: a sampled token that happens to be a placeholder id is
  text (the model sees its embedding), where transformers' own forward would count it as an
  image slot and fail.
- Position ids are the model's own mRoPE positions (`get_rope_index`), [3, B, L]; the text after
  the prompt continues at the prompt's largest position + 1 on all three axes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import torch

from core_v1.errors import UserError

VISION_INPUT_KEYS = ("pixel_values", "image_grid_thw", "pixel_values_videos", "video_grid_thw", "second_per_grid_ts")


# The families whose forward `vision_forward` reproduces: image features placed at the image
# tokens, mRoPE positions. Qwen3-VL also adds its vision tower's intermediate features inside the
# language model's layers (deepstack), which this forward does not: it would train on another model.
VISION_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl")


class UnsupportedVisionModelError(UserError, TypeError):
    """A vision-language model of a family whose forward `vision_forward` does not reproduce."""


def vision_model_problem(path: str, key: str, role: str = "policy") -> Optional[str]:
    """Why the model `path` (a folder, or a Hub id in the local cache; named by config key `key`)
    cannot run as a vision-language `role` ("policy" or "critic"); None for a text model, a
    supported one, or a model not here (which the model check reports; the forwards check again)."""
    config_file = _config_file(path)
    if config_file is None:
        return None
    config = json.loads(config_file.read_text())
    if "vision_config" not in config:
        return None
    if role == "critic":
        return (f"{key}={path} is a vision-language model, and a vision-language critic is not supported (the "
                "value model is a text model's); train without a critic (algorithm.adv_estimator=grpo, rloo, ...)")
    model_type = config.get("model_type")
    if model_type not in VISION_MODEL_TYPES:
        return (f"{key}={path} is a {model_type} vision-language model; rlbridge trains Qwen2-VL and Qwen2.5-VL "
                f"(model_type {' or '.join(VISION_MODEL_TYPES)}) with images; use one of those")
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


def concat_inputs(rows: Sequence[Optional[Mapping[str, torch.Tensor]]],
                  device: Optional[torch.device] = None) -> dict[str, torch.Tensor]:
    """The multimodal inputs of several rows as one batch: each key concatenated in row order
    (rows without images contribute nothing)."""
    batched: dict[str, list[torch.Tensor]] = {}
    for row in rows:
        for key, value in (row or {}).items():
            batched.setdefault(key, []).append(torch.as_tensor(value))
    return {key: torch.cat(values).to(device) if device is not None else torch.cat(values)
            for key, values in batched.items()}


def placeholder_counts(config: Any, rows: Sequence[Optional[Mapping[str, torch.Tensor]]]) -> torch.Tensor:
    """[B, 2] the image and video placeholder tokens each row's inputs fill (patches / merge^2)."""
    merge = config.vision_config.spatial_merge_size ** 2
    return torch.tensor([[int(torch.as_tensor((row or {})[grid]).prod(-1).sum()) // merge if grid in (row or {}) else 0
                          for grid in ("image_grid_thw", "video_grid_thw")] for row in rows])


def token_types(config: Any, input_ids: torch.Tensor, prompt_mask: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """[B, L] 0 text, 1 image placeholder, 2 video placeholder. Only prompt tokens (`prompt_mask`
    [B, L] true) can be placeholders, and in each row only the first `counts` [B, 2] of each kind:
    a later turn's context holds the first prompt's images and then text, which may contain a
    sampled placeholder id."""
    types = torch.zeros_like(input_ids)
    for kind, token_id in ((1, config.image_token_id), (2, config.video_token_id)):
        candidates = (input_ids == token_id) & prompt_mask
        first = candidates & (candidates.long().cumsum(dim=1) <= counts[:, kind - 1:kind].to(input_ids.device))
        types = types + kind * first.long()
    return types


def vision_forward(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   prompt_mask: torch.Tensor, rows: Sequence[Optional[Mapping[str, torch.Tensor]]],
                   **forward_kwargs: Any) -> tuple[Any, torch.Tensor]:
    """`model(...)` over `input_ids` [B, L] with each row's multimodal inputs `rows` (`prompt_mask`
    [B, L] marks the prompt tokens); returns the model output and the mRoPE position ids [3, B, L]."""
    model_type = getattr(model.config, "model_type", None)
    if model_type not in VISION_MODEL_TYPES:
        raise UnsupportedVisionModelError(f"a {model_type} vision-language model cannot take images here: rlbridge "
                                          f"feeds them to Qwen2-VL and Qwen2.5-VL ({', '.join(VISION_MODEL_TYPES)})")
    types = token_types(model.config, input_ids, prompt_mask, placeholder_counts(model.config, rows))
    inputs = concat_inputs(rows, input_ids.device)
    embeds = _embed(model, input_ids, types, inputs)
    positions = mrope_positions(model, input_ids, types, attention_mask, inputs)
    output = model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions, **forward_kwargs)
    return output, positions


def mrope_positions(model: torch.nn.Module, input_ids: torch.Tensor, types: torch.Tensor,
                    attention_mask: torch.Tensor, inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The model's own 3-axis position ids [3, B, L] (0 at padding)."""
    extra = {"second_per_grid_ts": inputs["second_per_grid_ts"]} if "second_per_grid_ts" in inputs else {}
    positions, _ = _rope_owner(model).get_rope_index(
        input_ids, mm_token_type_ids=types, image_grid_thw=inputs.get("image_grid_thw"),
        video_grid_thw=inputs.get("video_grid_thw"), attention_mask=attention_mask, **extra)
    return positions * attention_mask.unsqueeze(0).to(positions.dtype)


def _embed(model: torch.nn.Module, input_ids: torch.Tensor, types: torch.Tensor,
           inputs: Mapping[str, torch.Tensor]) -> torch.Tensor:
    embeds = model.get_input_embeddings()(input_ids)
    for kind, pixels, grid in ((1, "pixel_values", "image_grid_thw"), (2, "pixel_values_videos", "video_grid_thw")):
        if pixels not in inputs:
            continue
        features_of = model.get_image_features if kind == 1 else model.get_video_features
        features = torch.cat(list(features_of(inputs[pixels], inputs[grid], return_dict=True).pooler_output))
        slots = types == kind
        if int(slots.sum()) != features.shape[0]:
            raise ValueError(f"the prompts hold {int(slots.sum())} {pixels} placeholder tokens for "
                             f"{features.shape[0]} encoded patches; prompt_ids and multi_modal_inputs must come "
                             "from one processor call")
        embeds = embeds.masked_scatter(slots.unsqueeze(-1), features.to(embeds.dtype))
    return embeds


def _rope_owner(model: torch.nn.Module) -> Any:
    """The submodule that computes the model's mRoPE index (`Qwen2VLModel` inside the LM head class,
    also under LoRA or FSDP wrappers)."""
    owner = next((m for m in model.modules() if hasattr(type(m), "get_rope_index")), None)
    if owner is None:
        raise TypeError(f"{type(model).__name__} has no get_rope_index: only mRoPE vision-language models "
                        "(Qwen2-VL, Qwen2.5-VL) take images here")
    return owner
