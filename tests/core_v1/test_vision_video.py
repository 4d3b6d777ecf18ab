"""Videos in prompts (core_v1.agent_loop.video), on the tiny Qwen2-VL / Qwen2.5-VL made locally:
a parquet row whose `videos` entry is a list of frames -> the dataset -> the agent loop's prompt
encoding -> the hf engine's prefill -> the row's `multi_modal_inputs` as the store holds them ->
the actor's forward. As for images (tests/core_v1/test_vision.py), the engine's sampling log-probs
and the training forward's agree, and both change when the frames do.
"""

from __future__ import annotations

import asyncio
import io

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from core_v1.agent_loop.single_turn import SingleTurnAgentLoop
from core_v1.agent_loop.video import Video, VideoDataError, video_patches
from core_v1.agent_loop.vision import VisionDataError, encode_vision_prompt, load_policy_processor
from core_v1.config import load_config
from core_v1.data.dataset import PromptDataset
from tests.core_v1.test_vision import _generate, _image, _model_config, _training_log_probs
from examples.tiny_vlm import make_tiny_vlm
from tests.core_v1.test_vision_qwen3 import make_tiny_qwen3_vl


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory) -> str:
    return str(make_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"), [str(d) for d in range(10)]))


@pytest.fixture(scope="module")
def qwen3_vl_dir(tmp_path_factory) -> str:
    return str(make_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny_qwen3_vl")))


@pytest.fixture(scope="module")
def qwen2_5_vl_dir(tmp_path_factory) -> str:
    return str(
        make_tiny_vlm(tmp_path_factory.mktemp("tiny_qwen2_5_vl"), [str(d) for d in range(10)], family="qwen2_5_vl")
    )


def _png(value: int) -> dict:
    buffer = io.BytesIO()
    _image(value).save(buffer, format="PNG")
    return {"bytes": buffer.getvalue(), "path": None}


def test_the_frames_of_a_video_fill_the_temporal_axis_of_its_patches(vlm_dir):
    """A video's patch holds `temporal_patch_size` consecutive frames where an image's repeats its
    one frame: two equal frames encode exactly as that image, and in two different frames' patches
    the first temporal slot is the first frame's and the second the second's."""
    processor = load_policy_processor(_model_config(vlm_dir)).image_processor
    image = processor(images=[_image(40)], return_tensors="pt")
    pixels, grid = video_patches(processor, Video(frames=(_image(40), _image(40))))
    assert torch.equal(pixels, image["pixel_values"]) and grid.tolist() == image["image_grid_thw"][0].tolist()

    pixels, grid = video_patches(processor, Video(frames=(_image(0), _image(200), _image(90))))
    assert grid.tolist() == [2, 4, 4]  # three frames padded to four with the last one
    slots = pixels.view(2, 16, 3, 2, 14, 14)
    for frame, (group, slot) in zip((0, 200, 90, 90), ((0, 0), (0, 1), (1, 0), (1, 1))):
        one = processor(images=[_image(frame)], return_tensors="pt")["pixel_values"].view(16, 3, 2, 14, 14)
        assert torch.equal(slots[group, :, :, slot], one[:, :, 0])


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_a_parquet_video_row_reaches_the_engine_and_the_training_forward(family, request, tmp_path):
    vlm = request.getfixturevalue("vlm_dir" if family == "qwen2_vl" else f"{family}_dir")
    processor = load_policy_processor(_model_config(vlm))
    rows = [
        {"prompt": [{"role": "user", "content": "<video>count="}], "videos": [{"video": frames, "fps": 1.0}]}
        for frames in ([_png(0), _png(255), _png(0)], [_png(255), _png(0), _png(255)])
    ]
    path = tmp_path / "videos.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    dataset = PromptDataset(
        str(path),
        max_prompt_length=64,
        tokenizer=processor.tokenizer,
        filter_overlong_prompts=True,
        processor=processor,
    )
    config = load_config([f"actor_rollout_ref.model.path={vlm}", "data.train_files=unused.parquet"])
    loop = SingleTurnAgentLoop(config, server_manager=None, tokenizer=processor.tokenizer, processor=processor)
    prompts = [asyncio.run(loop.encode_prompt(dict(row))) for row in dataset.rows]

    ids, inputs = prompts[0]
    # Three 56x56 frames: two groups of two (the last frame repeated) of 4 x 4 patches, merged 2 x 2
    # (Qwen3-VL's 16-pixel patches: the frames are resized to 64 x 64).
    assert inputs["video_grid_thw"].tolist() == [[2, 4, 4]] and ids.count(processor.video_token_id) == 8
    assert len(dataset.rows) == 2 and len(ids) <= 64  # the length filter counted the video's tokens
    if family == "qwen2_5_vl":  # its mRoPE spaces the frame groups by time: 2 frames at 1 fps
        assert inputs["second_per_grid_ts"].tolist() == [2.0]
    if family == "qwen3_vl":  # each group after its time (frames 0-1 and 2-2 at 1 fps), in its own markers
        group = "<|vision_start|>" + "<|video_pad|>" * 4 + "<|vision_end|>"
        text = f"<|im_start|>user\n<0.5 seconds>{group}<2.0 seconds>{group}count=<|im_end|>\n<|im_start|>assistant\n"
        assert ids == processor.tokenizer(text)["input_ids"]
    outputs = _generate(vlm, prompts)
    trained = _training_log_probs(vlm, prompts, outputs)
    for row, out in enumerate(outputs):
        assert torch.allclose(trained[row, : len(out.log_probs)], torch.tensor(out.log_probs), atol=1e-5)
    # Same text, same seed, other frames: the distribution moves.
    assert outputs[0].token_ids[0] == outputs[1].token_ids[0]
    assert abs(outputs[0].log_probs[0] - outputs[1].log_probs[0]) > 1e-3


def test_a_prompt_with_an_image_and_a_video_encodes_both_as_the_processor_encodes_the_image(vlm_dir):
    processor = load_policy_processor(_model_config(vlm_dir))
    image_only = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(7)])
    ids, inputs = encode_vision_prompt(
        processor, [{"role": "user", "content": "<image>count=<video>"}], [_image(7)], videos=[Video((_image(7),) * 2)]
    )
    assert ids.count(processor.image_token_id) == 4 and ids.count(processor.video_token_id) == 4
    # Up to the video, the ids and image inputs are the processor's own for the image-only prompt.
    before_video = ids[: ids.index(processor.video_token_id) - 1]  # up to the video's vision-start marker
    assert before_video == image_only[0][: len(before_video)]
    assert torch.equal(inputs["pixel_values"], image_only[1]["pixel_values"])
    assert torch.equal(inputs["pixel_values_videos"], inputs["pixel_values"])  # two equal frames: the image


