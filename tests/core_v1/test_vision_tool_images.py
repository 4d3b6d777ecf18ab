"""A tool that answers with an image (verl's image zoom-in tool) in a multi-turn session of a tiny
Qwen2-VL: the image goes into the tool's tokens and the trajectory's inputs, the engine's next turn
sees it, and the training forward over the stored trajectory gives the engine's log-probs.

The model's first turn is scripted (a random tiny model writes no tool call); every later turn runs
on the real built-in engine.
"""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from core_v1.agent_loop.tool_agent import ToolAgentLoop
from core_v1.agent_loop.tools.image_zoom import ImageZoomInTool, zoom_box
from core_v1.agent_loop.vision import image_inputs, load_policy_processor
from core_v1.config import load_config
from core_v1.rollout.engines.hf import HFEngine
from core_v1.rollout.types import SamplingParams, TokenOutput
from examples.tiny_vlm import make_tiny_vlm
from tests.core_v1.test_vision import _model_config, _training_log_probs

LATER_TURN_TOKENS = 6
ZOOM_CALL = '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [%d, 0, %d, 56]}}</tool_call>'


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory) -> str:
    # The tokenizer's alphabet comes from its training words: the tool call must be writable.
    words = [str(d) for d in range(10)] + ZOOM_CALL.replace('"', " ").split()
    return str(make_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm_tools"), words))


@pytest.fixture(scope="module")
def processor(vlm_dir):
    return load_policy_processor(_model_config(vlm_dir))


def _halves() -> Image.Image:
    """112 x 56 pixels: black on the left, white on the right."""
    pixels = np.zeros((56, 112, 3), dtype=np.uint8)
    pixels[:, 56:] = 255
    return Image.fromarray(pixels)


class _ScriptedFirstTurn:
    """Turn 1 answers with `first_text` (the model's tool call); later turns run on `engine`."""

    def __init__(self, tokenizer, engine: HFEngine, first_text: str):
        self.tokenizer, self.engine, self.first_text = tokenizer, engine, first_text
        self.requests: list[tuple[list[int], dict]] = []
        self.engine_outputs: list[TokenOutput] = []

    async def generate(self, request_id, prompt_ids, sampling_params, multi_modal_inputs=None):
        params = SamplingParams.from_dict(sampling_params)
        self.requests.append((list(prompt_ids), multi_modal_inputs))
        if len(self.requests) == 1:
            end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
            ids = self.tokenizer.encode(self.first_text, add_special_tokens=False) + [end]
            return TokenOutput(token_ids=ids, log_probs=[0.0] * len(ids), stop_reason="stop")
        params = dataclasses.replace(params, max_tokens=min(params.max_tokens, LATER_TURN_TOKENS))
        output = await self.engine.generate(request_id, list(prompt_ids), params, multi_modal_inputs=multi_modal_inputs)
        self.engine_outputs.append(output)
        return output


def _session(vlm_dir: str, processor, first_text: str):
    config = load_config(
        [
            "data.max_prompt_length=128",
            "data.max_response_length=192",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        ],
        config_name="quickstart",
    )
    engine = HFEngine(vlm_dir, device="cpu", max_num_seqs=2)
    client = _ScriptedFirstTurn(processor.tokenizer, engine, first_text)
    loop = ToolAgentLoop(config, client, processor.tokenizer, tools=[ImageZoomInTool()], processor=processor)
    row = {
        "raw_prompt": [{"role": "user", "content": "<image>which half is white?"}],
        "images": [_halves()],
        "tools_kwargs": {"image_zoom_in_tool": {"create_kwargs": {"image": _halves()}}},
    }
    params = {"temperature": 1.0, "logprobs": True, "seed": 3, "ignore_eos": True}
    try:
        return asyncio.run(loop.run(params, **row)), client
    finally:
        engine.shutdown()


def test_zoom_box_clamps_grows_and_refuses():
    assert zoom_box([0, 0, 56, 56], 112, 56) == (0, 0, 56, 56)
    assert zoom_box([-10, -5, 200, 80], 112, 56) == (0, 0, 112, 56)  # clamped to the image
    assert zoom_box([50, 20, 60, 30], 112, 56) == (41, 11, 69, 39)  # 10 x 10 grown to 28 x 28 about its centre
    assert zoom_box([100, 40, 110, 50], 112, 56) == (84, 28, 112, 56)  # grown, then shifted inside
    assert zoom_box([30, 30, 20, 40], 112, 56) is None  # inverted
    assert zoom_box([0, 0, 112, 56], 112, 20) is None  # the image is thinner than 28 pixels


def test_a_tools_image_reaches_the_next_turn_and_the_training_forward_agrees(vlm_dir, processor):
    output, client = _session(vlm_dir, processor, ZOOM_CALL % (56, 112))
    metrics = output.metrics
    assert metrics["num_tool_calls"] == 1 and metrics["tool_errors"] == 0 and metrics["image_zoom_in_tool/success"] == 1
    # The prompt's image and the crop, in order; the crop's 4 placeholders are tool tokens (mask 0).
    assert output.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 4, 8], [1, 4, 4]]
    tool_tokens = [t for t, m in zip(output.response_ids, output.response_mask) if m == 0]
    assert tool_tokens.count(processor.image_token_id) == 4
    # The engine's second request is the whole context so far, with both images.
    [later] = client.engine_outputs
    sent_ids, sent_inputs = client.requests[1]
    assert sent_ids == output.prompt_ids + output.response_ids[: -len(later.token_ids)]
    assert torch.equal(sent_inputs["pixel_values"], output.multi_modal_inputs["pixel_values"])

    trained = _training_log_probs(
        vlm_dir, [(output.prompt_ids, output.multi_modal_inputs)], [_Response(output.response_ids)]
    )[0]
    later_positions = slice(len(output.response_ids) - len(later.token_ids), len(output.response_ids))
    assert torch.allclose(trained[later_positions], torch.tensor(later.log_probs), atol=1e-5)

    # The crop itself matters: the left (black) half in its place moves the later turn's log-probs.
    swapped = dict(output.multi_modal_inputs)
    prompt_patches = int(swapped["image_grid_thw"][0].prod())
    left = image_inputs(processor, [_halves().crop((0, 0, 56, 56))])["pixel_values"]
    swapped["pixel_values"] = torch.cat([swapped["pixel_values"][:prompt_patches], left])
    moved = _training_log_probs(vlm_dir, [(output.prompt_ids, swapped)], [_Response(output.response_ids)])[0]
    assert (moved[later_positions] - trained[later_positions]).abs().max() > 1e-3


def test_no_tool_image_is_shown_after_a_placeholder_the_model_wrote(vlm_dir, processor):
    output, client = _session(vlm_dir, processor, "<|image_pad|>" + ZOOM_CALL % (56, 112))
    # The tool ran and cropped; the loop answered with an error instead of its image.
    assert output.metrics["tool_errors"] == 1 and output.metrics["image_zoom_in_tool/success"] == 1
    assert output.multi_modal_inputs["image_grid_thw"].tolist() == [[1, 4, 8]]  # the prompt's image only
    tool_tokens = [t for t, m in zip(output.response_ids, output.response_mask) if m == 0]
    assert processor.image_token_id not in tool_tokens


class _Response:
    def __init__(self, token_ids: list[int]):
        self.token_ids = token_ids
