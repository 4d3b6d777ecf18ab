"""The fused decode step (`fused_decode.py`) computes what the plain slots decoder computes.

- the residual-stream step with the pure-torch references equals `SlotDecoder.decode` (logits
  and the K/V it writes), for Qwen2 (q/k/v biases) and Qwen3 (per-head q/k norms);
- each Triton kernel equals its reference, and the whole step with them equals the plain one: on
  CUDA, or on the CPU under Triton's interpreter (`TRITON_INTERPRET=1` with triton installed;
  skipped otherwise, with the reason);
- the engine with fused_decode="compile" (`torch.compile`, C++ kernels on the CPU) gives every
  request, greedy or seeded, the tokens of fused_decode="off", also after sleep, wake and a
  weight update; on CUDA (CUDA graphs) with "compile" and "triton" too (slow:
  Inductor compiles for minutes on a loaded CPU).
"""

from __future__ import annotations

import asyncio
import os

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

from core_v1.rollout import LLMServer, RolloutError, SamplingParams
from core_v1.rollout.engines.fused_decode import (
    REFERENCE_OPS,
    add_rms_norm_reference,
    decode_attention_reference,
    rotary_write_reference,
    silu_mul_reference,
    triton_missing,
)
from core_v1.rollout.engines.hf import HFEngine
from core_v1.rollout.engines.slot_decoder import SlotDecoder, SlotKVCache

SLOT_LENGTH = 64
PROMPT_LENGTHS = [5, 3, 4]


def _tiny(kind: str):
    # head size 16: the Triton kernels' smallest tile
    shape = dict(
        vocab_size=96,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    if kind == "qwen3":
        return Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=16)).eval()
    return Qwen2ForCausalLM(Qwen2Config(**shape)).eval()


def _prefilled(decoder: SlotDecoder, config, device: str) -> SlotKVCache:
    """A cache holding three prompts of different lengths in slots 0..2."""
    cache = SlotKVCache(config, 3, SLOT_LENGTH, torch.float32, torch.device(device))
    tokens = torch.randint(2, 96, (3, max(PROMPT_LENGTHS)), generator=torch.Generator().manual_seed(1)).to(device)
    decoder.prefill(
        cache,
        tokens,
        torch.tensor(PROMPT_LENGTHS, device=device),
        0,
        torch.arange(3, device=device),
        max(PROMPT_LENGTHS),
    )
    return cache


def _plain_and_fused(kind: str, ops, device: str, steps: int = 3):
    """Logits and caches of `steps` decode steps, plain and with `ops`."""
    model = _tiny(kind).to(device)
    decoder = SlotDecoder(model, SLOT_LENGTH)
    decoder.prepare()
    with torch.inference_mode():
        plain, fused = _prefilled(decoder, model.config, device), _prefilled(decoder, model.config, device)
        tokens = torch.tensor([7, 8, 9], device=device)
        positions = torch.tensor(PROMPT_LENGTHS, device=device)
        results = []
        for step in range(steps):
            results.append(
                (
                    decoder.decode(plain, tokens, positions + step, 16),
                    decoder.decode_fused(ops, fused, tokens, positions + step, 16),
                )
            )
    return results, plain.kv, fused.kv


@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_the_residual_stream_step_with_the_references_equals_the_plain_step(kind):
    results, plain_kv, fused_kv = _plain_and_fused(kind, REFERENCE_OPS, "cpu")
    for plain, fused in results:
        torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fused_kv, plain_kv, rtol=1e-6, atol=1e-6)
    assert fused_kv.abs().sum() > 0


# ---- Triton kernels --------------------------------------------------------------------------


def _triton_device() -> str | None:
    if triton_missing():
        return None
    if torch.cuda.is_available():
        return "cuda"
    return "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else None


def _triton_skip_reason() -> str:
    return triton_missing() or "no CUDA device, and TRITON_INTERPRET=1 (Triton's CPU interpreter) is not set"


