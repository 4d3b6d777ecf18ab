"""Policy losses against hand-computed values, and the policy-loss registry."""

import math

import pytest
import torch

from core_v1.algorithms import (
    POLICY_LOSSES,
    AlgorithmConfigError,
    AlgorithmInputError,
    compute_policy_loss_bypass_mode,
    compute_policy_loss_decoupled,
    compute_policy_loss_gspo,
    compute_policy_loss_reinforce,
    compute_policy_loss_vanilla,
    get_policy_loss_fn,
    register_policy_loss,
)
from core_v1.utils.registry import UnknownNameError

# Five single tokens, clip 0.2, dual clip c = 3:
#   A=+1 ratio 1.5 -> clipped at 1.2: -1.2      A=+1 ratio 0.5 -> unclipped: -0.5
#   A=-1 ratio 1.5 -> unclipped: 1.5            A=-1 ratio 5.0 -> dual clip: 3.0
#   A=-1 ratio 0.5 -> clipped at 0.8: 0.8
RATIOS = [1.5, 0.5, 1.5, 5.0, 0.5]
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0]])
MASK = torch.ones(1, 5)


def log_probs(ratios, old=-1.0):
    old_log_prob = torch.full((1, len(ratios)), old)
    log_prob = (old_log_prob + torch.log(torch.tensor([ratios]))).requires_grad_(True)
    return old_log_prob, log_prob


def test_vanilla_clip_and_dual_clip_on_each_side():
    old, new = log_probs(RATIOS)
    loss, metrics = compute_policy_loss_vanilla(old, new, ADVANTAGES, MASK, clip_ratio=0.2, clip_ratio_c=3.0)
    torch.testing.assert_close(loss, torch.tensor((-1.2 - 0.5 + 1.5 + 3.0 + 0.8) / 5))
    assert metrics["actor/pg_clipfrac"].item() == pytest.approx(2 / 5)  # tokens 1 and 5
    assert metrics["actor/pg_clipfrac_lower"].item() == pytest.approx(1 / 5)  # token 4
    assert metrics["actor/ppo_kl"].item() == pytest.approx(-sum(math.log(r) for r in RATIOS) / 5, rel=1e-5)
    (grad,) = torch.autograd.grad(loss, new)
    # Clipped and dual-clipped tokens carry no gradient; the others: d(-A * ratio)/dlogp = -A * ratio.
    torch.testing.assert_close(grad, torch.tensor([[0.0, -0.5, 1.5, 0.0, 0.0]]) / 5)


def test_vanilla_asymmetric_clip_and_rollout_weights():
    old, new = log_probs(RATIOS)
    loss, _ = compute_policy_loss_vanilla(
        old,
        new,
        ADVANTAGES,
        MASK,
        clip_ratio=0.2,
        clip_ratio_high=0.28,
        rollout_is_weights=torch.tensor([[2.0, 1.0, 1.0, 1.0, 1.0]]),
    )
    torch.testing.assert_close(loss, torch.tensor((-1.28 * 2 - 0.5 + 1.5 + 3.0 + 0.8) / 5))


def test_vanilla_aggregates_with_the_requested_mode_and_global_counts():
    old, new = log_probs([1.0, 1.0, 1.0])
    advantages = torch.tensor([[1.0, 2.0, 3.0]])
    mask = torch.tensor([[1, 1, 0]])
    loss, _ = compute_policy_loss_vanilla(old, new, advantages, mask, loss_agg_mode="seq-mean-token-sum")
    torch.testing.assert_close(loss, torch.tensor(-3.0))
    loss, _ = compute_policy_loss_vanilla(old, new, advantages, mask, global_batch_info={"global_num_tokens": 6})
    torch.testing.assert_close(loss, torch.tensor(-3.0 / 6))


def test_dual_clip_constant_must_exceed_one():
    old, new = log_probs([1.0])
    with pytest.raises(AlgorithmConfigError, match="clip_ratio_c must be > 1"):
        compute_policy_loss_vanilla(old, new, torch.ones(1, 1), torch.ones(1, 1), clip_ratio_c=1.0)


def test_decoupled_clips_around_proximal_and_weights_behaviour_gap():
    behaviour = torch.log(torch.tensor([[0.5]]))
    proximal = torch.log(torch.tensor([[0.6]]))
    current = torch.log(torch.tensor([[0.9]])).requires_grad_(True)  # ratio to proximal 1.5 -> clipped 1.2
    loss, metrics = compute_policy_loss_decoupled(
        behaviour, current, torch.ones(1, 1), torch.ones(1, 1), proximal_log_prob=proximal
    )
    torch.testing.assert_close(loss, torch.tensor(-1.2 * 1.2))  # behaviour weight 0.6 / 0.5
    assert metrics["actor/behav_imp_weight"].item() == pytest.approx(1.2)
    assert metrics["actor/pg_clipfrac"].item() == 1.0
    capped, metrics = compute_policy_loss_decoupled(
        behaviour, current, torch.ones(1, 1), torch.ones(1, 1), proximal_log_prob=proximal, behav_imp_weight_cap=1.1
    )
    assert capped.item() == 0.0 and metrics["actor/behav_capped_frac"].item() == 1.0


