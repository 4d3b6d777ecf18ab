"""Advantage estimators against hand-computed values, the registry, and multi-output sessions."""

import enum
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from core_v1.algorithms import (
    ADV_ESTIMATORS,
    UNIFORM_KEYWORDS,
    AlgorithmInputError,
    compute_gae_advantage_return,
    compute_grpo_outcome_advantage,
    compute_multi_output_advantage,
    compute_reinforce_plus_plus_baseline_outcome_advantage,
    compute_reinforce_plus_plus_outcome_advantage,
    compute_remax_outcome_advantage,
    compute_rloo_outcome_advantage,
    get_adv_estimator_fn,
    last_output_rows,
    register_adv_estimator,
)
from core_v1.algorithms.advantages import compute_grpo_passk_outcome_advantage
from core_v1.utils.registry import UnknownNameError


def whiten(xs):
    mean = sum(xs) / len(xs)
    var = sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)
    return [(x - mean) / math.sqrt(var + 1e-8) for x in xs]


def outcome_rewards(scores, lengths, width):
    """Rewards on each row's last valid token, and the matching right-padded mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def test_gae_one_by_three():
    rewards, values = torch.tensor([[0.0, 0.0, 1.0]]), torch.tensor([[0.5, 0.6, 0.7]])
    advantages, returns = compute_gae_advantage_return(
        token_level_rewards=rewards, response_mask=torch.ones(1, 3), values=values, gamma=0.9, lam=0.8
    )
    # delta_2 = 1 - 0.7; A_1 = (0.9*0.7 - 0.6) + 0.72*A_2; A_0 = (0.9*0.6 - 0.5) + 0.72*A_1
    raw = [0.04 + 0.72 * (0.03 + 0.72 * 0.3), 0.03 + 0.72 * 0.3, 0.3]
    torch.testing.assert_close(returns, torch.tensor([[raw[0] + 0.5, raw[1] + 0.6, raw[2] + 0.7]]))
    torch.testing.assert_close(advantages, torch.tensor([whiten(raw)]))


def test_gae_skips_observation_tokens():
    rewards = torch.tensor([[0.0, 0.0, 0.0, 1.0]])
    mask = torch.tensor([[1, 0, 1, 1]])  # position 1 is a tool output
    values = torch.tensor([[0.1, 0.9, 0.3, 0.2]])
    _, returns = compute_gae_advantage_return(token_level_rewards=rewards, response_mask=mask, values=values)
    # gamma = lam = 1: every valid position's return is the final reward; V_1 never enters.
    torch.testing.assert_close(returns[0, [0, 2, 3]], torch.ones(3))
    other_values = values.clone()
    other_values[0, 1] = -5.0
    _, other_returns = compute_gae_advantage_return(
        token_level_rewards=rewards, response_mask=mask, values=other_values
    )
    torch.testing.assert_close(other_returns[0, [0, 2, 3]], returns[0, [0, 2, 3]])


def test_grpo_two_groups_with_known_mean_and_std():
    scores = [1.0, 2.0, 0.0, 1.0, 4.0, 0.0]
    index = ["a", "b", "a", "a", "b", "a"]  # a: [1, 0, 1, 0] mean .5 std sqrt(1/3); b: [2, 4] mean 3 std sqrt 2
    rewards, mask = outcome_rewards(scores, [3, 2, 4, 1, 4, 2], width=4)
    advantages, returns = compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=index)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    b = 1.0 / (math.sqrt(2) + 1e-6)
    expected = torch.tensor([a, -b, -a, a, b, -a]).unsqueeze(-1) * mask
    torch.testing.assert_close(advantages, expected)
    assert returns is advantages or torch.equal(returns, advantages)


def test_grpo_without_std_normalisation_and_singleton_group():
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 0.0, 3.0], [2] * 5, width=2)
    index = np.array(["a", "a", "a", "a", "solo"], dtype=object)
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=index, norm_adv_by_std_in_grpo=False
    )
    # A group of one has mean 0 and std 1 in verl, so its advantage is its raw score.
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.5, -0.5, 0.5, -0.5, 3.0]))
    normalised, _ = compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=index)
    assert normalised[4, 0].item() == pytest.approx(3.0 / (1 + 1e-6))


def test_group_estimators_require_index_per_row():
    rewards, mask = outcome_rewards([1.0, 0.0], [1, 1], width=1)
    with pytest.raises(AlgorithmInputError, match="index"):
        compute_grpo_outcome_advantage(token_level_rewards=rewards, response_mask=mask)
    with pytest.raises(AlgorithmInputError, match="one group id per row"):
        compute_rloo_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=["a"])


def test_rloo_leaves_one_out():
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 0.0, 5.0], [1] * 5, width=1)
    advantages, _ = compute_rloo_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=["a", "a", "a", "a", "solo"]
    )
    # 1 - mean(0, 1, 0) = 2/3; 0 - mean(1, 1, 0) = -2/3; a group of one keeps its score (verl).
    torch.testing.assert_close(advantages[:, 0], torch.tensor([2 / 3, -2 / 3, 2 / 3, -2 / 3, 5.0]))


def test_reinforce_plus_plus_baseline_whitens_over_tokens():
    rewards, mask = outcome_rewards([1.0, 0.0, 1.0, 0.0], [2] * 4, width=2)
    advantages, _ = compute_reinforce_plus_plus_baseline_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=["g"] * 4
    )
    tokens = whiten([0.5, 0.5, -0.5, -0.5, 0.5, 0.5, -0.5, -0.5])
    torch.testing.assert_close(advantages, torch.tensor(tokens).reshape(4, 2))


def test_reinforce_plus_plus_discounts_and_resets_at_padding():
    advantages, returns = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=torch.tensor([[0.0, 1.0, 2.0]]), response_mask=torch.ones(1, 3), gamma=0.5
    )
    torch.testing.assert_close(returns, torch.tensor([[1.0, 2.0, 2.0]]))
    torch.testing.assert_close(advantages, torch.tensor([whiten([1.0, 2.0, 2.0])]))
    _, padded_returns = compute_reinforce_plus_plus_outcome_advantage(
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]),
        response_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]),
    )
    torch.testing.assert_close(padded_returns, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))


def test_remax_subtracts_the_greedy_baseline():
    advantages, returns = compute_remax_outcome_advantage(
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]]),
        response_mask=torch.tensor([[1, 1, 1], [1, 1, 0]]),
        reward_baselines=torch.tensor([0.25, 1.0]),
    )
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[0.75, 0.75, 0.75], [1.0, 1.0, 0.0]]))
    with pytest.raises(AlgorithmInputError, match="reward_baselines"):
        compute_remax_outcome_advantage(token_level_rewards=returns, response_mask=torch.ones(2, 3))


def test_grpo_passk_credits_only_the_best_response():
    rewards, mask = outcome_rewards([1.0, 3.0, 2.0], [1, 1, 1], width=1)
    advantages, _ = compute_grpo_passk_outcome_advantage(
        token_level_rewards=rewards, response_mask=mask, index=["p"] * 3
    )
    # best 3, second 2, std([1, 3, 2]) = 1
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.0, 1.0 / (1 + 1e-6), 0.0]))
    with pytest.raises(AlgorithmInputError, match="at least 2"):
        compute_grpo_passk_outcome_advantage(token_level_rewards=rewards, response_mask=mask, index=["p", "p", "q"])


def test_unknown_estimator_lists_the_known_ones():
    with pytest.raises(UnknownNameError) as error:
        get_adv_estimator_fn("grop")
    message = str(error.value)
    assert all(name in message for name in ("gae", "grpo", "rloo", "remax")) and "'grpo'" in message


def test_every_registered_estimator_takes_the_uniform_call():
    rewards, mask = outcome_rewards([1.0, 0.0, 0.5, 2.0], [3, 2, 3, 1], width=3)
    uniform = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=["a", "a", "b", "b"],
        values=torch.full((4, 3), 0.1),
        reward_baselines=torch.tensor([0.5, 0.5, 1.0, 1.0]),
        reward_extra=[
            {"acc": 1.0, "fmt": 0.0},
            {"acc": 0.0, "fmt": 1.0},
            {"acc": 0.5, "fmt": 1.0},
            {"acc": 2.0, "fmt": 1.0},
        ],
        gamma=1.0,
        lam=0.95,
        norm_adv_by_std_in_grpo=True,
        epsilon=1e-6,
        gdpo_reward_keys=["acc", "fmt"],
        gdpo_reward_weights=None,
        old_log_probs=torch.full((4, 3), -0.5),
        sum_pi_squared=torch.full((4, 3), 0.4),
        rollout_is_weights=torch.ones(4, 3),
    )
    assert set(uniform) == set(UNIFORM_KEYWORDS)
    assert len(ADV_ESTIMATORS) >= 7
    for name in ADV_ESTIMATORS:
        advantages, returns = get_adv_estimator_fn(name)(**uniform)
        assert advantages.shape == returns.shape == (4, 3), name
        assert torch.isfinite(advantages).all() and torch.isfinite(returns).all(), name


class Estimators(str, enum.Enum):
    GRPO = "grpo"


def test_lookup_by_enum_and_registering_a_new_estimator():
    assert get_adv_estimator_fn(Estimators.GRPO) is compute_grpo_outcome_advantage

    @register_adv_estimator("test_algo_constant")
    def constant(*, token_level_rewards, response_mask, **_):
        return response_mask * 1.0, response_mask * 1.0

    advantages, _ = get_adv_estimator_fn("test_algo_constant")(
        token_level_rewards=torch.zeros(1, 2), response_mask=torch.ones(1, 2), gamma=0.5
    )
    torch.testing.assert_close(advantages, torch.ones(1, 2))
    with pytest.raises(ValueError, match="already registered"):
        register_adv_estimator("grpo")(constant)


def test_an_estimator_without_the_uniform_signature_is_refused():
    with pytest.raises(TypeError, match=r"\*\*_"):

        @register_adv_estimator("test_algo_positional")
        def positional(token_level_rewards, response_mask, index):
            return token_level_rewards, token_level_rewards


def test_last_output_of_each_session():
    np.testing.assert_array_equal(last_output_rows(["s1", "s1", "s2"], [1, 0, 0]), [0, 2])
    np.testing.assert_array_equal(last_output_rows(["s1", "s1", "s2"]), [1, 2])
    with pytest.raises(AlgorithmInputError, match="two rows with output_index"):
        last_output_rows(["s1", "s1"], [0, 0])


def test_multi_output_grpo_uses_the_last_output_and_broadcasts():
    # One prompt, two sessions: A has outputs 0, 1 (session reward 1 on output 1); B has 0, 1, 2 (reward 0).
    sessions = ["p_A", "p_A", "p_B", "p_B", "p_B"]
    outputs = [0, 1, 0, 1, 2]
    rewards, mask = outcome_rewards([7.0, 1.0, 9.0, 9.0, 0.0], [2, 3, 1, 2, 3], width=3)  # 7, 9: ignored
    advantages, returns = compute_multi_output_advantage(
        get_adv_estimator_fn("grpo"),
        session_index=sessions,
        output_index=outputs,
        token_level_rewards=rewards,
        response_mask=mask,
        index=["p"] * 5,
        norm_adv_by_std_in_grpo=True,
        epsilon=1e-6,
    )
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # scores [1, 0]: mean 0.5, std sqrt(0.5)
    torch.testing.assert_close(advantages, torch.tensor([a, a, -a, -a, -a]).unsqueeze(-1) * mask)
    torch.testing.assert_close(returns, advantages)


def test_multi_output_refuses_token_varying_estimators():
    rewards, mask = outcome_rewards([1.0, 0.0], [3, 3], width=3)
    with pytest.raises(AlgorithmInputError, match="not gae"):
        compute_multi_output_advantage(
            get_adv_estimator_fn("gae"),
            session_index=["s1", "s2"],
            token_level_rewards=rewards,
            response_mask=mask,
            values=torch.tensor([[0.1, 0.5, 0.2], [0.3, 0.0, 0.9]]),
        )


def grouped_reference(scores, index, per_group):
    """Row-by-row loop over groups, the way verl's reference implementation is written."""
    out = [0.0] * len(scores)
    for group in set(index):
        rows = [i for i, g in enumerate(index) if g == group]
        for row, value in zip(rows, per_group([scores[i] for i in rows])):
            out[row] = value
    return out


