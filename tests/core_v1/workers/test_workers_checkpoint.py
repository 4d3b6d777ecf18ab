"""Checkpoints restore weights, optimizer, schedule and RNG exactly; synced weights load strictly."""

import copy
import multiprocessing
import os

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

from core_v1.utils.durable import FAULT_ENV, FAULT_EXIT_CODE
from core_v1.workers import ActorEngine, CriticEngine, WorkerConfigError

ACTOR_OVERRIDES = (
    "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=1",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=3",
)


def policy_batch(actor, make_batch, seed):
    batch = make_batch(seed=seed)
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    return batch


def test_actor_checkpoint_reproduces_weights_optimizer_and_the_next_update(make_config, make_batch, tmp_path):
    config = make_config(*ACTOR_OVERRIDES)
    original = ActorEngine(config)
    original.set_total_training_steps(5)
    for seed in range(2):
        original.update_policy(policy_batch(original, make_batch, seed))
    original.save_checkpoint(tmp_path / "step_2")
    saved_optimizer_state = copy.deepcopy(original.optimizer.state_dict())
    expected_sample = torch.rand(3)  # the RNG state after saving must come back too
    expected_metrics = original.update_policy(policy_batch(original, make_batch, 2))

    resumed = ActorEngine(config)
    resumed.set_total_training_steps(5)
    resumed.load_checkpoint(tmp_path / "step_2")
    assert torch.equal(torch.rand(3), expected_sample)
    restored_optimizer_state = resumed.optimizer.state_dict()
    for restored, saved in zip(restored_optimizer_state["param_groups"], saved_optimizer_state["param_groups"]):
        assert {**restored, "betas": tuple(restored["betas"])} == saved  # the file stores betas as a list
    for index, state in saved_optimizer_state["state"].items():
        assert int(state["step"]) == 2
        for key in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(restored_optimizer_state["state"][index][key], state[key]), (index, key)
    metrics = resumed.update_policy(policy_batch(resumed, make_batch, 2))

    assert metrics == expected_metrics
    for (name, p), q in zip(resumed.model.named_parameters(), original.model.parameters()):
        assert torch.equal(p, q), name


def test_a_checkpoint_model_directory_loads_with_from_pretrained(make_config, make_batch, tmp_path):
    actor = ActorEngine(make_config())
    actor.update_policy(policy_batch(actor, make_batch, 0))
    actor.save_checkpoint(tmp_path / "ckpt")
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "model")
    for name, tensor in reloaded.state_dict().items():
        assert torch.equal(tensor, actor.model.state_dict()[name]), name


def test_saving_again_replaces_the_checkpoint_and_leaves_no_staging(make_config, make_batch, tmp_path):
    actor = ActorEngine(make_config())
    actor.save_checkpoint(tmp_path / "latest")
    actor.update_policy(policy_batch(actor, make_batch, 0))
    actor.save_checkpoint(tmp_path / "latest")
    assert os.listdir(tmp_path) == ["latest"]
    assert sorted(os.listdir(tmp_path / "latest")) == ["extra_state.pt", "model", "sharded"]
    assert torch.load(tmp_path / "latest" / "extra_state.pt", weights_only=True)["lr_scheduler"]["last_epoch"] == 1


def _save_with_fault(actor, directory, point):
    os.environ[FAULT_ENV] = point
    actor.save_checkpoint(directory)


@pytest.mark.parametrize(
    "point, survivor", [("rank.staged", "old"), ("rank.old_moved", "old"), ("rank.renamed", "new")]
)
def test_a_fault_while_saving_over_a_checkpoint_leaves_one_that_loads(
    make_config, make_batch, tmp_path, point, survivor
):
    """Saving again over `latest`, ended (os._exit) at each point of the replacement: the folder loads,
    with the old weights until the new folder is renamed in and the new ones after."""
    config = make_config()
    actor = ActorEngine(config)
    actor.save_checkpoint(tmp_path / "latest")
    weights = {"old": copy.deepcopy(actor.model.state_dict())}
    actor.update_policy(policy_batch(actor, make_batch, 0))
    weights["new"] = copy.deepcopy(actor.model.state_dict())
    child = multiprocessing.get_context("fork").Process(
        target=_save_with_fault, args=(actor, tmp_path / "latest", point)
    )
    child.start()
    child.join(120)
    assert child.exitcode == FAULT_EXIT_CODE

    resumed = ActorEngine(config)
    resumed.load_checkpoint(tmp_path / "latest")
    for name, tensor in resumed.model.state_dict().items():
        assert torch.equal(tensor, weights[survivor][name]), name
    resumed.save_checkpoint(tmp_path / "latest")  # and the next save leaves nothing else behind
    assert os.listdir(tmp_path) == ["latest"]


def test_loading_a_missing_checkpoint_names_it(make_config, tmp_path):
    actor = ActorEngine(make_config())
    with pytest.raises(WorkerConfigError, match="does not exist"):
        actor.load_checkpoint(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(WorkerConfigError, match="has no extra_state.pt"):
        actor.load_checkpoint(tmp_path / "empty")


def test_critic_checkpoint_reproduces_the_next_update(make_config, make_batch, tmp_path):
    config = make_config()
    original = CriticEngine(config)
    batch = make_batch()
    original.update_critic(batch)
    original.save_checkpoint(tmp_path / "critic")
    expected = original.update_critic(batch)
    assert isinstance(AutoModelForTokenClassification.from_pretrained(tmp_path / "critic" / "model"), torch.nn.Module)

    resumed = CriticEngine(config)
    resumed.load_checkpoint(tmp_path / "critic")
    assert resumed.update_critic(batch) == expected


def test_synced_weights_load_strictly_into_a_fresh_model(make_config, make_batch, tiny_model_dir):
    actor = ActorEngine(make_config())
    batch = policy_batch(actor, make_batch, 0)
    actor.update_policy(batch)

    fresh = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    fresh.load_state_dict(dict(actor.named_parameters_for_sync()), strict=True)

    with torch.no_grad():
        inputs = {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids")}
        torch.testing.assert_close(fresh.eval()(**inputs).logits, actor.model.eval()(**inputs).logits)
    untrained = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert not torch.equal(untrained.model.embed_tokens.weight, fresh.model.embed_tokens.weight)
