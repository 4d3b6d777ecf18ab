"""A rank keeps the padded batch it read and the outputs it wrote onto it (`core_v1.batch.held`): the
next stage's read of the same rows is that batch, equal to what a store read returns, without a
store read; a write onto the rows by anyone else sends the next read to the store again."""

from __future__ import annotations

import torch

from core_v1.batch.layout import read_training_batch
from core_v1.trainer.off_policy import correction_config, rollout_correction_stage
from core_v1.transfer_store import make_transfer_store, trajectory_key, traffic
from core_v1.workers.rank import RankTask, RankWorker

PROMPTS = [[5, 6], [7], [8, 9, 10], [3]]
RESPONSES = [[1, 2, 3], [4], [5, 6], [7, 8]]


class _Actor:
    """Log-probs that depend on the tokens; records the batches it was given."""

    def __init__(self):
        self.seen = []

    def compute_log_prob(self, batch, calculate_entropy=False):
        self.seen.append(batch)
        return -batch["responses"].float() / 10, batch["responses"].float() / 7

    def update_policy(self, batch):
        self.seen.append(batch)
        return {"loss": float((batch["old_log_probs"] * batch["rollout_is_weights"]).sum())}


def _rank_and_keys():
    store = make_transfer_store("local")
    keys = [trajectory_key("cd" * 8, session) for session in range(len(PROMPTS))]
    store.put(
        "step",
        {
            key: {
                "prompt_ids": torch.tensor(p),
                "response_ids": torch.tensor(r),
                "response_mask": torch.ones(len(r), dtype=torch.long),
                "response_logprobs": -torch.tensor(r, dtype=torch.float32) / 9,
            }
            for key, p, r in zip(keys, PROMPTS, RESPONSES)
        },
    )
    worker = RankWorker(config=None, store=store, rank=0, world_size=1, device_type="cpu")
    worker.roles = {"actor": _Actor()}
    return worker, keys


def _assert_same(kept, read):
    assert list(kept.keys()) == list(read.keys())
    for name in read.keys():
        assert kept[name].dtype == read[name].dtype and torch.equal(kept[name], read[name]), name


def _gets():
    return traffic.snapshot()["gets"]


def test_a_step_s_later_stages_read_the_kept_batch_which_equals_a_store_read():
    worker, keys = _rank_and_keys()
    order = [keys[2], keys[0], keys[3], keys[1]]
    worker.run(
        RankTask(
            "actor",
            "compute_log_prob",
            "step",
            order,
            (False,) * 4,
            ("response_logprobs",),
            outputs=("old_log_probs", "entropys"),
        ),
        {},
    )
    correction = correction_config({"rollout_is": "token", "rollout_rs": "token_k1", "rollout_rs_threshold": 0.05})
    stage_task = RankTask(
        "",
        "",
        "step",
        order,
        (False,) * 4,
        ("old_log_probs", "response_logprobs"),
        outputs=("rollout_is_weights", "response_mask"),
    )
    before = _gets()
    worker.run_stage(stage_task, rollout_correction_stage, {}, {"correction": correction})
    fields = ("response_logprobs", "entropys", "old_log_probs", "rollout_is_weights")
    worker.run(RankTask("actor", "update_policy", "step", order, (False,) * 4, fields, train=True), {})
    assert _gets() == before, "both reads came from the kept batch"
    kept = worker.roles["actor"].seen[-1]
    _assert_same(kept, read_training_batch(worker.store, "step", order, pad_token_id=0, fields=fields))
    assert kept["response_mask"].sum() < sum(map(len, RESPONSES)), "the correction's mask (tokens rejected) is read"


def test_a_write_by_anyone_else_sends_the_next_read_to_the_store():
    worker, keys = _rank_and_keys()
    task = RankTask("actor", "compute_log_prob", "step", keys, (False,) * 4, outputs=("old_log_probs",))
    worker.run(task, {})
    worker.store.add_fields("step", {keys[1]: {"old_log_probs": torch.tensor([9.0])}}, overwrite=True)
    before = _gets()
    batch = worker.rows.read("step", keys, pad_token_id=0, fields=("old_log_probs",))
    assert _gets() == before + 1 and batch["old_log_probs"][1, 0].item() == 9.0


def test_a_shard_with_padding_rows_or_another_order_reads_the_store():
    worker, keys = _rank_and_keys()
    worker.run(RankTask("actor", "compute_log_prob", "step", keys, (False,) * 4, outputs=("old_log_probs",)), {})
    before = _gets()
    worker.rows.read("step", keys[::-1], pad_token_id=0, fields=("old_log_probs",))
    worker.rows.read("step", [keys[0], keys[0]], pad_token_id=0, fields=("old_log_probs",))
    assert _gets() == before + 2


def test_a_write_by_anyone_else_between_a_rank_s_read_and_its_own_write_is_not_hidden_by_it():
    worker, keys = _rank_and_keys()
    store = worker.store

    class Meddling(_Actor):
        def compute_log_prob(self, batch, calculate_entropy=False):
            store.add_fields("step", {keys[1]: {"response_logprobs": torch.tensor([-5.0])}}, overwrite=True)
            return super().compute_log_prob(batch)

    worker.roles = {"actor": Meddling()}
    worker.run(
        RankTask(
            "actor", "compute_log_prob", "step", keys, (False,) * 4, ("response_logprobs",), outputs=("old_log_probs",)
        ),
        {},
    )
    before = _gets()
    batch = worker.rows.read("step", keys, pad_token_id=0, fields=("response_logprobs", "old_log_probs"))
    assert _gets() == before + 1 and batch["rollout_log_probs"][1, 0].item() == -5.0
