"""The fused CUDA sampler draws the tokens the tensor-operation sampler draws.

Runs on a CUDA device with Triton, or on the CPU under Triton's interpreter
(`TRITON_INTERPRET=1` with triton installed); skipped elsewhere (the CPU CI has no Triton).
"""

from __future__ import annotations

import os

import pytest
import torch

from core_v1.rollout.engines.sampling import SamplingRows, sample, sample_unfused
from core_v1.rollout.types import SamplingParams

triton = pytest.importorskip("triton")
if torch.cuda.is_available():
    DEVICE = "cuda"
elif os.environ.get("TRITON_INTERPRET") == "1":
    DEVICE = "cpu"
else:
    pytest.skip("the fused sampler needs CUDA (or TRITON_INTERPRET=1)", allow_module_level=True)

from core_v1.rollout.engines.fused_sampling import fused_sample  # noqa: E402


def _rows(params, vocab, positions=None, seeds=None):
    positions = positions if positions is not None else list(range(len(params)))
    seeds = seeds if seeds is not None else [1000 + i for i in range(len(params))]
    return SamplingRows.build(params, positions, seeds, vocab, DEVICE)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("vocab", [5, 3000, 40_000])
def test_fused_draws_equal_the_tensor_sampler(dtype, vocab):
    torch.manual_seed(vocab)
    params = [SamplingParams(temperature=t) for t in (1.0, 0.7, 1.3, 0.0)] * 6
    logits = (3 * torch.randn(len(params), vocab)).to(dtype).to(DEVICE)
    rows = _rows(params, vocab)
    tokens, log_probs = fused_sample(logits, rows)
    expected_tokens, expected_log_probs = sample_unfused(logits, rows)
    assert torch.equal(tokens.cpu(), expected_tokens.cpu())
    torch.testing.assert_close(log_probs.cpu(), expected_log_probs.cpu(), rtol=1e-5, atol=1e-5)


def test_fused_draws_follow_seed_and_position_and_respect_filters():
    vocab = 3000
    torch.manual_seed(0)
    logits = torch.randn(1, vocab).repeat(64, 1).to(DEVICE)
    params = [SamplingParams(top_k=5)] * 32 + [SamplingParams(top_p=0.5)] * 32
    rows = _rows(params, vocab, positions=[i % 8 for i in range(64)], seeds=[7] * 64)
    support = torch.div(logits, rows.temperature[:, None])
    from core_v1.rollout.engines.sampling import _filter_top_k_top_p

    filtered = _filter_top_k_top_p(support, rows.top_k, rows.top_p)
    tokens, log_probs = fused_sample(logits, rows, filtered)
    expected_tokens, expected_log_probs = sample_unfused(logits, rows)
    assert torch.equal(tokens.cpu(), expected_tokens.cpu())
    torch.testing.assert_close(log_probs.cpu(), expected_log_probs.cpu(), rtol=1e-5, atol=1e-5)
    top5 = set(logits[0].topk(5).indices.tolist())
    assert set(tokens[:32].tolist()) <= top5
    # same seed and position -> same token, whatever row it sits in
    assert tokens[0] == tokens[8] == tokens[16]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="dispatch to the fused kernel happens on CUDA")
def test_sample_on_cuda_uses_the_fused_kernel_and_captures_in_a_graph():
    vocab = 40_000
    logits = torch.randn(8, vocab, device="cuda")
    rows = _rows([SamplingParams()] * 8, vocab)
    eager = sample(logits, rows)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = sample(logits, rows)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0])
    assert torch.equal(captured[0], sample_unfused(logits, rows)[0])
