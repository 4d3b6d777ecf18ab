"""Qwen3-VL (dense and MoE) through `core_v1.utils.vision.vision_forward`, on tiny models made here
with `save_pretrained`: the logits equal the HF model's own forward over the same prompt, images
and video frames included, and the comparison sees the deepstack features (without them it fails);
the backward reaches the deepstack mergers, also on two FSDP2-sharded ranks; the smoke run's
stand-in of a large Qwen3-VL keeps deepstack. tests/core_v1/test_vision.py checks the rollout
engine against the training forward on one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from core_v1.utils import vision
from core_v1.utils.vision import vision_forward
from core_v1.workers.model import load_causal_lm
from examples.tiny_model import make_tokenizer
from examples.tiny_vlm import CHAT_TEMPLATE, VISION_TOKENS

PATCH, MERGE, TEMPORAL = 16, 2, 2  # Qwen3-VL's patch size (Qwen2-VL's is 14)
PATCH_DIM = 3 * TEMPORAL * PATCH * PATCH


def make_tiny_qwen3_vl(out_dir: str | Path, moe: bool = False, seed: int = 0) -> Path:
    """A Qwen3-VL-shaped model (two language layers, a two-block vision tower whose first block
    feeds deepstack features into the first language layer), its tokenizer and its processor."""
    import transformers
    from transformers import GenerationConfig, Qwen2VLImageProcessorPil

    tokenizer = make_tokenizer([str(d) for d in range(10)], 96)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", *VISION_TOKENS]})
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=512,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        # head_dim 8: a rotary half-dimension of 4, interleaved over (t, h, w) as 2, 1, 1.
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    )
    if moe:
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1)
    vision_config = dict(
        depth=2,
        hidden_size=32,
        intermediate_size=64,
        num_heads=2,
        patch_size=PATCH,
        spatial_merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        out_hidden_size=32,
        num_position_embeddings=16,
        deepstack_visual_indexes=[0],
    )
    name = "Qwen3VLMoe" if moe else "Qwen3VL"
    config = getattr(transformers, f"{name}Config")(
        text_config=text,
        vision_config=vision_config,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = getattr(transformers, f"{name}ForConditionalGeneration")(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    Qwen2VLImageProcessorPil(
        min_pixels=32 * 32,
        max_pixels=64 * 64 * 4,
        patch_size=PATCH,
        merge_size=MERGE,
        temporal_patch_size=TEMPORAL,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
    ).save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen3VLProcessor"}))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return out


@pytest.fixture(scope="module", params=[False, True], ids=["qwen3_vl", "qwen3_vl_moe"])
def model(request, tmp_path_factory):
    path = make_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny_qwen3_vl"), moe=request.param)
    return load_causal_lm(str(path)).eval()


def _prompts(config) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[dict]]:
    """Two left-padded prompts: text, an image (2 x 2 merged tokens), text; and text, an image,
    text, then a two-frame video (each frame 2 x 2 tokens between its own vision markers, after its
    timestamp's text, as Qwen3-VL's processor writes it). Returns input_ids, attention_mask, token
    types (0 text, 1 image, 2 video) and each row's multimodal inputs."""
    start, end = config.vision_start_token_id, config.vision_end_token_id
    image = [start, *[config.image_token_id] * 4, end]
    frame = [start, *[config.video_token_id] * 4, end]
    rows = [[5, 6, *image, 7, 8], [9, *image, 10, 11, 12, *frame, 13, *frame, 14]]
    generator = torch.Generator().manual_seed(1)
    inputs = [
        {"pixel_values": torch.randn(16, PATCH_DIM, generator=generator), "image_grid_thw": torch.tensor([[1, 4, 4]])},
        {
            "pixel_values": torch.randn(16, PATCH_DIM, generator=generator),
            "image_grid_thw": torch.tensor([[1, 4, 4]]),
            "pixel_values_videos": torch.randn(32, PATCH_DIM, generator=generator),
            "video_grid_thw": torch.tensor([[2, 4, 4]]),
        },
    ]
    length = max(map(len, rows))
    input_ids = torch.zeros(len(rows), length, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for index, row in enumerate(rows):
        input_ids[index, length - len(row) :] = torch.tensor(row)
        attention_mask[index, length - len(row) :] = 1
    types = (input_ids == config.image_token_id).long() + 2 * (input_ids == config.video_token_id).long()
    return input_ids, attention_mask, types, inputs


def _own_forward(model, input_ids, attention_mask, types, inputs) -> torch.Tensor:
    """transformers' forward over the batch: its own embedding, positions and deepstack."""
    batched = vision.concat_inputs(inputs)
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=attention_mask, mm_token_type_ids=types, **batched).logits


