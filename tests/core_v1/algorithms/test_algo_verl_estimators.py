"""verl's further estimators: OPO, the vectorised GRPO and RLOO, and the optimal token baselines.

Hand-computed cases from the definitions (the module docstrings of `advantages.group` and
`advantages.otb`), the vectorised estimators against their plain forms on random groups, and
the sum of squared probabilities against softmax(logits)**2 summed.
"""

import pytest
import torch

from core_v1.algorithms import AlgorithmInputError, get_adv_estimator_fn, sum_pi_squared_from_logits
from core_v1.algorithms.advantages.otb import require_sum_pi_squared
from core_v1.algorithms.errors import AlgorithmConfigError


def outcome(scores, lengths, width, dtype=torch.float32):
    """Each row's score on its last valid token, and the right-padded mask."""
    rewards, mask = torch.zeros(len(scores), width, dtype=dtype), torch.zeros(len(scores), width, dtype=dtype)
    for row, (score, length) in enumerate(zip(scores, lengths)):
        mask[row, :length] = 1
        rewards[row, length - 1] = score
    return rewards, mask


def estimate(name, rewards, mask, index, **inputs):
    return get_adv_estimator_fn(name)(token_level_rewards=rewards, response_mask=mask, index=index, **inputs)


# ----------------------------------------------------------------------------------------- OPO
def test_opo_subtracts_the_length_weighted_group_mean():
    rewards, mask = outcome([1.0, 0.0, 0.5], [2, 3, 1], width=3)
    advantages, returns = estimate("opo", rewards, mask, ["a", "a", "b"])
    # group a: baseline (2 * 1 + 3 * 0) / (2 + 3) = 0.4; group b is alone: baseline 0
    expected = torch.tensor([[0.6, 0.6, 0.0], [-0.4, -0.4, -0.4], [0.5, 0.0, 0.0]])
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected)


def test_opo_with_equal_lengths_is_the_plain_group_mean_baseline():
    rewards, mask = outcome([1.0, 0.0, 0.0, 1.0], [2, 2, 2, 2], width=2)
    advantages, _ = estimate("opo", rewards, mask, ["a", "a", "a", "a"])
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


# ------------------------------------------------------------------------- vectorised forms
def random_groups(seed, sizes):
    generator = torch.Generator().manual_seed(seed)
    index = [f"g{group}" for group, size in enumerate(sizes) for _ in range(size)]
    order = torch.randperm(len(index), generator=generator).tolist()  # groups need not be adjacent rows
    scores = torch.rand(len(index), generator=generator, dtype=torch.float64).tolist()
    lengths = torch.randint(1, 6, (len(index),), generator=generator).tolist()
    rewards, mask = outcome(scores, lengths, width=5, dtype=torch.float64)
    return rewards[order], mask[order], [index[row] for row in order]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("norm", [True, False])