def test_decoupled_with_proximal_equal_to_behaviour_is_vanilla():
    old, new = log_probs(RATIOS)
    vanilla, _ = compute_policy_loss_vanilla(old, new, ADVANTAGES, MASK)
    decoupled, _ = compute_policy_loss_decoupled(old, new, ADVANTAGES, MASK, proximal_log_prob=old.clone())
    torch.testing.assert_close(decoupled, vanilla)


def test_decoupled_needs_proximal_log_probs_and_a_cap_above_one():
    old, new = log_probs([1.0])
    with pytest.raises(AlgorithmInputError, match="proximal_log_prob"):
        compute_policy_loss_decoupled(old, new, torch.ones(1, 1), torch.ones(1, 1))
    with pytest.raises(AlgorithmConfigError, match="behav_imp_weight_cap"):
        compute_policy_loss_decoupled(
            old, new, torch.ones(1, 1), torch.ones(1, 1), proximal_log_prob=old, behav_imp_weight_cap=0.9
        )


def test_gspo_clips_the_geometric_mean_ratio():
    old, new = log_probs([1.1, 1.3])
    s = math.sqrt(1.1 * 1.3)
    loss, _ = compute_policy_loss_gspo(old, new, torch.ones(1, 2), torch.ones(1, 2), clip_ratio=0.2)
    torch.testing.assert_close(loss, torch.tensor(-s))
    (grad,) = torch.autograd.grad(loss, new)
    torch.testing.assert_close(grad, torch.full((1, 2), -s / 2))  # each token: d(-A * s)/dlogp_t / 2 tokens
    clipped, metrics = compute_policy_loss_gspo(old, new, torch.ones(1, 2), torch.ones(1, 2), clip_ratio=0.1)
    torch.testing.assert_close(clipped, torch.tensor(-1.1))
    assert metrics["actor/pg_clipfrac"].item() == 1.0


def test_reinforce_weights_minus_advantage_log_prob():
    log_prob = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    loss, _ = compute_policy_loss_reinforce(
        log_prob.detach(), log_prob, torch.ones(1, 2), torch.ones(1, 2), rollout_is_weights=torch.tensor([[1.0, 0.5]])
    )
    torch.testing.assert_close(loss, torch.tensor((1.0 + 1.0) / 2))


def test_bypass_ppo_clip_is_vanilla_anchored_at_the_rollout():
    rollout, new = log_probs(RATIOS)
    vanilla, _ = compute_policy_loss_vanilla(rollout, new, ADVANTAGES, MASK)
    bypass, metrics = compute_policy_loss_bypass_mode(
        rollout, new, ADVANTAGES, MASK, rollout_correction={"bypass_mode": True}
    )
    torch.testing.assert_close(bypass, vanilla)
    assert "rollout_corr/kl" in metrics


def test_bypass_rejection_removes_tokens_and_reinforce_uses_is_weights():
    rollout, new = log_probs(RATIOS)
    _, metrics = compute_policy_loss_bypass_mode(
        rollout,
        new,
        ADVANTAGES,
        MASK,
        rollout_correction={"bypass_mode": True, "rollout_rs": "token_k1", "rollout_rs_threshold": 2.5},
    )
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(1 / 5)  # ratio 5 leaves
    loss, _ = compute_policy_loss_bypass_mode(
        rollout,
        new,
        ADVANTAGES,
        MASK,
        rollout_correction={
            "bypass_mode": True,
            "loss_type": "reinforce",
            "rollout_is": "token",
            "rollout_is_threshold": 2.0,
        },
    )
    weights = torch.tensor([[1.5, 0.5, 1.5, 2.0, 0.5]])  # ratio 5 truncated at 2
    expected = (-ADVANTAGES * new.detach() * weights).mean()
    torch.testing.assert_close(loss, expected)
    with pytest.raises(AlgorithmInputError, match="rollout_correction"):
        compute_policy_loss_bypass_mode(rollout, new, ADVANTAGES, MASK)


def test_every_registered_loss_takes_the_uniform_call():
    old, new = log_probs([1.1, 0.9, 1.0])
    uniform = dict(
        loss_agg_mode="token-mean",
        clip_ratio=0.2,
        clip_ratio_low=None,
        clip_ratio_high=None,
        clip_ratio_c=3.0,
        rollout_is_weights=None,
        proximal_log_prob=old.clone(),
        rollout_correction={"bypass_mode": True},
        global_batch_info=None,
    )
    for name in POLICY_LOSSES:
        loss, metrics = get_policy_loss_fn(name)(
            old, new, torch.tensor([[1.0, -1.0, 0.5]]), torch.ones(1, 3), **uniform
        )
        assert loss.dim() == 0 and torch.isfinite(loss), name
        assert {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"} <= set(metrics), name
        (grad,) = torch.autograd.grad(loss, new)
        assert torch.isfinite(grad).all(), name


def test_policy_loss_registry_errors():
    with pytest.raises(UnknownNameError, match="vanilla") as error:
        get_policy_loss_fn("vanila")
    assert "Did you mean 'vanilla'" in str(error.value)
    with pytest.raises(TypeError, match="signature"):

        @register_policy_loss("test_algo_bad_loss")
        def bad(log_prob, advantages):
            return log_prob.sum(), {}
