"""A mixture-of-experts actor's router losses (actor.moe.*): the update's gradient gains exactly the
weighted losses of core_v1.algorithms.moe on a tiny Qwen3-MoE's routers, the metrics report them, the
routers do not move without them, and a dense model refuses them."""

import pytest
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from core_v1.algorithms.moe import load_balancing_loss, router_z_loss
from core_v1.workers import ActorEngine
from core_v1.workers.errors import WorkerConfigError
from tests.core_v1.workers.conftest import VOCAB_SIZE, build_batch


@pytest.fixture(scope="module")
def tiny_moe_dir(tmp_path_factory) -> str:
    """A randomly initialised 2-layer Qwen3-MoE: 4 experts, 2 per token."""
    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=32,
        intermediate_size=64,
        moe_intermediate_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        num_experts=4,
        num_experts_per_tok=2,
        max_position_embeddings=64,
    )
    directory = tmp_path_factory.mktemp("tiny_qwen3_moe")
    Qwen3MoeForCausalLM(config).save_pretrained(directory)
    return str(directory)


def _router_only_batch():
    batch = build_batch(rows=8)
    batch["advantages"] = torch.zeros_like(batch["advantages"])  # no policy gradient: only the routers' terms
    return batch


def _gate_gradients(actor, batch) -> dict[str, torch.Tensor]:
    """The routers' gradient of one update's loss (one micro-batch: the whole mini-batch)."""
    actor.model.zero_grad()
    actor._accumulate_gradients(batch.select(*actor._update_fields(batch)), None, "token-mean", actor._micro_batch_loss)
    return {name: p.grad.clone() for name, p in actor.model.named_parameters() if name.endswith("gate.weight")}


def test_the_update_adds_the_weighted_router_losses_to_the_gradient(make_config, tiny_moe_dir):
    path = f"actor_rollout_ref.model.path={tiny_moe_dir}"
    plain = ActorEngine(make_config(path))
    weighted = ActorEngine(
        make_config(
            path, "actor_rollout_ref.actor.moe.aux_loss_coeff=0.5", "actor_rollout_ref.actor.moe.z_loss_coeff=0.1"
        )
    )
    batch = _router_only_batch()
    batch["old_log_probs"] = plain.compute_log_prob(batch)[0]
    # What the two terms are, from the same weights: a plain forward of the model with its routers' logits.
    model = Qwen3MoeForCausalLM.from_pretrained(tiny_moe_dir)
    output = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        output_router_logits=True,
    )
    mask = batch["attention_mask"]
    balance, z_loss = load_balancing_loss(output.router_logits, mask, 2), router_z_loss(output.router_logits, mask)
    (0.5 * balance + 0.1 * z_loss).backward()
    expected = {name: p.grad for name, p in model.named_parameters() if name.endswith("gate.weight")}

    extra = {
        name: grad - _gate_gradients(plain, batch)[name] for name, grad in _gate_gradients(weighted, batch).items()
    }
    assert expected and set(extra) == set(expected)
    for name in expected:
        torch.testing.assert_close(extra[name], expected[name], rtol=1e-4, atol=1e-7, msg=name)
    metrics = weighted.update_policy(batch)
    assert metrics["actor/moe_aux_loss"] == pytest.approx(balance.item(), rel=1e-5)
    assert metrics["actor/moe_z_loss"] == pytest.approx(z_loss.item(), rel=1e-5)
    # Summed over the two MoE layers, each at least 1 (a perfectly balanced router's value).
    assert metrics["actor/moe_aux_loss"] >= 2.0 - 1e-4


def test_without_the_weights_the_routers_do_not_move(make_config, tiny_moe_dir):
    actor = ActorEngine(
        make_config(f"actor_rollout_ref.model.path={tiny_moe_dir}", "actor_rollout_ref.actor.optim.weight_decay=0")
    )  # AdamW decays any weight
    batch = _router_only_batch()
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    gates = {name: p.detach().clone() for name, p in actor.model.named_parameters() if name.endswith("gate.weight")}
    metrics = actor.update_policy(batch)
    assert "actor/moe_aux_loss" not in metrics and gates
    for name, p in actor.model.named_parameters():
        if name in gates:
            assert torch.equal(p.detach(), gates[name]), name


def test_megatrons_none_balancing_type_drops_the_load_balancing_loss_only(make_config, tiny_moe_dir):
    actor = ActorEngine(
        make_config(
            f"actor_rollout_ref.model.path={tiny_moe_dir}",
            "actor_rollout_ref.actor.moe.aux_loss_coeff=0.01",
            "actor_rollout_ref.actor.moe.z_loss_coeff=0.001",
            "actor_rollout_ref.actor.moe.load_balancing_type=none",
        )
    )
    batch = _router_only_batch()
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    metrics = actor.update_policy(batch)
    assert "actor/moe_aux_loss" not in metrics and metrics["actor/moe_z_loss"] > 0


def test_a_dense_model_refuses_the_router_losses_in_one_line(make_config):
    with pytest.raises(WorkerConfigError, match="mixture-of-experts") as error:
        ActorEngine(make_config("actor_rollout_ref.actor.moe.aux_loss_coeff=0.01"))
    assert "\n" not in str(error.value)
