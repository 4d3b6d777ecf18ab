"""Log-probs, entropies and values against a manual forward pass over the full sequence."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from core_v1.workers import ActorEngine, BatchLayoutError, CriticEngine, ReferenceEngine, WorkerConfigError
from core_v1.workers import distributed
from core_v1.workers.model import load_causal_lm


def manual_response_scores(model_dir, batch, temperature):
    """Full forward, log_softmax over the vocabulary, gather each response token's score."""
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompt_length = batch["prompts"].shape[1]
    with torch.no_grad():
        logits = (
            model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
            ).logits
            / temperature
        )
    rows, response_length = batch["responses"].shape
    log_probs = torch.zeros(rows, response_length)
    entropy = torch.zeros(rows, response_length)
    for row in range(rows):
        for t in range(response_length):
            distribution = torch.log_softmax(logits[row, prompt_length + t - 1], dim=-1)
            log_probs[row, t] = distribution[batch["responses"][row, t]]
            entropy[row, t] = -(distribution.exp() * distribution).sum()
    return log_probs, entropy


def test_log_probs_match_a_manual_forward_at_response_positions(make_config, make_batch, tiny_model_dir):
    config = make_config("actor_rollout_ref.rollout.temperature=0.7")
    batch = make_batch(rows=6)
    actor = ActorEngine(config)

    log_probs, entropy = actor.compute_log_prob(batch, calculate_entropy=True)

    expected_log_probs, expected_entropy = manual_response_scores(tiny_model_dir, batch, temperature=0.7)
    valid = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
    assert log_probs.shape == entropy.shape == batch["responses"].shape
    assert log_probs.dtype == torch.float32 and log_probs.device.type == "cpu"
    torch.testing.assert_close(log_probs[valid], expected_log_probs[valid], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(entropy[valid], expected_entropy[valid], rtol=1e-5, atol=1e-5)


def test_micro_batched_log_probs_equal_one_batch(make_config, make_batch):
    batch = make_batch(rows=7)
    whole, _ = ActorEngine(make_config()).compute_log_prob(batch)
    pieces, none = ActorEngine(
        make_config("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3")
    ).compute_log_prob(batch)
    assert none is None
    torch.testing.assert_close(pieces, whole, rtol=1e-5, atol=1e-6)


def test_reference_scores_equal_the_untrained_actor(make_config, make_batch):
    config = make_config("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=2")
    batch = make_batch()
    reference = ReferenceEngine(config)
    assert not any(p.requires_grad for p in reference.model.parameters())
    torch.testing.assert_close(
        reference.compute_ref_log_prob(batch), ActorEngine(config).compute_log_prob(batch)[0], rtol=1e-5, atol=1e-6
    )


def test_values_are_read_before_each_response_token_and_masked(make_config, make_batch):
    batch = make_batch()
    critic = CriticEngine(make_config("critic.forward_micro_batch_size_per_gpu=3"))
    values = critic.compute_values(batch)
    with torch.no_grad():
        per_position = critic.model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
        ).logits[..., 0]
    response_length = batch["responses"].shape[1]
    expected = per_position[:, -response_length - 1 : -1] * batch["response_mask"]
    torch.testing.assert_close(values, expected, rtol=1e-5, atol=1e-6)
    assert (values[batch["response_mask"] == 0] == 0).all()


def test_world_size_one_keeps_a_plain_model(make_config):
    actor = ActorEngine(make_config())
    assert distributed.world_size() == 1
    assert type(actor.model).__name__ == "Qwen2ForCausalLM"  # FSDP2 would swap in an FSDP subclass


def test_gradient_checkpointing_gives_the_same_scores(make_config, make_batch):
    batch = make_batch()
    plain = ActorEngine(make_config())
    checkpointed = ActorEngine(make_config("actor_rollout_ref.model.enable_gradient_checkpointing=true"))
    assert checkpointed.model.is_activation_checkpointing
    torch.testing.assert_close(checkpointed.compute_log_prob(batch)[0], plain.compute_log_prob(batch)[0])


def test_model_dtype_comes_from_the_config(tiny_model_dir):
    assert load_causal_lm(tiny_model_dir, dtype="bf16").dtype == torch.bfloat16


@pytest.mark.parametrize(
    "override, message",
    [
        ("actor_rollout_ref.rollout.temperature=0", "temperature=0"),
        ("actor_rollout_ref.actor.fsdp_config.model_dtype=fp8", "not a known dtype"),
        ("actor_rollout_ref.actor.policy_loss.loss_mode=nope", "nope"),
    ],
)
def test_bad_settings_fail_at_construction_with_the_key(make_config, override, message):
    with pytest.raises((WorkerConfigError, KeyError), match=message):
        ActorEngine(make_config(override))


def test_a_missing_model_directory_names_the_key(make_config, tmp_path):
    with pytest.raises(
        WorkerConfigError, match=r"cannot load a model config from actor_rollout_ref.model.path=.*absent"
    ):
        ActorEngine(make_config(), model_path=str(tmp_path / "absent"))


def test_a_batch_without_a_field_names_it(make_config, make_batch):
    actor = ActorEngine(make_config())
    batch = make_batch().exclude("position_ids")
    with pytest.raises(BatchLayoutError, match="position_ids"):
        actor.compute_log_prob(batch)
    with pytest.raises(BatchLayoutError, match="advantages"):
        actor.update_policy(make_batch().exclude("advantages"))