def _vision_forward_logits(model, input_ids, attention_mask, inputs) -> torch.Tensor:
    with torch.no_grad():
        output, _ = vision_forward(model, input_ids, attention_mask, attention_mask.bool(), inputs)
    return output.logits


def test_vision_forward_equals_the_models_own_forward_with_images_and_video(model):
    input_ids, attention_mask, types, inputs = _prompts(model.config)
    own = _own_forward(model, input_ids, attention_mask, types, inputs)
    ours = _vision_forward_logits(model, input_ids, attention_mask, inputs)
    real = attention_mask.bool()
    assert torch.allclose(ours[real], own[real], atol=1e-5, rtol=1e-5)


def test_without_the_deepstack_features_the_logits_differ(model, monkeypatch):
    """The comparison above sees deepstack: leaving it out moves the logits past the tolerance."""
    input_ids, attention_mask, types, inputs = _prompts(model.config)
    own = _own_forward(model, input_ids, attention_mask, types, inputs)
    monkeypatch.setattr(vision, "_interleave_deepstack", lambda *args: [])
    without = _vision_forward_logits(model, input_ids, attention_mask, inputs)
    real = attention_mask.bool()
    assert not torch.allclose(without[real], own[real], atol=1e-5, rtol=1e-5)
    # The tokens before the first image do not attend to it, so only later ones move.
    first_image = int((types[1] != 0).long().argmax())
    assert torch.allclose(without[1, :first_image], own[1, :first_image], atol=1e-5, rtol=1e-5)


def test_training_through_vision_forward_reaches_the_deepstack_mergers(model):
    """The deepstack mergers (in the vision tower, trained unless freeze_vision_tower) get gradients."""
    input_ids, attention_mask, _, inputs = _prompts(model.config)
    output, _ = vision_forward(model, input_ids, attention_mask, attention_mask.bool(), inputs)
    model.zero_grad(set_to_none=True)
    output.logits[attention_mask.bool()].logsumexp(-1).sum().backward()
    mergers = [module for name, module in model.named_modules() if name.endswith("deepstack_merger_list")]
    grads = [param.grad for merger in mergers for param in merger.parameters()]
    model.zero_grad(set_to_none=True)
    assert mergers and all(grad is not None and grad.abs().sum() > 0 for grad in grads)


def test_a_placeholder_after_the_prompt_takes_no_deepstack_feature(model):
    """A response that samples the image-pad id is text: it gets no image feature and no deepstack
    feature (a slot too many would fail on the count), and the prompt's logits are unchanged
    (transformers' own forward would count it as an image slot and fail)."""
    input_ids, attention_mask, _, inputs = _prompts(model.config)
    row, image_token = input_ids[:1], model.config.image_token_id
    extended = torch.cat([row, torch.tensor([[image_token]])], dim=1)
    mask = torch.ones_like(extended)
    prompt = mask.bool().clone()
    prompt[:, -1] = False
    with torch.no_grad():
        output, _ = vision_forward(model, extended, mask, prompt, inputs[:1])
        alone, _ = vision_forward(model, row, torch.ones_like(row), torch.ones_like(row, dtype=torch.bool), inputs[:1])
    assert torch.allclose(output.logits[:, :-1], alone.logits, atol=1e-5, rtol=1e-5)
    assert torch.isfinite(output.logits).all()


