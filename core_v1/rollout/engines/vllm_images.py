"""What the `vllm` engine sends vLLM for a prompt with images, built without vLLM.

A request reaches an engine as prompt ids plus `multi_modal_inputs`, the tensors the policy's
processor made (`pixel_values`, `image_grid_thw`: `core_v1.agent_loop.vision`), which the built-in
engine and the training forwards take as they are. vLLM's `TokensPrompt` takes the images instead,
`multi_modal_data={"image": [PIL images]}`, and runs the model's HF processor itself.

The images are rebuilt from the tensors here rather than carried beside them through the agent
loops, the client, the replicas and the partial-rollout resume. A Qwen2-VL-family image processor
(Qwen2-VL, Qwen2.5-VL, Qwen3-VL) resizes an image's 8-bit pixels to a multiple of patch_size *
merge_size, rescales and normalises them, and cuts them into patches, each repeated
temporal_patch_size times; `images_from_patches` undoes the last three steps and rounds back to the
8-bit pixels of the resized image. Given that image, the same processor (vLLM loads it from the same
model path) keeps its size (smart_resize has it as a fixed point; resizing to the same size returns
the pixels unchanged), so vLLM gets the same pixel values and the same grid, hence the same count of
image tokens. This assumes vLLM's processor settings (min/max pixels) are the checkpoint's, as
rlbridge's processor's are. It also makes vLLM see the pixels training sees when the two processors
resize differently: transformers' PIL backend (used without torchvision) and its torchvision backend
(vLLM's) resample an image to the same size with different pixels, and their patches differ by up to
0.3 (normalised units) from the same raw image, where the rebuilt image gives the same patches within
float rounding (2.4e-7) through either backend.

Prompt ids: one placeholder per image, not the expanded runs. vLLM's multimodal processor applies
the model's prompt updates to a token prompt itself (`BaseMultiModalProcessor.apply`; in vLLM 0.33
and 0.34 always, with no check for runs already expanded), and for the Qwen-VL models the update is a
`PromptReplacement` whose target is one `<|image_pad|>` id and whose replacement is that id repeated
for the image's token count. An expanded run would have its first id expanded again and the rest
left as text. So `vllm_prompt` cuts each image's run back to one pad id, as the chat template wrote
it (verl's vLLM server likewise dedups consecutive pad ids before `TokensPrompt`).

Videos are not passed on (rlbridge sizes and times video frames itself; vLLM takes them otherwise).

Neither machine this project is developed on can run vLLM: the conversion is tested against
transformers' image processor (tests/core_v1/rollout/test_vllm_images.py); the facts above were read
in vLLM 0.33's and 0.34's source, and test_vllm_api.py checks them given that source; where vllm
imports, it also runs vLLM's own CPU-side Qwen2-VL processor on `vllm_prompt`'s output (it gave
rlbridge's prompt ids, image ranges, grids and pixel values with both wheels' source). The path
through a running vLLM engine (its scheduler, its model's vision tower) has not been tried.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch

from core_v1.rollout.types import RolloutError
from core_v1.utils.vision import is_vision_config

_VIDEO_KEYS = ("pixel_values_videos", "video_grid_thw")


@dataclass(frozen=True)
class ImagePatchLayout:
    """How a Qwen2-VL-family image processor turned images into `pixel_values`, read from the
    checkpoint's image processor and config."""

    image_token_id: int
    """The placeholder id an image's tokens take (`<|image_pad|>`)."""
    patch_size: int
    temporal_patch_size: int
    """An image's patches repeat its one frame this many times."""
    merge_size: int
    """merge_size^2 patches make one image token."""
    rescale_factor: Optional[float]
    """What the 8-bit pixels were multiplied by (1/255); None when they were not rescaled."""
    image_mean: Optional[tuple[float, ...]]
    """Per channel; None (with image_std) when the pixels were not normalised."""
    image_std: Optional[tuple[float, ...]]

    @classmethod
    def of(cls, image_processor: Any, image_token_id: int) -> "ImagePatchLayout":
        missing = [
            name for name in ("patch_size", "temporal_patch_size", "merge_size") if not hasattr(image_processor, name)
        ]
        if missing:
            raise RolloutError(
                f"the vllm engine rebuilds images from a Qwen2-VL-family image processor's patches, and "
                f"{type(image_processor).__name__} has no {', '.join(missing)}; use actor_rollout_ref.rollout.name=hf"
            )
        normalised = bool(getattr(image_processor, "do_normalize", False))
        return cls(
            image_token_id=int(image_token_id),
            patch_size=int(image_processor.patch_size),
            temporal_patch_size=int(image_processor.temporal_patch_size),
            merge_size=int(image_processor.merge_size),
            rescale_factor=float(image_processor.rescale_factor) if image_processor.do_rescale else None,
            image_mean=_per_channel(image_processor.image_mean) if normalised else None,
            image_std=_per_channel(image_processor.image_std) if normalised else None,
        )

    def token_counts(self, image_grid_thw: torch.Tensor) -> list[int]:
        """How many placeholder tokens each image fills (its patches / merge_size^2)."""
        return [int(n) // self.merge_size**2 for n in torch.as_tensor(image_grid_thw).reshape(-1, 3).prod(-1)]


def load_image_layout(model_path: str, trust_remote_code: bool = False) -> Optional[ImagePatchLayout]:
    """The layout of the model's image inputs, as its own image processor makes them; None for a
    text model."""
    from transformers import AutoConfig, AutoImageProcessor

    config = AutoConfig.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    if not is_vision_config(config):
        return None
    image_processor = AutoImageProcessor.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    return ImagePatchLayout.of(image_processor, config.image_token_id)


def vllm_prompt(
    prompt_ids: Sequence[int], multi_modal_inputs: Mapping[str, Any], layout: Optional[ImagePatchLayout]
) -> dict[str, Any]:
    """The fields of vLLM's `TokensPrompt` for a prompt with images: `prompt_token_ids` with one
    placeholder per image, and `multi_modal_data={"image": [the images]}`."""
    if any(key in multi_modal_inputs for key in _VIDEO_KEYS):
        raise RolloutError(
            "the request carries a video, which the vllm engine does not pass on (rlbridge samples and sizes "
            "video frames itself); use actor_rollout_ref.rollout.name=hf for prompts with videos"
        )
    if layout is None:
        raise RolloutError(
            "the request carries images, but the vllm engine's model is a text model (no vision_config); "
            "point actor_rollout_ref.model.path at the vision-language model the prompts were made for"
        )
    grid = torch.as_tensor(multi_modal_inputs["image_grid_thw"])
    images = images_from_patches(torch.as_tensor(multi_modal_inputs["pixel_values"]), grid, layout)
    ids = one_placeholder_per_image(list(prompt_ids), layout.image_token_id, layout.token_counts(grid))
    return {"prompt_token_ids": ids, "multi_modal_data": {"image": images}}


def images_from_patches(pixel_values: torch.Tensor, image_grid_thw: torch.Tensor, layout: ImagePatchLayout) -> list:
    """The resized 8-bit images (PIL, RGB) that the processor cut into `pixel_values` [patches, dim],
    one per row of `image_grid_thw` [images, 3], in order."""
    from PIL import Image

    grids = [tuple(int(n) for n in row) for row in image_grid_thw.reshape(-1, 3)]
    sizes = [t * h * w for t, h, w in grids]
    if sum(sizes) != pixel_values.shape[0]:
        raise RolloutError(
            f"pixel_values has {pixel_values.shape[0]} patches, and image_grid_thw {grids} makes {sum(sizes)}; "
            "pass the processor's multi_modal_inputs unchanged"
        )
    return [
        Image.fromarray(_image_pixels(patches, grid, layout).numpy())
        for patches, grid in zip(pixel_values.split(sizes), grids)
    ]


def _image_pixels(patches: torch.Tensor, grid: tuple[int, int, int], layout: ImagePatchLayout) -> torch.Tensor:
    """[H, W, C] uint8: one image's patches [t*h*w, C*T*p*p] put back in place (the inverse of the
    processor's patch order: merge blocks row by row, then the patches in a block, then channel,
    temporal copy, patch row, patch column)."""
    t, h, w = grid
    m, p, temporal = layout.merge_size, layout.patch_size, layout.temporal_patch_size
    if t != 1:
        raise RolloutError(f"an image's grid has t={t}; only a video's has more than one frame group")
    channels = patches.shape[1] // (temporal * p * p)
    blocks = patches.float().reshape(h // m, w // m, m, m, channels, temporal, p, p)[:, :, :, :, :, 0]
    pixels = blocks.permute(4, 0, 2, 5, 1, 3, 6).reshape(channels, h * p, w * p)
    if layout.image_mean is not None and layout.image_std is not None:
        pixels = pixels * torch.tensor(layout.image_std).view(-1, 1, 1) + torch.tensor(layout.image_mean).view(-1, 1, 1)
    if layout.rescale_factor is not None:
        pixels = pixels / layout.rescale_factor
    return pixels.round().clamp(0, 255).to(torch.uint8).permute(1, 2, 0).contiguous()


def one_placeholder_per_image(prompt_ids: list[int], image_token_id: int, counts: Sequence[int]) -> list[int]:
    """`prompt_ids` with the i-th image's run of `counts[i]` placeholder ids (the first runs, in
    order, as the engines and training read them) cut to one id. Placeholder ids after the images'
    runs (a sampled one) stay as they are."""
    out: list[int] = []
    start = 0
    for index, count in enumerate(counts):
        try:
            first = prompt_ids.index(image_token_id, start)
        except ValueError:
            first = len(prompt_ids)
        run = prompt_ids[first : first + count]
        if len(run) != count or any(token != image_token_id for token in run):
            raise RolloutError(
                f"the prompt does not hold image {index}'s {count} placeholder tokens (after the images before "
                "it); pass the prompt ids and multi_modal_inputs the processor made together"
            )
        out += prompt_ids[start:first] + [image_token_id]
        start = first + count
    return out + prompt_ids[start:]


def _per_channel(value: Any) -> tuple[float, ...]:
    return tuple(float(v) for v in (value if isinstance(value, (list, tuple)) else [value] * 3))
