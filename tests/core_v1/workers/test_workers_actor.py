"""The PPO update: exact gradient accumulation, learning direction, KL loss, clipping, skipped steps."""

import pytest
import torch

from core_v1.workers import ActorEngine, ReferenceEngine
from core_v1.workers.training import clip_grad_norm


def gradients_of(actor, batch, micro_batch_rows, loss_agg_mode):
    """Accumulate one mini-batch's gradient the way `update_policy` does; return it and the metrics."""
    metrics = actor._accumulate_gradients(
        batch.select(*actor._update_fields(batch)), micro_batch_rows, loss_agg_mode, actor._micro_batch_loss
    )
    return {name: p.grad.clone() for name, p in actor.model.named_parameters()}, metrics


def with_own_log_probs(actor, batch):
    """The batch with `old_log_probs` recomputed by the actor, as the trainer's stage does."""
    batch = batch.clone()
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    return batch


@pytest.mark.parametrize(
    "loss_agg_mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
)
def test_micro_batches_accumulate_the_gradient_of_the_whole_mini_batch(make_config, make_batch, loss_agg_mode):
    config = make_config(
        f"actor_rollout_ref.actor.loss_agg_mode={loss_agg_mode}",
        "actor_rollout_ref.actor.entropy_coeff=0.01",
        "actor_rollout_ref.actor.use_kl_loss=true",
    )
    actor = ActorEngine(config)
    batch = make_batch(rows=7)
    batch = with_own_log_probs(actor, batch)
    batch["old_log_probs"] = batch["old_log_probs"] + 0.3 * torch.randn(batch["old_log_probs"].shape)  # ratios != 1
    batch["ref_log_prob"] = batch["old_log_probs"] - 0.2

    whole, whole_metrics = gradients_of(actor, batch, None, loss_agg_mode)
    pieces, piece_metrics = gradients_of(actor, batch, 3, loss_agg_mode)  # micro-batches of 3, 3 and 1 rows

    for name in whole:
        torch.testing.assert_close(pieces[name], whole[name], rtol=1e-4, atol=1e-7, msg=name)
    for name in ("actor/pg_loss", "actor/entropy", "actor/kl_loss"):
        # abs: a loss of O(1) per-token terms that nearly cancel (pg_loss ~3e-4) keeps float32's absolute error
        assert piece_metrics[name] == pytest.approx(whole_metrics[name], rel=1e-5, abs=1e-6), name
    assert any(g.abs().sum() > 0 for g in whole.values())


def test_gradient_checkpointing_gives_the_same_gradient(make_config, make_batch):
    batch = make_batch()
    plain = ActorEngine(make_config())
    checkpointed = ActorEngine(make_config("actor_rollout_ref.model.enable_gradient_checkpointing=true"))
    expected, _ = gradients_of(plain, batch, None, "token-mean")
    got, _ = gradients_of(checkpointed, batch, None, "token-mean")
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7)


def test_a_positive_advantage_raises_the_chosen_tokens_log_prob(make_config, make_batch):
    actor = ActorEngine(make_config("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4"))
    batch = make_batch()
    chosen = batch["response_mask"].bool()
    batch["advantages"] = torch.ones_like(batch["advantages"])
    before = actor.compute_log_prob(batch)[0]
    for _ in range(3):
        metrics = actor.update_policy(with_own_log_probs(actor, batch))
    after = actor.compute_log_prob(batch)[0]
    assert (after[chosen] - before[chosen]).mean() > 0.05
    assert metrics["actor/pg_loss"] < 0  # -A * ratio with A = 1 and ratio ~ 1
    assert metrics["actor/lr"] == pytest.approx(1e-3)
    assert metrics["actor/skipped_steps"] == 0


def test_mini_batches_and_epochs_give_one_step_each(make_config, make_batch):
    # 8 rows; 2 prompts x n=2 = 4 rows per mini-batch, 3 epochs: 6 optimizer steps.
    actor = ActorEngine(
        make_config(
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=2",
            "actor_rollout_ref.actor.ppo_epochs=3",
        )
    )
    state_before = actor.optimizer.state_dict()["state"]
    actor.update_policy(with_own_log_probs(actor, make_batch()))
    steps = {int(s["step"]) for s in actor.optimizer.state_dict()["state"].values()}
    assert not state_before and steps == {6}