def test_grpo_vectorized_equals_grpo_on_groups_that_vary(seed, norm):
    rewards, mask, index = random_groups(seed, sizes=[2, 3, 4, 8, 1])
    vectorized, _ = estimate("grpo_vectorized", rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    plain, _ = estimate("grpo", rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(vectorized, plain, rtol=1e-9, atol=1e-12)


def test_grpo_vectorized_floors_the_group_variance_at_epsilon():
    rewards, mask = outcome([1.0, 1.0 + 1e-4, 0.0, 1.0], [1, 1, 1, 1], width=1, dtype=torch.float64)
    index = ["a", "a", "b", "b"]
    vectorized, _ = estimate("grpo_vectorized", rewards, mask, index, epsilon=1e-6)
    plain, _ = estimate("grpo", rewards, mask, index, epsilon=1e-6)
    # group a: deviations -/+ 5e-5, variance 2 * (5e-5)^2 / 1 = 5e-9 < 1e-6, so std becomes sqrt(1e-6) = 1e-3
    torch.testing.assert_close(vectorized[:2, 0], torch.tensor([-5e-5, 5e-5], dtype=torch.float64) / (1e-3 + 1e-6))
    std = (5e-9) ** 0.5
    torch.testing.assert_close(plain[:2, 0], torch.tensor([-5e-5, 5e-5], dtype=torch.float64) / (std + 1e-6))
    # group b's variance (0.5) is far above the floor: both agree there
    torch.testing.assert_close(vectorized[2:], plain[2:])


@pytest.mark.parametrize("seed", range(5))
def test_rloo_vectorized_equals_rloo_except_on_groups_of_one(seed):
    rewards, mask, index = random_groups(seed, sizes=[2, 3, 5, 1, 1])
    vectorized, _ = estimate("rloo_vectorized", rewards, mask, index)
    plain, _ = estimate("rloo", rewards, mask, index)
    alone = torch.tensor([index.count(uid) == 1 for uid in index])
    torch.testing.assert_close(vectorized[~alone], plain[~alone], rtol=1e-9, atol=1e-12)
    assert torch.equal(vectorized[alone], torch.zeros_like(vectorized[alone]))
    assert torch.equal(plain[alone], rewards[alone].sum(-1, keepdim=True) * mask[alone])  # rloo keeps the score


def test_rloo_vectorized_by_hand():
    rewards, mask = outcome([1.0, 0.0, 0.5, 2.0], [1, 1, 1, 1], width=1)
    advantages, _ = estimate("rloo_vectorized", rewards, mask, ["a", "a", "a", "b"])
    # each minus the mean of the other two; the lone row of b gets 0
    torch.testing.assert_close(advantages[:, 0], torch.tensor([0.75, -0.75, 0.0, 0.0]))


# ---------------------------------------------------------------------- optimal token baselines
def otb_case():
    """Prompt a: row 0 (length 2, reward 1), row 1 (length 3, reward 0.5); prompt b: row 2 alone.

    pi(y) = 0.5 except row 1's second token (0.25); sum pi^2 = 0.5 everywhere, so
    w = 1 - 2 pi + 0.5 is 0.5, or 1.0 at row 1's second token.
    """
    rewards, mask = outcome([1.0, 0.5, 1.0], [2, 3, 2], width=3)
    pi = torch.full((3, 3), 0.5)
    pi[1, 1] = 0.25
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=["a", "a", "b"],
        old_log_probs=pi.log(),
        sum_pi_squared=torch.full((3, 3), 0.5),
    )


def test_optimal_token_baseline_by_hand():
    advantages, returns = get_adv_estimator_fn("optimal_token_baseline")(**otb_case())
    # G: row 0 [1, 1, -], row 1 [.5, .5, .5]; W: row 0 [.5, 1], row 1 [.5, 1.5, 2]
    # t=0: B = (1 * .5 + .5 * .5) / (.5 + .5) = .75;  t=1: B = (1 * 1 + .5 * 1.5) / (1 + 1.5) = .7
    # t=2: row 1 is the group's one longest row, past row 0's length 2: baseline 0 (zero tail)
    # row 2 is alone: baseline 0, advantage = return
    expected = torch.tensor([[0.25, 0.3, 0.0], [-0.25, -0.2, 0.5], [1.0, 1.0, 0.0]])
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(returns, torch.tensor([[1.0, 1.0, 0.0], [0.5, 0.5, 0.5], [1.0, 1.0, 0.0]]))


def test_without_the_zero_tail_a_lone_longest_row_is_its_own_baseline():
    advantages, _ = get_adv_estimator_fn("optimal_token_baseline")(**otb_case(), handle_zero_tail=False)
    assert abs(advantages[1, 2].item()) < 1e-6  # B = .5 * 2 / 2: its own return
    torch.testing.assert_close(
        advantages[:, :2], torch.tensor([[0.25, 0.3], [-0.25, -0.2], [1.0, 1.0]]), rtol=0, atol=1e-6
    )


def test_rollout_is_weights_scale_the_path_weights_by_their_square():
    weights = torch.ones(3, 3)
    weights[1, 1] = 2.0  # w of row 1's second token becomes 4 * 1.0: W row 1 = [.5, 4.5, 5]
    advantages, _ = get_adv_estimator_fn("optimal_token_baseline")(**otb_case(), rollout_is_weights=weights)
    baseline = (1 * 1.0 + 0.5 * 4.5) / (1.0 + 4.5)
    torch.testing.assert_close(
        advantages[:2, :2], torch.tensor([[0.25, 1 - baseline], [-0.25, 0.5 - baseline]]), rtol=0, atol=1e-6
    )


def multi_turn_case():
    """Two rows of one prompt with three trained tokens each; row 0 has a tool token at column 1."""
    mask = torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]])
    rewards = torch.zeros(2, 4)
    rewards[0, 3] = 1.0
    return dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=["a", "a"],
        old_log_probs=torch.full((2, 4), 0.5).log(),
        sum_pi_squared=torch.full((2, 4), 0.5),
    )