def test_the_smoke_stand_in_of_a_large_qwen3_vl_keeps_deepstack(tmp_path):
    """The smoke run's tiny stand-in for a Qwen3-VL-8B-shaped folder (no weights): its first vision
    block feeds its first language layer, and the engine generates from an image with it."""
    import shutil

    from core_v1.agent_loop.vision import encode_vision_prompt, load_policy_processor
    from core_v1.smoke import build_vision_stand_in, local_vision_config, small_local_model
    from tests.core_v1.test_vision import _generate, _image, _model_config

    large = tmp_path / "large"
    shutil.copytree(make_tiny_qwen3_vl(tmp_path / "tiny"), large, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((large / "config.json").read_text())
    config["text_config"].update(
        hidden_size=4096,
        intermediate_size=12288,
        num_hidden_layers=36,
        num_attention_heads=32,
        num_key_value_heads=8,
        head_dim=128,
    )
    config["text_config"]["rope_parameters"]["mrope_section"] = [24, 20, 20]
    config["vision_config"].update(
        depth=27,
        hidden_size=1152,
        intermediate_size=4304,
        num_heads=16,
        out_hidden_size=4096,
        deepstack_visual_indexes=[8, 16, 24],
    )
    (large / "config.json").write_text(json.dumps(config))
    assert small_local_model(str(large), False) is None
    stand_in = tmp_path / "stand_in"
    assert build_vision_stand_in(str(large), local_vision_config(str(large), False), stand_in) < 1e6
    small = json.loads((stand_in / "config.json").read_text())
    assert small["vision_config"]["deepstack_visual_indexes"] == [0] and small["text_config"]["head_dim"] == 8
    processor = load_policy_processor(_model_config(str(stand_in)))
    prompt = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    [output] = _generate(str(stand_in), [prompt])
    assert len(output.token_ids) == 6


def _sharded_rank(rank: int, path: str, port: int, out_dir: str) -> None:
    import os

    import torch.distributed as dist

    from core_v1.config.schema import FSDPConfig
    from core_v1.workers.distributed import shard_model

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    try:
        plain = load_causal_lm(path).eval()
        input_ids, attention_mask, _, inputs = _prompts(plain.config)
        sharded = shard_model(load_causal_lm(path), FSDPConfig(), torch.device("cpu"))
        output, _ = vision_forward(sharded, input_ids, attention_mask, attention_mask.bool(), inputs)
        output.logits[attention_mask.bool()].logsumexp(-1).sum().backward()
        mergers = [p.grad for n, p in sharded.named_parameters() if "deepstack_merger_list" in n]
        whole = _vision_forward_logits(plain, input_ids, attention_mask, inputs)
        real = attention_mask.bool()
        torch.save(
            {
                "sharded": output.logits.detach()[real],
                "whole": whole[real],
                "merger_grads": [grad is not None for grad in mergers],
            },
            Path(out_dir) / f"rank{rank}.pt",
        )
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two processes start torch
def test_the_vision_forward_runs_on_fsdp2_sharded_ranks(tmp_path):
    """Under FSDP2 the root's weights (token embeddings, the vision tower's patch embedding and
    merger) are gathered only inside the model's forward: the images are encoded there, and the
    sharded model's logits equal the whole model's."""
    import socket

    import torch.multiprocessing as mp

    path = str(make_tiny_qwen3_vl(tmp_path / "model"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_sharded_rank, args=(path, port, str(tmp_path)), nprocs=2)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt")
        assert torch.allclose(result["sharded"], result["whole"], atol=1e-5, rtol=1e-5)
        assert result["merger_grads"] and all(result["merger_grads"])
