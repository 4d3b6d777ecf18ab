"""Fixtures for the rollout tests: a tiny local Qwen2 and references computed by transformers.

Engine tests run on every device here (cpu, and cuda when a GPU is visible) and with both KV
runners of the hf engine ("dynamic": transformers' forward; "slots": fixed KV slots, the layers
run directly, CUDA graphs on a GPU); the references stay on the CPU.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

EOS = 1


_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.fixture(scope="session", params=["cpu", pytest.param("cuda", marks=_CUDA)])
def device(request) -> str:
    return request.param


@pytest.fixture(params=["dynamic", "slots"])
def kv_cache(request) -> str:
    """The hf engine's KV runner under test."""
    return request.param


@pytest.fixture
def engine_kwargs(device, kv_cache) -> dict:
    """Keyword arguments for `LLMServer.from_model` with the device and runner under test."""
    return {"device": device, "kv_cache": kv_cache}


@pytest.fixture(scope="module")
def tiny_model_path(tmp_path_factory) -> str:
    """A ~25k-parameter Qwen2 with EOS id 1, saved so the engine's real from_pretrained runs."""
    torch.set_num_threads(1)
    config = Qwen2Config(
        vocab_size=96,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        bos_token_id=0,
        eos_token_id=EOS,
        pad_token_id=0,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("tiny_qwen2")
    Qwen2ForCausalLM(config).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def reference_model(tiny_model_path):
    """The same weights loaded by transformers, on the CPU; tests must not modify it."""
    return AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()


@pytest.fixture(scope="module")
def greedy_reference(reference_model) -> Callable[[list[int], int], list[int]]:
    """transformers' own greedy `generate` for one unpadded prompt, stopping at EOS."""

    def generate(prompt: list[int], max_new_tokens: int) -> list[int]:
        with torch.inference_mode():
            out = reference_model.generate(
                torch.tensor([prompt]),
                max_new_tokens=max_new_tokens,
                do_sample=False,
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                eos_token_id=EOS,
                pad_token_id=0,
            )
        return out[0, len(prompt) :].tolist()

    return generate


@pytest.fixture(scope="module")
def log_prob_reference(reference_model) -> Callable[..., list[float]]:
    """log_softmax(logits / temperature) of a full forward at each generated token (of `model`,
    default the reference model)."""

    def log_probs(prompt: list[int], tokens: list[int], temperature: float = 1.0, model=None) -> list[float]:
        with torch.inference_mode():
            logits = (model or reference_model)(torch.tensor([prompt + tokens])).logits[0].float()
        table = torch.log_softmax(logits / temperature, dim=-1)
        return [table[len(prompt) - 1 + i, token].item() for i, token in enumerate(tokens)]

    return log_probs


@pytest.fixture
def new_weights(reference_model) -> list[tuple[str, torch.Tensor]]:
    """Every parameter plus noise: a 'trained' policy for update_weights tests."""
    generator = torch.Generator().manual_seed(1)
    return [
        (name, p.detach() + 0.5 * torch.randn(p.shape, generator=generator))
        for name, p in reference_model.named_parameters()
    ]


@pytest.fixture
def new_model(tiny_model_path, new_weights):
    """A CPU model holding `new_weights`."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model_path).eval()
    model.load_state_dict(dict(new_weights))
    return model


@pytest.fixture(scope="session")
def wait_until() -> Callable:
    """`await wait_until(predicate)`: poll (the engine runs on its own thread) or fail the test."""

    async def wait(predicate: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("condition not reached in time")
            await asyncio.sleep(0.002)

    return wait
