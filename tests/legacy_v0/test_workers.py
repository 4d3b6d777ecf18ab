"""The V0 workers on the real engines and the in-process rollout server (tiny local model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core_v1.agent_loop.base import encode_chat
from legacy_v0.protocol import DataProto, object_column
from legacy_v0.workers import ActorRolloutRefWorker, CriticWorker, WorkerStateError, left_pad, request_seed
from core_v1.utils.seeding import derive_seed

PROMPTS = [
    [{"role": "user", "content": "1 + 2 ="}],
    [{"role": "user", "content": "4 + 4 ="}],
    [{"role": "user", "content": "0 + 3 ="}],
]


@pytest.fixture(scope="module")
def worker(tiny_assets, tmp_path_factory):
    from core_v1.config import load_config
    from tests.legacy_v0.conftest import small_run_overrides

    config = load_config(
        small_run_overrides(
            tiny_assets, tmp_path_factory.mktemp("w"), 2, "actor_rollout_ref.rollout.response_length=6"
        ),
        config_name="quickstart",
    )
    worker = ActorRolloutRefWorker(config, role="actor_rollout")
    worker.init_model()
    worker.set_total_training_steps(2)
    yield worker
    worker.shutdown()


def prompt_batch(worker, uids, sessions, prompts=PROMPTS) -> DataProto:
    ids = [encode_chat(worker.tokenizer, p) for p in prompts]
    input_ids, attention_mask = left_pad(ids, worker.pad_token_id)
    return DataProto.from_dict(
        tensors={
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        },
        non_tensors={
            "raw_prompt_ids": object_column(ids),
            "uid": object_column(uids),
            "session_id": object_column(sessions),
        },
    )


def real_responses(data: DataProto) -> list[list[int]]:
    width = data.batch["prompts"].shape[1]
    masks = data.batch["attention_mask"][:, width:]
    return [row[mask.bool()].tolist() for row, mask in zip(data.batch["responses"], masks)]


def test_request_seed_is_the_v1_seed_chain():
    # AgentLoopManager: session seed = derive_seed(run seed, uid, s); the recording client: call k of it.
    assert request_seed(7, "abc", 2) == derive_seed(derive_seed(7, "abc", 2), 0)
    assert request_seed(7, "abc", 2) != request_seed(7, "abc", 3)


def test_generate_sequences_returns_the_contract_layout(worker):
    out = worker.generate_sequences(prompt_batch(worker, ["a", "b", "c"], [0, 0, 0]))
    batch = out.batch
    width = batch["prompts"].shape[1]
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], dim=1))
    prompt_mask, response_mask = batch["attention_mask"][:, :width], batch["attention_mask"][:, width:]
    assert torch.all(prompt_mask[:, -1] == 1) and torch.all(response_mask[:, 0] == 1)  # left / right padding
    assert torch.equal(batch["position_ids"], (batch["attention_mask"].cumsum(-1) - 1).clamp(min=0))
    assert torch.equal(batch["response_mask"], response_mask)
    assert batch["rollout_log_probs"].shape == batch["responses"].shape
    assert batch["responses"].shape[1] <= 6 and torch.all(batch["rollout_log_probs"][response_mask == 0] == 0)


def test_each_sample_depends_on_uid_and_session_not_on_its_batch(worker):
    first = real_responses(worker.generate_sequences(prompt_batch(worker, ["a", "b", "c"], [0, 1, 0])))
    reordered = real_responses(
        worker.generate_sequences(prompt_batch(worker, ["c", "b", "a"], [0, 1, 0], prompts=PROMPTS[::-1]))
    )
    assert reordered[::-1] == first
    others = [
        real_responses(worker.generate_sequences(prompt_batch(worker, ["a", "b", "c"], [s, s, s]))) for s in (5, 6, 7)
    ]
    assert any(o != first for o in others)


def test_greedy_meta_info_decodes_the_argmax(worker):
    batch = prompt_batch(worker, ["a", "b", "c"], [0, 0, 0])
    batch.meta_info["do_sample"] = False
    greedy = worker.generate_sequences(batch)
    log_probs, _ = worker.actor.compute_log_prob(greedy.batch)
    # Greedy log-probs are of the untempered logits; quickstart samples at temperature 1.0 too.
    mask = greedy.batch["response_mask"].bool()
    assert torch.allclose(greedy.batch["rollout_log_probs"][mask], log_probs[mask], atol=1e-4)


def test_update_actor_syncs_the_rollout_weights(worker):
    batch = worker.generate_sequences(prompt_batch(worker, ["a", "b", "c"], [0, 0, 0]))
    batch.union(worker.compute_log_prob(batch))
    assert set(batch.batch.keys()) >= {"old_log_probs", "entropys"}
    generator = torch.Generator().manual_seed(0)
    batch.batch["advantages"] = torch.randn(batch.batch["responses"].shape, generator=generator)
    metrics = worker.update_actor(batch).meta_info["metrics"]
    assert {"actor/pg_loss", "actor/grad_norm", "weight_sync/bytes"} <= set(metrics)
    after = worker.compute_log_prob(batch).batch["old_log_probs"]
    assert not torch.allclose(after, batch.batch["old_log_probs"])  # the policy moved
    # A fresh rollout samples from the updated weights: its log-probs are the actor's.
    fresh = worker.generate_sequences(prompt_batch(worker, ["d", "e", "f"], [0, 0, 0]))
    mask = fresh.batch["response_mask"].bool()
    recomputed = worker.compute_log_prob(fresh).batch["old_log_probs"]
    assert torch.allclose(fresh.batch["rollout_log_probs"][mask], recomputed[mask], atol=1e-4)


def test_methods_need_init_model_and_the_right_role(small_config):
    config = small_config(1)
    with pytest.raises(WorkerStateError, match="init_model"):
        ActorRolloutRefWorker(config).compute_log_prob(DataProto())
    with pytest.raises(ValueError, match="role 'critic' is not one of"):
        ActorRolloutRefWorker(config, role="critic")
    ref = ActorRolloutRefWorker(config, role="ref")
    ref.init_model()
    with pytest.raises(WorkerStateError, match="holds no rollout"):
        ref.generate_sequences(DataProto())
    with pytest.raises(WorkerStateError, match="init_model"):
        CriticWorker(config).compute_values(DataProto())


def test_critic_worker_scores_and_trains(small_config, worker):
    critic = CriticWorker(small_config(1, "algorithm.adv_estimator=gae"))
    critic.init_model()
    critic.set_total_training_steps(1)
    batch = worker.generate_sequences(prompt_batch(worker, ["a", "b", "c"], [0, 0, 0]))
    values = critic.compute_values(batch).batch["values"]
    assert values.shape == batch.batch["responses"].shape
    assert torch.all(values[batch.batch["response_mask"] == 0] == 0)
    batch.batch["values"] = values
    batch.batch["returns"] = torch.ones_like(values)
    metrics = critic.update_critic(batch).meta_info["metrics"]
    assert np.isfinite(metrics["critic/vf_loss"]) and "critic/grad_norm" in metrics


def test_save_checkpoint_copies_to_hdfs_path_as_verl_passes_it(small_config, worker, tmp_path):
    """verl's trainer passes `<default_hdfs_dir>/global_step_<N>/actor` (and critic) as `hdfs_path`;
    a local or file:// path gets a copy of the saved folder."""
    worker.save_checkpoint(str(tmp_path / "local" / "actor"), str(tmp_path / "remote" / "global_step_1" / "actor"))
    critic = CriticWorker(small_config(1, "algorithm.adv_estimator=gae"))
    critic.init_model()
    critic.save_checkpoint(str(tmp_path / "local" / "critic"), f"file://{tmp_path}/remote/global_step_1/critic")
    for role in ("actor", "critic"):
        saved = sorted(p.relative_to(tmp_path / "local" / role) for p in (tmp_path / "local" / role).rglob("*"))
        copied = tmp_path / "remote" / "global_step_1" / role
        assert saved and sorted(p.relative_to(copied) for p in copied.rglob("*")) == saved, role
