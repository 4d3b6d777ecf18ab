"""Tiny local models and reference computations shared by the rollout tests."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

EOS = 1
VOCAB = 96
# The engines run here; references stay on the CPU. RLBRIDGE_TEST_DEVICE=cuda runs the same tests on a GPU.
DEVICE = os.environ.get("RLBRIDGE_TEST_DEVICE", "cpu")


def make_tiny_qwen2(path, seed: int = 0) -> None:
    """A ~25k-parameter Qwen2 with EOS id 1, saved so the engine's real from_pretrained runs."""
    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=0, eos_token_id=EOS, pad_token_id=0, tie_word_embeddings=False)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(path)


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory):
    torch.set_num_threads(1)
    path = tmp_path_factory.mktemp("tiny_qwen2")
    make_tiny_qwen2(path)
    return str(path)


@pytest.fixture(scope="module")
def reference_model(tiny_model_path):
    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


def reference_greedy(model, prompt: list[int], max_new_tokens: int) -> list[int]:
    """transformers' own greedy generate for one unpadded prompt, stopping at EOS."""
    with torch.inference_mode():
        out = model.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=EOS, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def reference_log_probs(model, prompt: list[int], tokens: list[int], temperature: float = 1.0) -> list[float]:
    """log_softmax(logits / temperature) of a full forward at each generated token."""
    with torch.inference_mode():
        logits = model(torch.tensor([prompt + tokens])).logits[0].float()
    log_probs = torch.log_softmax(logits / temperature, dim=-1)
    return [log_probs[len(prompt) - 1 + i, token].item() for i, token in enumerate(tokens)]


def perturbed_weights(model, scale: float = 0.5, seed: int = 1) -> list[tuple[str, torch.Tensor]]:
    """Every parameter plus noise: a 'trained' policy for update_weights tests."""
    generator = torch.Generator().manual_seed(seed)
    return [(name, p.detach() + scale * torch.randn(p.shape, generator=generator)) for name, p in model.named_parameters()]


async def wait_until(predicate, timeout: float = 30.0) -> None:
    """Poll `predicate` (the engine runs on its own thread) until true or fail the test."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.002)