def test_tir_compares_rows_at_the_same_count_of_trained_tokens():
    advantages, returns = get_adv_estimator_fn("tir_optimal_token_baseline")(**multi_turn_case())
    # w = .5 on every trained token, so the k-th trained tokens of both rows have equal W and
    # B_k = (1 * W + 0 * W) / 2W = .5 for every k
    expected = torch.tensor([[0.5, 0.0, 0.5, 0.5], [-0.5, -0.5, -0.5, 0.0]])
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)
    torch.testing.assert_close(returns[0], torch.tensor([1.0, 1.0, 1.0, 1.0]))


def test_by_column_the_tool_token_misaligns_the_rows():
    advantages, _ = get_adv_estimator_fn("optimal_token_baseline")(**multi_turn_case())
    # column 1: only row 1 is valid (B = 0); column 2: W = 1 (row 0) and 1.5 (row 1), B = 1 / 2.5;
    # column 3: only row 0, and both rows have 3 tokens (no lone longest row): B = its own return
    expected = torch.tensor([[0.5, 0.0, 0.6, 0.0], [-0.5, 0.0, -0.4, 0.0]])
    torch.testing.assert_close(advantages, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_tir_equals_the_column_form_on_right_padded_rows(seed):
    generator = torch.Generator().manual_seed(seed)
    rewards, mask, index = random_groups(seed, sizes=[3, 2, 1, 4])
    rewards = torch.rand(rewards.shape, generator=generator, dtype=torch.float64) * mask  # a reward on every token
    probs = torch.softmax(torch.randn(len(index), 5, 7, generator=generator, dtype=torch.float64), dim=-1)
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=index,
        old_log_probs=probs[..., 0].log(),
        sum_pi_squared=(probs**2).sum(-1),
    )
    by_column = get_adv_estimator_fn("optimal_token_baseline")(**inputs)
    by_count = get_adv_estimator_fn("tir_optimal_token_baseline")(**inputs)
    for column, count in zip(by_column, by_count):
        torch.testing.assert_close(count, column, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["optimal_token_baseline", "tir_optimal_token_baseline"])
def test_without_sum_pi_squared_the_estimator_names_the_switch(name):
    inputs = otb_case()
    inputs.pop("sum_pi_squared")
    with pytest.raises(AlgorithmInputError, match="calculate_sum_pi_squared=true"):
        get_adv_estimator_fn(name)(**inputs)


def test_the_start_up_check_refuses_what_would_leave_sum_pi_squared_out():
    require_sum_pi_squared("grpo", calculate_sum_pi_squared=False, bypass_mode=True)  # not an OTB estimator
    require_sum_pi_squared("optimal_token_baseline", calculate_sum_pi_squared=True, bypass_mode=False)
    with pytest.raises(AlgorithmConfigError, match="calculate_sum_pi_squared=true"):
        require_sum_pi_squared("optimal_token_baseline", calculate_sum_pi_squared=False, bypass_mode=False)
    with pytest.raises(AlgorithmConfigError, match="bypass_mode"):
        require_sum_pi_squared("tir_optimal_token_baseline", calculate_sum_pi_squared=True, bypass_mode=True)


# ------------------------------------------------------------------------ sum of squared probabilities
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sum_pi_squared_is_softmax_squared_summed(dtype):
    logits = (torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 4).to(dtype)
    expected = (torch.softmax(logits.double(), dim=-1) ** 2).sum(-1).float()
    result = sum_pi_squared_from_logits(logits)
    assert result.shape == (3, 5) and result.dtype == torch.float32
    torch.testing.assert_close(result, expected, rtol=1e-5, atol=1e-6)


def test_multi_output_sessions_refuse_an_optimal_token_baseline():
    from core_v1.algorithms import compute_multi_output_advantage

    case = {**otb_case(), "index": ["a", "a", "a"]}  # rows 1 and 2: the last outputs of two sessions
    with pytest.raises(AlgorithmInputError, match="not gae or an optimal token baseline"):
        compute_multi_output_advantage(
            get_adv_estimator_fn("optimal_token_baseline"), session_index=["s0", "s0", "s1"], **case
        )
