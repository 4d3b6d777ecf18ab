"""The slots runner on vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL) gives what the dynamic
runner (transformers' own forward over a DynamicCache) gives.

A tiny model of each family is made locally (`save_pretrained`, random weights, a one-block vision
tower); five requests with different images (1 x 1 to 4 x 2 merged tokens, so their mRoPE positions
end 0 to 6 before their lengths), a text-only one, and on Qwen2.5-VL a video whose frames are seconds
apart (its positions run past its length: a positive rope delta, so the rotary tables grow), each
with its own text and budget, on three slots with two-step windows: rows finish, the last rows move
into their slots, and waiting requests join mid-decode; the slots engine is put to sleep and woken
mid-decode (its rows prefilled again with their tokens so far). Greedy and seeded (temperature 1)
requests: the tokens are equal, the log-probs within float32 rounding.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import torch
import transformers

from core_v1.rollout.engines.fused_decode import REFERENCE_OPS
from core_v1.rollout.engines.hf import HFEngine
from core_v1.rollout.engines.slot_decoder import SlotDecoder, SlotKVCache
from core_v1.rollout.types import SamplingParams

VOCAB, START, END, IMAGE, VIDEO = 96, 92, 93, 94, 95
PATCH_VALUES = 3 * 2 * 14 * 14  # channels x temporal patch x patch side^2: one row of pixel_values
MODEL_CLASSES = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration"),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration"),
    "qwen3_vl": ("Qwen3VLConfig", "Qwen3VLForConditionalGeneration"),
}


def _save_tiny(family: str, path) -> str:
    _tiny(family).save_pretrained(path)
    return str(path)


def _tiny(family: str):
    config_name, model_name = MODEL_CLASSES[family]
    # head size 8: a rotary half-dimension of 4, over (t, h, w) as 2, 1, 1 (interleaved on Qwen3-VL)
    rope = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
    text = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=128,
        initializer_range=0.3,  # large weights: attention sharp enough that positions show in the logits
        eos_token_id=None,
        bos_token_id=None,
        rope_parameters=dict(rope, mrope_interleaved=True) if family == "qwen3_vl" else rope,
    )
    vision: dict[str, Any] = dict(depth=1, num_heads=2, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    if family == "qwen2_vl":
        vision.update(embed_dim=16, hidden_size=32, mlp_ratio=2)
    elif family == "qwen2_5_vl":
        vision.update(
            hidden_size=16, out_hidden_size=32, intermediate_size=32, window_size=28, fullatt_block_indexes=[0]
        )
    else:
        vision.update(
            hidden_size=16,
            out_hidden_size=32,
            intermediate_size=32,
            num_position_embeddings=16,
            deepstack_visual_indexes=[0],
        )
    config = getattr(transformers, config_name)(
        text_config=text,
        vision_config=vision,
        image_token_id=IMAGE,
        video_token_id=VIDEO,
        vision_start_token_id=START,
        vision_end_token_id=END,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    return getattr(transformers, model_name)(config).eval()


def _requests(family: str) -> list[tuple[list[int], dict | None, SamplingParams]]:
    """(prompt, multimodal inputs, params) of each request."""
    generator = torch.Generator().manual_seed(1)

    def text(n: int) -> list[int]:
        return torch.randint(2, START, (n,), generator=generator).tolist()

    def image(height: int, width: int) -> tuple[list[int], dict]:
        inputs = {
            "pixel_values": torch.randn(height * width, PATCH_VALUES, generator=generator),
            "image_grid_thw": torch.tensor([[1, height, width]]),
        }
        return [START] + [IMAGE] * (height * width // 4) + [END], inputs

    shapes = [(4, 4), (8, 4), (2, 2), (4, 8), None]
    requests: list[tuple[list[int], dict | None, SamplingParams]] = []
    for index, (shape, before, after, budget) in enumerate(
        zip(shapes, (3, 6, 1, 4, 9), (5, 2, 7, 3, 4), (9, 4, 7, 6, 30))
    ):
        params = SamplingParams(
            max_tokens=budget, temperature=0.0 if index % 2 else 1.0, seed=index, logprobs=True, ignore_eos=True
        )
        if shape is None:
            requests.append((text(before + after), None, params))
        else:
            ids, inputs = image(*shape)
            requests.append((text(before) + ids + text(after), inputs, params))
    if family == "qwen2_5_vl":  # 3 x 2 x 2 patches: 3 tokens at temporal positions 0, 8 and 16
        inputs = {
            "pixel_values_videos": torch.randn(3 * 4, PATCH_VALUES, generator=generator),
            "video_grid_thw": torch.tensor([[3, 2, 2]]),
            "second_per_grid_ts": torch.tensor([4.0]),
        }
        params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=True, ignore_eos=True)
        requests.append((text(2) + [START, VIDEO, VIDEO, VIDEO, END] + text(3), inputs, params))
    return requests


def _generate(path: str, kv_cache: str, requests, sleep_after_steps: int | None = None) -> tuple[list, HFEngine]:
    """The outputs of `requests` on a fresh engine; with `sleep_after_steps`, the engine sleeps and
    wakes once that many decode steps have run, while the longest request still runs."""
    engine = HFEngine(path, device="cpu", kv_cache=kv_cache, max_num_seqs=3, sync_interval=2, max_model_len=64)

    async def run():
        outputs = asyncio.gather(
            *(
                engine.generate(str(i), prompt, params, multi_modal_inputs=inputs)
                for i, (prompt, inputs, params) in enumerate(requests)
            )
        )
        if sleep_after_steps is not None:
            while engine.stats.decode_steps < sleep_after_steps:
                await asyncio.sleep(0.002)
            await engine.sleep()
            assert engine.num_requests() > 0  # rows were running: they are prefilled again after wake-up
            await engine.wake_up()
        return await outputs

    try:
        return asyncio.run(run()), engine
    finally:
        engine.shutdown()


@pytest.mark.parametrize("family", sorted(MODEL_CLASSES))
def test_slots_runner_equals_dynamic_runner_on_image_prompts(family, tmp_path):
    torch.set_num_threads(1)
    path = _save_tiny(family, tmp_path)
    requests = _requests(family)
    dynamic, _ = _generate(path, "dynamic", requests)
    slots, engine = _generate(path, "slots", requests, sleep_after_steps=6)
    assert type(engine.runner).__name__ == "SlotRunner"
    assert engine.stats.prefill_cohorts > 1  # requests joined rows already decoding
    for (prompt, _, params), want, got in zip(requests, dynamic, slots):
        assert got.token_ids == want.token_ids and len(got.token_ids) == params.max_tokens
        torch.testing.assert_close(torch.tensor(got.log_probs), torch.tensor(want.log_probs), atol=1e-4, rtol=1e-4)
    if family == "qwen2_5_vl":  # the video's rope delta is positive: the tables grew past the slots
        assert engine.runner.decoder.max_positions > engine.runner.slot_length


def test_the_decode_step_rotates_at_the_rope_positions_plain_and_fused():
    """The decoder of a vision-language model's language model: K/V written at the slot positions,
    q and k rotated at `rope_positions`; the residual-stream step (the references of the fused
    pieces) does the same, and other rope positions give other logits."""
    model = _tiny("qwen2_vl")
    decoder = SlotDecoder(model, 32)
    decoder.prepare()
    tokens, lengths = torch.tensor([[5, 6, 7, 8], [9, 10, 11, 0]]), torch.tensor([4, 3])
    with torch.inference_mode():
        caches = [SlotKVCache(model.config, 2, 32, torch.float32, torch.device("cpu")) for _ in range(3)]
        for cache in caches:
            decoder.prefill(cache, tokens, lengths, 0, torch.arange(2), 4)
        step = torch.tensor([12, 13]), lengths, 8
        rope = lengths - torch.tensor([2, 1])
        plain = decoder.decode(caches[0], *step, rope_positions=rope)
        fused = decoder.decode_fused(REFERENCE_OPS, caches[1], *step, rope_positions=rope)
        unshifted = decoder.decode(caches[2], *step)
    torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(caches[1].kv, caches[0].kv, rtol=1e-6, atol=1e-6)
    assert not torch.allclose(plain, unshifted, atol=1e-3)
