"""LoRA on the actor (core_v1/workers/lora.py): only the adapter trains, the reference is the base
model with adapters disabled, weights leave merged, checkpoints hold the adapter and resume."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from core_v1.workers import ActorEngine, ReferenceEngine, WorkerConfigError
from core_v1.workers.lora import ADAPTER_DIRECTORY

LORA = (
    "actor_rollout_ref.model.lora_rank=4",
    "actor_rollout_ref.model.lora_alpha=8",
    "actor_rollout_ref.actor.optim.lr=1e-2",
    "actor_rollout_ref.actor.use_kl_loss=true",
)


def policy_batch(actor, make_batch, seed):
    batch = make_batch(seed=seed)
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    batch["ref_log_prob"] = batch["old_log_probs"]
    return batch


def masked_mean(values, batch):
    mask = batch["response_mask"].float()
    return float((values * mask).sum() / mask.sum())


def test_only_the_adapter_trains_and_the_update_follows_the_advantages(make_config, make_batch):
    actor = ActorEngine(make_config(*LORA))
    trainable = {name for name, p in actor.model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in name or ".lora_B." in name for name in trainable)
    assert {id(p) for group in actor.optimizer.param_groups for p in group["params"]} == {
        id(p) for name, p in actor.model.named_parameters() if name in trainable
    }
    before = {name: p.detach().clone() for name, p in actor.model.named_parameters()}
    batch = policy_batch(actor, make_batch, 0)
    batch["advantages"] = torch.ones_like(batch["advantages"])  # every sampled token was good
    start = masked_mean(actor.compute_log_prob(batch)[0], batch)
    for _ in range(3):
        actor.update_policy(batch)
    changed = {name for name, p in actor.model.named_parameters() if not torch.equal(p, before[name])}
    assert changed and changed <= trainable
    assert masked_mean(actor.compute_log_prob(batch)[0], batch) > start + 0.05


def test_the_reference_is_the_base_model_and_holds_no_weights_of_its_own(make_config, make_batch):
    config = make_config(*LORA)
    actor = ActorEngine(config)
    reference = ReferenceEngine(config, actor=actor)
    separate = ReferenceEngine(config)  # the base weights, loaded on their own
    assert reference.shares_actor and reference.model is actor.model and not separate.shares_actor
    batch = policy_batch(actor, make_batch, 0)
    for seed in range(2):
        actor.update_policy(policy_batch(actor, make_batch, seed))
    assert torch.equal(reference.compute_ref_log_prob(batch), separate.compute_ref_log_prob(batch))
    assert not torch.allclose(actor.compute_log_prob(batch)[0], reference.compute_ref_log_prob(batch))


def test_synced_weights_are_the_merged_model(make_config, make_batch):
    actor = ActorEngine(make_config(*LORA))
    actor.update_policy(policy_batch(actor, make_batch, 0))
    synced = dict(actor.named_parameters_for_sync())
    expected = copy.deepcopy(actor.model).merge_and_unload().state_dict()
    assert synced.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(synced[name], tensor, rtol=0, atol=1e-6, msg=name)
    fresh = AutoModelForCausalLM.from_pretrained(actor.model.peft_config["default"].base_model_name_or_path)
    fresh.load_state_dict(synced, strict=True)
    batch = make_batch(seed=1)
    plain = ReferenceEngine(make_config("actor_rollout_ref.actor.use_kl_loss=true"))
    plain.model = fresh.eval()
    torch.testing.assert_close(plain.compute_ref_log_prob(batch), actor.compute_log_prob(batch)[0])


def test_a_checkpoint_resumes_and_its_adapter_loads_with_lora_adapter_path(make_config, make_batch, tmp_path):
    config = make_config(*LORA)
    original = ActorEngine(config)
    original.update_policy(policy_batch(original, make_batch, 0))
    original.save_checkpoint(tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / ADAPTER_DIRECTORY / "adapter_config.json").is_file()
    expected = original.update_policy(policy_batch(original, make_batch, 1))

    resumed = ActorEngine(config)
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.update_policy(policy_batch(resumed, make_batch, 1)) == expected

    # The saved adapter starts a new run; the exported model is the merged policy.
    batch = make_batch(seed=2)
    saved = ActorEngine(make_config(*LORA))
    saved.load_checkpoint(tmp_path / "ckpt")
    from_adapter = ActorEngine(
        make_config(f"actor_rollout_ref.model.lora_adapter_path={tmp_path / 'ckpt' / ADAPTER_DIRECTORY}")
    )
    assert any(p.requires_grad for p in from_adapter.model.parameters())
    torch.testing.assert_close(from_adapter.compute_log_prob(batch)[0], saved.compute_log_prob(batch)[0])
    export = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt" / "model")
    for name, tensor in dict(saved.named_parameters_for_sync()).items():
        torch.testing.assert_close(export.state_dict()[name], tensor, rtol=0, atol=1e-6, msg=name)


def test_megatron_bridge_lora_section_is_the_same_peft_adapter(make_config):
    from peft.tuners.lora import Linear

    actor = ActorEngine(
        make_config(
            "actor_rollout_ref.model.lora.rank=4",
            "actor_rollout_ref.model.lora.alpha=8",
            "actor_rollout_ref.model.lora.dropout=0.1",
        )
    )
    layers = {
        name.rsplit(".", 1)[-1]: module for name, module in actor.model.named_modules() if isinstance(module, Linear)
    }
    assert set(layers) == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}  # all-linear
    q = layers["q_proj"]
    assert q.scaling["default"] == 2.0 and q.lora_dropout["default"].p == 0.1
    # Megatron-Bridge's default init of A is Xavier-uniform: within sqrt(6 / (fan_in + fan_out)).
    a = q.lora_A["default"].weight
    assert a.abs().max() <= (6 / sum(a.shape)) ** 0.5 and not torch.all(q.lora_B["default"].weight)

    named = ActorEngine(
        make_config(
            "actor_rollout_ref.model.lora.rank=4",
            "actor_rollout_ref.model.lora.target_modules=[linear_qkv,linear_proj]",
        )
    )
    adapted = {name.rsplit(".", 1)[-1] for name, module in named.model.named_modules() if isinstance(module, Linear)}
    assert adapted == {"q_proj", "k_proj", "v_proj", "o_proj"}
    with pytest.raises(WorkerConfigError, match="both ask for LoRA"):
        ActorEngine(make_config("actor_rollout_ref.model.lora.rank=4", "actor_rollout_ref.model.lora_rank=4"))


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.model.target_modules=[no_such_layer]", "target_modules"),
        ("actor_rollout_ref.model.lora_adapter_path=/nonexistent/adapter", "lora_adapter_path"),
        ("actor_rollout_ref.model.target_modules=[q_proj,lm_head]", "tied"),  # the tiny model ties its embeddings
    ],
)
def test_a_bad_lora_setting_is_one_error_naming_the_key(make_config, override, message):
    with pytest.raises(WorkerConfigError, match=message) as error:
        ActorEngine(make_config("actor_rollout_ref.model.lora_rank=4", override))
    assert "\n" not in str(error.value)