def grpo_group(xs, epsilon=1e-6):
    if len(xs) == 1:
        return [xs[0] / (1 + epsilon)]
    mean = sum(xs) / len(xs)
    std = math.sqrt(sum((x - mean) ** 2 for x in xs) / (len(xs) - 1))
    return [(x - mean) / (std + epsilon) for x in xs]


def rloo_group(xs):
    if len(xs) == 1:
        return xs
    return [x - (sum(xs) - x) / (len(xs) - 1) for x in xs]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-4, 4)), min_size=1, max_size=12))
def test_vectorised_group_estimators_match_a_per_group_loop(rows):
    index = [f"uid{g}" for g, _ in rows]
    scores = [float(s) for _, s in rows]
    rewards, mask = outcome_rewards(scores, [2] * len(rows), width=2)
    grpo, _ = compute_grpo_outcome_advantage(
        token_level_rewards=rewards.double(), response_mask=mask.double(), index=index
    )
    rloo, _ = compute_rloo_outcome_advantage(
        token_level_rewards=rewards.double(), response_mask=mask.double(), index=index
    )
    torch.testing.assert_close(
        grpo[:, 0], torch.tensor(grouped_reference(scores, index, grpo_group), dtype=torch.float64)
    )
    torch.testing.assert_close(
        rloo[:, 1], torch.tensor(grouped_reference(scores, index, rloo_group), dtype=torch.float64)
    )
