"""Micro-batches are cut to their own longest row: fewer columns, the same numbers."""

from __future__ import annotations

import torch

from core_v1.workers import ActorEngine
from core_v1.workers.training import trim_padding


def test_trim_cuts_only_columns_every_row_pads(make_batch):
    batch = make_batch(rows=8, prompt_length=5, response_length=6, seed=4)
    short = batch[2:4]  # rows shorter than the batch's longest prompt and response
    trimmed = trim_padding(short)
    mask = short["attention_mask"]
    assert trimmed["attention_mask"].sum() == mask.sum()  # no real token lost
    assert trimmed["input_ids"].shape[1] < short["input_ids"].shape[1]
    assert trimmed["responses"].shape[1] == trimmed["response_mask"].shape[1] == trimmed["advantages"].shape[1]
    kept = trim_padding(short, keep_response_width=True)
    assert kept["responses"].shape[1] == short["responses"].shape[1]
    full_row = batch[0:1]  # row 0 has no padding: nothing to cut
    assert trim_padding(full_row) is full_row


def test_trimmed_micro_batches_give_the_untrimmed_log_probs(make_config, make_batch):
    batch = make_batch(rows=8, seed=5)
    actor = ActorEngine(make_config("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2"))
    micro_batched, _ = actor.compute_log_prob(batch)
    with torch.no_grad():
        from core_v1.workers.model import response_log_probs

        whole, _ = response_log_probs(actor.model.eval(), batch, temperature=1.0)
    real = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
    torch.testing.assert_close(micro_batched[real], whole[real], rtol=1e-5, atol=1e-6)
    assert (micro_batched[~real] == 0).all()
