"""Micro-batches by token budget (`use_dynamic_bsz`) compute what row micro-batches compute."""

from __future__ import annotations

import pytest
import torch

from core_v1.workers import ActorEngine, CriticEngine, WorkerConfigError
from core_v1.workers.training import TokenBudget, micro_batch_indices

DYNAMIC = (
    "actor_rollout_ref.actor.use_dynamic_bsz=true",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=24",
)


def test_token_budget_groups_hold_every_row_once_within_the_budget(make_batch):
    batch = make_batch(rows=8, seed=1)
    lengths = batch["attention_mask"].sum(-1)
    groups = micro_batch_indices(batch, TokenBudget(24, "key"))
    assert sorted(torch.cat(groups).tolist()) == list(range(8))
    assert all(lengths[group].sum() <= 24 for group in groups)
    assert len(groups) >= -(-int(lengths.sum()) // 24) and len(groups) < 8  # fewer than one row each


def test_dynamic_micro_batches_match_row_micro_batches(make_config, make_batch):
    batch = make_batch(rows=8, seed=2)
    by_rows = ActorEngine(make_config("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=8"))
    by_tokens = ActorEngine(make_config(*DYNAMIC))
    log_probs, _ = by_rows.compute_log_prob(batch)
    torch.testing.assert_close(by_tokens.compute_log_prob(batch)[0], log_probs)  # rows back in order
    batch["old_log_probs"] = log_probs
    expected, got = by_rows.update_policy(batch), by_tokens.update_policy(batch)
    assert got["actor/pg_loss"] == pytest.approx(expected["actor/pg_loss"], rel=1e-5, abs=1e-7)
    for (name, a), (_, b) in zip(by_rows.model.named_parameters(), by_tokens.model.named_parameters()):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)


def test_critic_values_by_token_budget(make_config, make_batch):
    batch = make_batch(rows=8, seed=3)
    plain = CriticEngine(make_config())
    dynamic = CriticEngine(make_config("critic.use_dynamic_bsz=true", "critic.forward_max_token_len_per_gpu=20"))
    dynamic.model.load_state_dict(plain.model.state_dict())
    torch.testing.assert_close(dynamic.compute_values(batch), plain.compute_values(batch))


def test_a_row_longer_than_the_budget_names_the_key(make_config, make_batch):
    actor = ActorEngine(
        make_config(
            "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=true",
            "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=4",
        )
    )
    with pytest.raises(WorkerConfigError, match="log_prob_max_token_len_per_gpu=4"):
        actor.compute_log_prob(make_batch(rows=4))
