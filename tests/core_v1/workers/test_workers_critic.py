"""The critic update: the clipped value loss falls towards a fixed target."""

import pytest
import torch

from core_v1.workers import CriticEngine


def test_critic_updates_reduce_the_value_loss_on_a_fixed_target(make_config, make_batch):
    critic = CriticEngine(
        make_config("critic.cliprange_value=100", "critic.ppo_micro_batch_size_per_gpu=4", "critic.optim.lr=3e-3")
    )
    batch = make_batch()
    batch["returns"] = torch.full_like(batch["returns"], 2.0)
    losses = []
    for _ in range(6):
        batch["values"] = critic.compute_values(batch)
        metrics = critic.update_critic(batch)
        losses.append(metrics["critic/vf_loss"])
    assert losses[-1] < 0.5 * losses[0]
    assert set(metrics) >= {
        "critic/vf_loss",
        "critic/vf_clipfrac",
        "critic/vpred_mean",
        "critic/grad_norm",
        "critic/lr",
    }
    assert metrics["critic/vpred_mean"] > batch["values"][batch["response_mask"].bool()].mean() - 1e-3


def test_value_clipping_is_reported(make_config, make_batch):
    critic = CriticEngine(make_config("critic.cliprange_value=0.0"))
    batch = make_batch()
    # The prediction moved 1.0 from the old value towards a return 5.0 away: with no clip range the
    # clipped term (old value vs return) is the larger one at every valid token.
    batch["values"] = critic.compute_values(batch) - 1.0
    batch["returns"] = batch["values"] + 5.0
    metrics = critic.update_critic(batch)
    assert metrics["critic/vf_clipfrac"] == pytest.approx(1.0)
