"""Fixtures for the worker tests: a tiny Qwen2 saved with `save_pretrained`, configs, and batches.

The batches follow docs/CONTRACTS.md: left-padded prompts, right-padded responses, and a
`response_mask` with a tool-observation gap (zeros inside the response) in one row.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, NonTensorStack, TensorDict
from transformers import Qwen2Config, Qwen2ForCausalLM

from core_v1.config import load_config

VOCAB_SIZE = 64


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    # The CI machine has 2 cores shared with other test processes.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A randomly initialised 2-layer Qwen2 (hidden size 32, vocab 64) with tied embeddings."""
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
    )
    directory = tmp_path_factory.mktemp("tiny_qwen2")
    Qwen2ForCausalLM(config).save_pretrained(directory)
    return str(directory)


@pytest.fixture
def make_config(tiny_model_dir):
    """`make_config(*overrides)`: a `PPOConfig` for the tiny model, 8 trajectories per step."""

    def build(*overrides: str):
        return load_config(
            [
                f"actor_rollout_ref.model.path={tiny_model_dir}",
                "data.train_files=unused.parquet",
                "data.train_batch_size=8",
                "actor_rollout_ref.actor.ppo_mini_batch_size=8",
                "actor_rollout_ref.actor.optim.lr=1e-3",
                "critic.optim.lr=1e-3",
                *overrides,
            ]
        )

    return build


@pytest.fixture
def make_batch():
    """`make_batch(rows, prompt_length, response_length, seed)`: see `build_batch`."""
    return build_batch


def build_batch(rows: int = 8, prompt_length: int = 5, response_length: int = 6, seed: int = 0) -> TensorDict:
    """A padded training batch with every stage field the actor and critic read."""
    generator = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(1, prompt_length + 1, (rows,), generator=generator)
    response_lengths = torch.randint(1, response_length + 1, (rows,), generator=generator)
    prompt_lengths[0], response_lengths[0] = prompt_length, response_length  # one row without padding
    columns = torch.arange(prompt_length + response_length)
    prompt_mask = columns[:prompt_length] >= (prompt_length - prompt_lengths)[:, None]
    response_mask = columns[:response_length] < response_lengths[:, None]
    tokens = torch.randint(1, VOCAB_SIZE, (rows, prompt_length + response_length), generator=generator)
    attention_mask = torch.cat([prompt_mask, response_mask], dim=1).long()
    input_ids = torch.where(attention_mask.bool(), tokens, torch.zeros_like(tokens))
    position_ids = (attention_mask.cumsum(dim=-1) - 1).clamp(min=0)
    loss_mask = response_mask.clone()
    if rows > 1 and response_lengths[1] >= 3:
        loss_mask[1, 1] = False  # a tool-observation token inside the response
    shape = (rows, response_length)
    batch = TensorDict(
        {
            "prompts": input_ids[:, :prompt_length],
            "responses": input_ids[:, prompt_length:],
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "response_mask": loss_mask.long(),
            "old_log_probs": torch.zeros(shape),
            "advantages": torch.randn(shape, generator=generator),
            "returns": torch.randn(shape, generator=generator),
            "values": torch.zeros(shape),
        },
        batch_size=[rows],
    )
    # Trainer batches carry per-row Python columns too; the engines must pass them by.
    batch["uid"] = NonTensorStack(
        *(NonTensorData(f"prompt-{row // 2}") for row in range(rows)), batch_size=batch.batch_size
    )
    return batch
