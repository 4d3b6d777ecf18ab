"""The vllm engine's prompts with images (core_v1/rollout/engines/vllm_images.py), checked without
vLLM, which cannot be installed here: the images rebuilt from the processor's patches make the same
patches and grid when the same image processor (the one vLLM loads from the model path) runs on them
again, and each image's run of placeholder ids becomes the one id that vLLM's Qwen-VL prompt
replacement expands back to the image's token count. Nothing here runs vLLM.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from transformers import Qwen2Config, Qwen2VLConfig, Qwen2VLImageProcessorPil

from core_v1.agent_loop.vision import expand_image_placeholders
from core_v1.rollout.engines.vllm_images import (
    ImagePatchLayout,
    images_from_patches,
    load_image_layout,
    one_placeholder_per_image,
    vllm_prompt,
)
from core_v1.rollout.types import RolloutError

PAD, START, END = 90, 91, 92  # <|image_pad|>, <|vision_start|>, <|vision_end|>

# Qwen2-VL / Qwen2.5-VL's image processor (14-pixel patches, CLIP's mean and std), and Qwen3-VL's
# (16-pixel patches, mean and std 0.5), sized for small images as the tiny test models are.
PROCESSORS = {
    "qwen2_vl": dict(patch_size=14, min_pixels=28 * 28, max_pixels=112 * 112),
    "qwen3_vl": dict(patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3, min_pixels=32 * 32, max_pixels=128**2),
}


def _noise(height: int, width: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8))


@pytest.fixture(params=sorted(PROCESSORS))
def image_processor(request) -> Qwen2VLImageProcessorPil:
    return Qwen2VLImageProcessorPil(merge_size=2, temporal_patch_size=2, **PROCESSORS[request.param])


def _processed(image_processor, images) -> dict[str, torch.Tensor]:
    encoded = image_processor(images=images, return_tensors="pt")
    return {"pixel_values": encoded["pixel_values"], "image_grid_thw": encoded["image_grid_thw"]}


def test_rebuilt_images_give_the_processor_the_same_patches_and_grid(image_processor):
    # Sizes the processor keeps, and sizes it resizes (up, down, to another aspect ratio).
    images = [_noise(56, 56, 0), _noise(64, 96, 1), _noise(30, 50, 2), _noise(150, 90, 3)]
    inputs = _processed(image_processor, images)
    layout = ImagePatchLayout.of(image_processor, PAD)

    rebuilt = images_from_patches(inputs["pixel_values"], inputs["image_grid_thw"], layout)

    assert [image.mode for image in rebuilt] == ["RGB"] * 4
    again = _processed(image_processor, rebuilt)
    assert torch.equal(again["image_grid_thw"], inputs["image_grid_thw"])
    torch.testing.assert_close(again["pixel_values"], inputs["pixel_values"], rtol=0, atol=1e-6)


def test_the_torchvision_processor_vllm_runs_makes_the_same_patches_from_the_rebuilt_images():
    # transformers' torchvision backend (vLLM's) resamples otherwise than its PIL backend (used here
    # without torchvision); an image already at its processed size is not resampled by either.
    pytest.importorskip("torchvision")
    from transformers import Qwen2VLImageProcessor

    settings = dict(merge_size=2, temporal_patch_size=2, **PROCESSORS["qwen2_vl"])
    images = [_noise(64, 96, 1), _noise(150, 90, 3)]
    inputs = _processed(Qwen2VLImageProcessorPil(**settings), images)

    rebuilt = images_from_patches(
        inputs["pixel_values"], inputs["image_grid_thw"], ImagePatchLayout.of(Qwen2VLImageProcessorPil(**settings), PAD)
    )

    again = _processed(Qwen2VLImageProcessor(**settings), rebuilt)
    assert torch.equal(again["image_grid_thw"], inputs["image_grid_thw"])
    torch.testing.assert_close(again["pixel_values"], inputs["pixel_values"], rtol=0, atol=1e-6)


def test_an_image_the_processor_keeps_comes_back_pixel_for_pixel():
    image_processor = Qwen2VLImageProcessorPil(merge_size=2, temporal_patch_size=2, **PROCESSORS["qwen2_vl"])
    image = _noise(56, 84, 4)
    inputs = _processed(image_processor, [image])

    (rebuilt,) = images_from_patches(
        inputs["pixel_values"], inputs["image_grid_thw"], ImagePatchLayout.of(image_processor, PAD)
    )

    assert np.array_equal(np.asarray(rebuilt), np.asarray(image))


def test_the_vllm_prompt_has_one_placeholder_per_image_and_the_images(image_processor):
    images = [_noise(56, 56, 5), _noise(56, 112, 6)]
    inputs = _processed(image_processor, images)
    layout = ImagePatchLayout.of(image_processor, PAD)
    counts = layout.token_counts(inputs["image_grid_thw"])
    as_written = [1, START, PAD, END, 2, 3, START, PAD, END, 4]  # the chat template's one pad per image
    expanded = expand_image_placeholders(as_written, PAD, counts)  # what the processor and the engines take

    prompt = vllm_prompt(expanded, inputs, layout)

    assert counts[1] == 2 * counts[0] > 1
    assert prompt["prompt_token_ids"] == as_written
    # vLLM's Qwen-VL prompt replacement turns each image's one pad into its token count again.
    assert expand_image_placeholders(prompt["prompt_token_ids"], PAD, counts) == expanded
    assert sorted(prompt["multi_modal_data"]) == ["image"]
    rebuilt = prompt["multi_modal_data"]["image"]
    patch = image_processor.patch_size
    assert [image.size for image in rebuilt] == [
        (w * patch, h * patch) for _, h, w in inputs["image_grid_thw"].tolist()
    ]
    assert torch.equal(_processed(image_processor, rebuilt)["image_grid_thw"], inputs["image_grid_thw"])


def test_a_sampled_placeholder_after_the_images_stays_text():
    prompt_ids = [1, START, PAD, PAD, PAD, PAD, END, 5, PAD, 6]
    assert one_placeholder_per_image(prompt_ids, PAD, [4]) == [1, START, PAD, END, 5, PAD, 6]
    assert one_placeholder_per_image([1, 2], PAD, []) == [1, 2]


@pytest.mark.parametrize(
    "prompt_ids, counts",
    [
        ([1, START, PAD, PAD, END], [4]),  # the run is shorter than the image's tokens
        ([1, START, PAD, PAD, PAD, PAD, END], [4, 4]),  # a second image without a run
    ],
)
def test_a_prompt_without_an_images_placeholders_is_refused(prompt_ids, counts):
    with pytest.raises(RolloutError, match="does not hold image"):
        one_placeholder_per_image(prompt_ids, PAD, counts)


def test_videos_and_a_text_models_engine_are_refused():
    image_processor = Qwen2VLImageProcessorPil(merge_size=2, temporal_patch_size=2, **PROCESSORS["qwen2_vl"])
    inputs = _processed(image_processor, [_noise(56, 56, 7)])
    layout = ImagePatchLayout.of(image_processor, PAD)
    video = {**inputs, "pixel_values_videos": inputs["pixel_values"], "video_grid_thw": inputs["image_grid_thw"]}
    with pytest.raises(RolloutError, match="video.*rollout.name=hf"):
        vllm_prompt([PAD] * 4, video, layout)
    with pytest.raises(RolloutError, match="text model"):
        vllm_prompt([PAD] * 4, inputs, None)
    with pytest.raises(RolloutError, match="no patch_size"):
        ImagePatchLayout.of(object(), PAD)


def test_the_layout_is_read_from_the_model_folder(tmp_path):
    vlm, text = tmp_path / "vlm", tmp_path / "text"
    Qwen2VLConfig(image_token_id=PAD).save_pretrained(vlm)
    Qwen2VLImageProcessorPil(merge_size=2, temporal_patch_size=2, **PROCESSORS["qwen3_vl"]).save_pretrained(vlm)
    Qwen2Config(num_hidden_layers=1).save_pretrained(text)

    layout = load_image_layout(str(vlm))

    assert layout == ImagePatchLayout(
        image_token_id=PAD,
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        rescale_factor=1 / 255,
        image_mean=(0.5, 0.5, 0.5),
        image_std=(0.5, 0.5, 0.5),
    )
    assert load_image_layout(str(text)) is None