@pytest.mark.parametrize(
    "overrides, reports_entropy",
    [
        ((), False),  # the trainer reports the old-log-prob pass's entropy
        (("actor_rollout_ref.actor.entropy_coeff=0.01",), True),
        (("algorithm.rollout_correction.bypass_mode=true",), True),  # no old-log-prob pass runs
    ],
)
def test_the_update_measures_the_entropy_only_where_nothing_else_does(
    make_config, make_batch, overrides, reports_entropy
):
    actor = ActorEngine(make_config(*overrides))
    metrics = actor.update_policy(with_own_log_probs(actor, make_batch()))
    assert ("actor/entropy" in metrics) == reports_entropy
    if reports_entropy:
        _, entropy = actor.compute_log_prob(make_batch(), calculate_entropy=True)
        assert 0 < metrics["actor/entropy"] < 2 * entropy.max()


def test_kl_loss_is_zero_against_an_identical_reference(make_config, make_batch):
    config = make_config(
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef=0.5",
    )
    actor, reference = ActorEngine(config), ReferenceEngine(config)
    batch = with_own_log_probs(actor, make_batch())
    batch["ref_log_prob"] = reference.compute_ref_log_prob(batch)
    metrics = actor.update_policy(batch)
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/kl_coef"] == 0.5
    assert metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-6)  # the first step starts on-policy
    assert metrics["actor/pg_clipfrac"] == 0.0


def test_a_drifted_reference_gives_a_positive_kl_loss(make_config, make_batch):
    actor = ActorEngine(make_config("actor_rollout_ref.actor.use_kl_loss=true"))
    batch = with_own_log_probs(actor, make_batch())
    batch["ref_log_prob"] = batch["old_log_probs"] - 0.5
    assert actor.update_policy(batch)["actor/kl_loss"] > 0.01


def test_gradient_clipping_caps_the_norm(make_config, make_batch):
    actor = ActorEngine(make_config())
    batch = make_batch()
    batch["advantages"] = 100 * batch["advantages"]
    gradients_of(actor, batch, None, "token-mean")
    parameters = list(actor.model.parameters())
    norm_before = clip_grad_norm(parameters, max_norm=1e-3)
    norm_after = torch.nn.utils.get_total_norm([p.grad for p in parameters])
    assert norm_before > 1e-2
    assert norm_after == pytest.approx(1e-3, rel=1e-3)


def test_update_reports_the_norm_before_clipping_and_steps_with_the_clipped_gradient(make_config, make_batch):
    actor = ActorEngine(make_config("actor_rollout_ref.actor.grad_clip=1e-3"))
    batch = with_own_log_probs(actor, make_batch())
    batch["advantages"] = 100 * batch["advantages"]
    metrics = actor.update_policy(batch)
    assert metrics["actor/grad_norm"] > 1e-2
    clipped = torch.nn.utils.get_total_norm([p.grad for p in actor.model.parameters()])
    assert clipped == pytest.approx(1e-3, rel=1e-3)


def test_a_non_finite_gradient_skips_the_step_and_counts_it(make_config, make_batch):
    actor = ActorEngine(make_config())
    batch = with_own_log_probs(actor, make_batch())
    batch["advantages"][0, 0] = float("inf")
    before = {name: p.detach().clone() for name, p in actor.model.named_parameters()}
    metrics = actor.update_policy(batch)
    assert metrics["actor/skipped_steps"] == 1 and actor.skipped_steps == 1
    assert "actor/grad_norm" not in metrics
    for name, p in actor.model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_decoupled_loss_reads_the_rollout_log_probs(make_config, make_batch):
    actor = ActorEngine(make_config("actor_rollout_ref.actor.policy_loss.loss_mode=decoupled"))
    batch = with_own_log_probs(actor, make_batch())
    batch["rollout_log_probs"] = batch["old_log_probs"] - 0.1
    metrics = actor.update_policy(batch)
    assert metrics["actor/behav_kl"] == pytest.approx(-0.1, rel=1e-4)


@pytest.mark.parametrize("loss_type, clips", [("ppo_clip", True), ("reinforce", False)])
def test_bypass_mode_trains_with_the_loss_type_it_names(make_config, make_batch, loss_type, clips):
    """verl's bypass mode: the default loss becomes the bypass loss, so loss_type=reinforce (verl 0.6's
    use_policy_gradient=true) really trains REINFORCE; its metrics name the correction."""
    actor = ActorEngine(
        make_config(
            "algorithm.rollout_correction.bypass_mode=true",
            f"algorithm.rollout_correction.loss_type={loss_type}",
            "actor_rollout_ref.actor.clip_ratio=0.0001",
        )
    )
    assert actor._loss_mode == "bypass_mode"
    batch = with_own_log_probs(actor, make_batch())
    batch["old_log_probs"] = batch["old_log_probs"] - 0.5  # the rollout policy differs: the ratio leaves the clip range
    metrics = actor.update_policy(batch)
    assert any(name.startswith("rollout_corr/") for name in metrics)
    assert (metrics["actor/pg_clipfrac"] > 0) == clips