needs_triton = pytest.mark.skipif(_triton_device() is None, reason=_triton_skip_reason())


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_each_triton_kernel_equals_its_reference(dtype):
    from core_v1.rollout.engines import fused_decode_triton as kernels

    device = _triton_device()
    tolerance = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator).to(dtype).to(device)

    x, residual, weight = randn(5, 96), randn(5, 96), randn(96)
    for got, expected in zip(
        kernels.add_rms_norm(x, residual, weight, 1e-6), add_rms_norm_reference(x, residual, weight, 1e-6)
    ):
        torch.testing.assert_close(got, expected, **tolerance)

    gate_up = randn(3, 2 * 1500)  # more than one block of the kernel per row
    torch.testing.assert_close(kernels.silu_mul(gate_up), silu_mul_reference(gate_up), **tolerance)

    heads, kv_heads, head_dim, rows = 4, 2, 16, 3
    qkv = randn(rows, heads + 2 * kv_heads, head_dim)
    positions = torch.tensor([0, 7, 3], device=device)
    angles = torch.randn(10, head_dim // 2, generator=generator).repeat(1, 2)
    cos, sin = angles.cos().to(dtype).to(device), angles.sin().to(dtype).to(device)
    write_index = torch.tensor([4, 9, 0, 2, 11, 6], device=device)
    stores = [torch.zeros(12, head_dim, dtype=dtype, device=device) for _ in range(4)]
    got = kernels.rotary_write(qkv, positions, cos, sin, stores[0], stores[1], write_index, heads, kv_heads)
    expected = rotary_write_reference(qkv, positions, cos, sin, stores[2], stores[3], write_index, heads, kv_heads)
    torch.testing.assert_close(got, expected, **tolerance)
    torch.testing.assert_close(stores[0], stores[2], **tolerance)
    torch.testing.assert_close(stores[1], stores[3], **tolerance)
    assert stores[1].abs().sum() > 0


@needs_triton
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, kv_length", [(3, 40), (2, 700)])  # one slice of keys; several
def test_the_decode_attention_kernel_equals_sdpa_over_the_slots(dtype, rows, kv_length):
    from core_v1.rollout.engines import fused_decode_triton as kernels

    device = _triton_device()
    if dtype == torch.bfloat16 and device == "cpu":
        pytest.skip(
            "Triton 3.9's interpreter multiplies bfloat16 tiles wrongly in tl.dot (2.6e10 off on a 16x16 "
            "product); the bfloat16 case runs on CUDA"
        )
    generator = torch.Generator().manual_seed(rows)
    heads, kv_heads, head_dim, slots, length = 14, 2, 16, 4, 768  # 7 query heads per K/V head
    q = torch.randn(rows, heads, head_dim, generator=generator).to(dtype).to(device)
    keys, values = (
        torch.randn(slots, kv_heads, length, head_dim, generator=generator).to(dtype).to(device) for _ in range(2)
    )
    positions = torch.tensor([kv_length - 1, 0, kv_length // 2][:rows], device=device)
    mask = (torch.arange(kv_length, device=device)[None, :] <= positions[:, None])[:, None, None, :]
    got = kernels.decode_attention(q, keys, values, positions, kv_length, mask, 0.25)
    expected = decode_attention_reference(q, keys, values, positions, kv_length, mask, 0.25)
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got, expected, **tolerance)


@needs_triton
@pytest.mark.parametrize("kind", ["qwen2", "qwen3"])
def test_the_step_with_the_triton_kernels_equals_the_plain_step(kind):
    from core_v1.rollout.engines.fused_decode import triton_ops

    results, plain_kv, fused_kv = _plain_and_fused(kind, triton_ops(), _triton_device(), steps=2)
    for plain, fused in results:
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fused_kv, plain_kv, rtol=1e-5, atol=1e-5)


# ---- the engine ------------------------------------------------------------------------------


def test_bad_fused_decode_settings_are_one_error_naming_the_fix(tiny_model_path):
    with pytest.raises(RolloutError, match="fused_decode must be one of off, compile, triton, got 'on'"):
        HFEngine(tiny_model_path, device="cpu", fused_decode="on")
    with pytest.raises(RolloutError, match="runs on the slots runner; set kv_cache='slots'"):
        HFEngine(tiny_model_path, device="cpu", kv_cache="dynamic", fused_decode="compile")
    with pytest.raises(RolloutError, match="fused_decode='triton' needs a CUDA device.*use fused_decode='compile'"):
        HFEngine(tiny_model_path, device="cpu", fused_decode="triton")


PROMPTS = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19, 20], [30, 31, 32, 33]]
# One budget and no EOS: every row runs the whole way, so the batch keeps one shape (one compile).
GREEDY = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
SEEDED = [SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True, seed=100 + i) for i in range(len(PROMPTS))]


@pytest.fixture(scope="module")
def fused_model_path(tmp_path_factory) -> str:
    """A tiny Qwen2 of head size 16 (the Triton kernels' smallest), saved for from_pretrained."""
    path = tmp_path_factory.mktemp("fused_qwen2")
    _tiny("qwen2").save_pretrained(path)
    return str(path)


def _noisy_weights(path: str) -> list[tuple[str, torch.Tensor]]:
    """Every parameter of the saved model plus noise: a 'trained' policy."""
    generator = torch.Generator().manual_seed(1)
    model = Qwen2ForCausalLM.from_pretrained(path)
    return [
        (name, p.detach() + 0.5 * torch.randn(p.shape, generator=generator)) for name, p in model.named_parameters()
    ]


def _generate_update_and_generate(path: str, device: str, fused_decode: str) -> tuple[list, list]:
    server = LLMServer.from_model(path, device=device, kv_cache="slots", fused_decode=fused_decode)

    async def generate_all():
        outputs = await asyncio.gather(
            *(server.generate(f"g{i}", p, GREEDY) for i, p in enumerate(PROMPTS)),
            *(server.generate(f"s{i}", p, SEEDED[i]) for i, p in enumerate(PROMPTS)),
        )
        return [o.token_ids for o in outputs]

    async def scenario():
        before = await generate_all()
        await server.engine.sleep()
        await server.engine.wake_up()
        await server.engine.update_weights(_noisy_weights(path), version=1)
        return before, await generate_all()

    try:
        assert type(server.engine.runner).__name__ == "SlotRunner"
        assert server.engine.runner.fused_decode == fused_decode
        return asyncio.run(scenario())
    finally:
        server.shutdown()


_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.slow
@pytest.mark.parametrize(
    "device, mode",
    [("cpu", "compile"), pytest.param("cuda", "compile", marks=_CUDA), pytest.param("cuda", "triton", marks=_CUDA)],
)
def test_fused_greedy_and_seeded_tokens_equal_the_unfused_ones_for_every_request(fused_model_path, device, mode):
    plain = _generate_update_and_generate(fused_model_path, device, "off")
    fused = _generate_update_and_generate(fused_model_path, device, mode)
    assert fused == plain
    assert plain[0] != plain[1]  # the update changed the tokens: the compiled step reads the new weights
