"""`actor.calculate_sum_pi_squared`: the log-prob pass adds sum_v pi(v)^2 per response token, and
the old-log-prob stage puts it on the batch as `sum_pi_squared`."""

import torch
from tensordict import TensorDict
from transformers import AutoModelForCausalLM

from core_v1.trainer.off_policy import correction_config
from core_v1.trainer.stages import old_log_prob_stage
from core_v1.workers import ActorEngine


def test_sum_pi_squared_is_the_squared_softmax_summed_at_response_positions(make_config, make_batch, tiny_model_dir):
    overrides = (
        "actor_rollout_ref.rollout.temperature=0.7",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=3",
    )
    batch = make_batch(rows=7)
    log_probs, entropy, sum_pi_squared = ActorEngine(
        make_config(*overrides, "actor_rollout_ref.actor.calculate_sum_pi_squared=true")
    ).compute_log_prob(batch)

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    with torch.no_grad():
        logits = (
            model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
            ).logits
            / 0.7
        )
    response_length = batch["responses"].shape[1]
    expected = (torch.softmax(logits[:, -response_length - 1 : -1], dim=-1) ** 2).sum(-1)
    valid = batch["attention_mask"][:, -response_length:].bool()
    assert entropy is None and sum_pi_squared.shape == batch["responses"].shape
    torch.testing.assert_close(sum_pi_squared[valid], expected[valid], rtol=1e-5, atol=1e-6)
    assert (sum_pi_squared[~valid] == 0).all()
    plain = ActorEngine(make_config(*overrides)).compute_log_prob(batch)
    assert len(plain) == 2  # off by default: the pass makes what it made before
    torch.testing.assert_close(log_probs, plain[0])


def test_the_old_log_prob_stage_keeps_a_third_output_as_sum_pi_squared():
    batch = TensorDict({"response_mask": torch.ones(2, 3)}, batch_size=[2])
    correction = correction_config({"rollout_is": None, "rollout_rs": None})
    outputs = (torch.full((2, 3), -1.0), None, torch.full((2, 3), 0.3))
    batch = old_log_prob_stage(batch, {}, compute_log_prob=lambda _: outputs, correction=correction)
    assert torch.equal(batch["sum_pi_squared"], outputs[2]) and "entropys" not in batch.keys()
    two = old_log_prob_stage(
        TensorDict({"response_mask": torch.ones(2, 3)}, batch_size=[2]),
        {},
        compute_log_prob=lambda _: outputs[:2],
        correction=correction,
    )
    assert "sum_pi_squared" not in two.keys()