def test_entry_options_size_the_frames(vlm_dir):
    processor = load_policy_processor(_model_config(vlm_dir))
    chat = [{"role": "user", "content": "<video>count="}]
    frames = (_image(0), _image(1))
    _, small = encode_vision_prompt(processor, chat, [], videos=[Video(frames=frames, resized=(28, 56))])
    _, large = encode_vision_prompt(processor, chat, [], videos=[Video(frames=frames, min_pixels=112 * 112)])
    assert small["video_grid_thw"].tolist() == [[1, 2, 4]] and large["video_grid_thw"].tolist() == [[1, 8, 8]]


def test_a_video_file_is_refused_in_one_line(vlm_dir):
    config = load_config([f"actor_rollout_ref.model.path={vlm_dir}", "data.train_files=unused.parquet"])
    processor = load_policy_processor(_model_config(vlm_dir))
    loop = SingleTurnAgentLoop(config, server_manager=None, tokenizer=processor.tokenizer, processor=processor)
    row = {"raw_prompt": [{"role": "user", "content": "<video>count="}], "videos": [{"video": "file:///clip.mp4"}]}
    with pytest.raises(VideoDataError, match="is a file") as refused:
        asyncio.run(loop.encode_prompt(row))
    assert "\n" not in str(refused.value) and "decoder" in str(refused.value)


def test_a_video_for_a_text_model_is_refused_not_dropped(tiny_assets):
    config = load_config([f"actor_rollout_ref.model.path={tiny_assets['model']}", "data.train_files=unused.parquet"])
    loop = SingleTurnAgentLoop(config, server_manager=None, tokenizer=None)
    row = {"raw_prompt": [{"role": "user", "content": "<video>count="}], "videos": [{"video": [_png(0)]}]}
    with pytest.raises(VisionDataError, match="1 video\\(s\\) under data.video_key='videos'"):
        asyncio.run(loop.encode_prompt(row))
