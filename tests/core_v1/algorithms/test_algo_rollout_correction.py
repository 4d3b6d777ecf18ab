"""Rollout-correction weights, rejection masks, metrics and config validation; batch-normalised
weights selected by verl's key, in one process and over two ranks."""

import dataclasses
import json
import math
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

from core_v1.algorithms import (
    AlgorithmConfigError,
    AlgorithmInputError,
    RolloutCorrectionConfig,
    compute_offpolicy_metrics,
    compute_policy_loss_bypass_mode,
    compute_rollout_correction,
    compute_rollout_is_weights,
    compute_rollout_rejection_mask,
)
from core_v1.algorithms.rollout_correction import center_group_advantages
from core_v1.config import load_config
from core_v1.trainer.off_policy import apply_rollout_correction, correction_config
from shims.config import LegacyConfigShim

REPO_ROOT = Path(__file__).resolve().parents[3]


def log(*ratios):
    return torch.log(torch.tensor([list(ratios)]))


def test_token_is_truncates_at_threshold():
    weights, metrics = compute_rollout_is_weights(log(0.5, 1.5, 3.0), torch.ones(1, 3), "token", upper=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.5, 2.0]]))
    assert metrics["rollout_is_ratio_fraction_high"] == pytest.approx(1 / 3)
    assert metrics["rollout_is_ratio_fraction_low"] == 0.0  # 0.5 is not below 1/2
    assert metrics["rollout_is_clipped_fraction"] == pytest.approx(1 / 3)  # only 3.0 was truncated
    assert metrics["rollout_is_mean"] == pytest.approx(4 / 3)
    assert not weights.requires_grad


def test_token_icepop_zeroes_weights_outside_bounds():
    upper, lower = RolloutCorrectionConfig(rollout_is="token", rollout_is_threshold="0.6_2.5").is_bounds
    weights, metrics = compute_rollout_is_weights(log(0.5, 1.5, 3.0), torch.ones(1, 3), "token", upper, lower)
    torch.testing.assert_close(weights, torch.tensor([[0.0, 1.5, 0.0]]))
    assert metrics["rollout_is_clipped_fraction"] == pytest.approx(2 / 3)  # both zeroed weights count


def test_sequence_is_multiplies_token_ratios_and_zeroes_padding():
    log_ratio = torch.log(torch.tensor([[2.0, 1.5], [0.5, 7.0]]))
    mask = torch.tensor([[1, 1], [1, 0]])
    weights, metrics = compute_rollout_is_weights(log_ratio, mask, "sequence", upper=5.0)
    torch.testing.assert_close(weights, torch.tensor([[3.0, 3.0], [0.5, 0.0]]))
    truncated, _ = compute_rollout_is_weights(log_ratio, mask, "sequence", upper=2.0)
    torch.testing.assert_close(truncated, torch.tensor([[2.0, 2.0], [0.5, 0.0]]))
    assert metrics["rollout_is_ratio_fraction_high"] == 0.0 and metrics["rollout_is_ratio_fraction_low"] == 0.0


def test_batch_normalisation_per_token_and_per_sequence():
    weights, metrics = compute_rollout_is_weights(
        log(0.5, 1.5, 3.0), torch.ones(1, 3), "token", upper=2.0, batch_normalize=True
    )
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.5, 2.0]]) * 3 / 4)
    assert metrics["rollout_is_batch_norm_factor"] == pytest.approx(4 / 3)
    log_ratio = torch.log(torch.tensor([[2.0, 1.5, 1.0], [0.5, 1.0, 1.0]]))
    weights, _ = compute_rollout_is_weights(
        log_ratio, torch.tensor([[1, 1, 1], [1, 0, 0]]), "sequence", upper=5.0, batch_normalize=True
    )
    # sequence weights 3 and 0.5 count once each: mean 1.75
    torch.testing.assert_close(weights, torch.tensor([[3.0, 3.0, 3.0], [0.5, 0.0, 0.0]]) / 1.75)


def test_token_k1_rejection_uses_ratio_bounds():
    criteria = RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold="0.5_2.0").rs_criteria
    mask, metrics = compute_rollout_rejection_mask(log(0.4, 1.0, 2.5), torch.ones(1, 3), criteria)
    torch.testing.assert_close(mask, torch.tensor([[0.0, 1.0, 0.0]]))
    assert metrics["rollout_rs_masked_fraction"] == pytest.approx(2 / 3)
    assert metrics["rollout_rs_seq_masked_fraction"] == 1.0


def test_asymmetric_k1_bounds_apply_to_minus_log_ratio_as_in_verl():
    # keep log 0.5 <= -log r <= log 4, i.e. r in [1/4, 2]
    criteria = RolloutCorrectionConfig(rollout_rs="token_k1", rollout_rs_threshold="0.5_4.0").rs_criteria
    mask, _ = compute_rollout_rejection_mask(log(0.3, 3.0), torch.ones(1, 2), criteria)
    torch.testing.assert_close(mask, torch.tensor([[1.0, 0.0]]))


def test_sequence_criteria_reject_whole_sequences():
    log_ratio = torch.tensor([[0.1, -0.1], [0.5, 0.0]])
    mask = torch.tensor([[1, 1], [1, 1]])
    k3_rows = [((math.exp(0.1) - 1.1) + (math.exp(-0.1) - 0.9)) / 2, (math.exp(0.5) - 1.5) / 2]
    assert k3_rows[0] < 0.01 < k3_rows[1]
    criteria = RolloutCorrectionConfig(rollout_rs="seq_mean_k3", rollout_rs_threshold=0.01).rs_criteria
    kept, _ = compute_rollout_rejection_mask(log_ratio, mask, criteria)
    torch.testing.assert_close(kept, torch.tensor([[1, 1], [0, 0]]))
    criteria = RolloutCorrectionConfig(rollout_rs="seq_max_k2", rollout_rs_threshold=0.1).rs_criteria
    kept, _ = compute_rollout_rejection_mask(log_ratio, mask, criteria)  # row 1 has 0.5^2/2 = 0.125
    torch.testing.assert_close(kept, torch.tensor([[1, 1], [0, 0]]))


def test_several_criteria_must_all_pass():
    config = RolloutCorrectionConfig(rollout_rs="seq_sum_k1,token_k2", rollout_rs_threshold="0.5_2.0,0.1")
    # row 0: sum of k1 = -0.6, inside [ln 0.5, ln 2]; row 1: its middle token has k2 = 0.125 > 0.1
    log_ratio = torch.tensor([[0.3, 0.3, 0.0], [0.0, 0.5, 0.0]])
    kept, metrics = compute_rollout_rejection_mask(log_ratio, torch.ones(2, 3), config.rs_criteria)
    torch.testing.assert_close(kept, torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]]))
    assert metrics["rollout_rs_token_k2_masked_fraction"] == pytest.approx(1 / 6)
    assert metrics["rollout_rs_seq_sum_k1_masked_fraction"] == 0.0


def test_decoupled_correction_combines_weights_mask_and_metrics():
    training = torch.log(torch.tensor([[0.5, 0.6, 0.9]]))
    rollout = torch.log(torch.tensor([[0.5, 0.3, 0.9]]))  # ratios 1, 2, 1
    config = RolloutCorrectionConfig(
        rollout_is="token", rollout_is_threshold=1.5, rollout_rs="token_k2", rollout_rs_threshold=0.2
    )
    result = compute_rollout_correction(training, rollout, torch.ones(1, 3), config)
    torch.testing.assert_close(result.rollout_is_weights, torch.tensor([[1.0, 1.5, 1.0]]))
    torch.testing.assert_close(result.response_mask, torch.tensor([[1.0, 0.0, 1.0]]))  # (ln 2)^2/2 = 0.24
    assert result.metrics["rollout_corr/kl"] == pytest.approx(-math.log(2) / 3, rel=1e-5)
    assert all(name.startswith("rollout_corr/") for name in result.metrics)


def test_offpolicy_metrics_on_identical_policies():
    log_prob = torch.log(torch.tensor([[0.5, 0.25]]))
    metrics = compute_offpolicy_metrics(log_prob, log_prob.clone(), torch.ones(1, 2))
    assert metrics["kl"] == 0.0 and metrics["k3_kl"] == 0.0 and metrics["chi2_token"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["training_ppl"] == pytest.approx(math.exp(-(math.log(0.5) + math.log(0.25)) / 2))


def test_shape_mismatch_names_the_likely_cause():
    with pytest.raises(AlgorithmInputError, match="calculate_log_probs"):
        compute_rollout_correction(torch.zeros(1, 3), torch.zeros(1, 2), torch.ones(1, 3), RolloutCorrectionConfig())


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"rollout_is": "tokens"}, "rollout_is='tokens' is unknown"),
        ({"loss_type": "ppo"}, "ppo_clip, reinforce"),
        ({"rollout_rs": "geometric", "rollout_rs_threshold": 2.0}, "'geometric' is now 'seq_mean_k1'"),
        ({"rollout_rs": "token_k3"}, "rollout_rs_threshold is null"),
        ({"rollout_rs": "token_k3", "rollout_rs_threshold": "0.5_2.0"}, "single upper bound"),
        ({"rollout_rs": "token_k1,token_k2", "rollout_rs_threshold": "1,2,3"}, "3 values for 2 criteria"),
        ({"rollout_is": "token", "rollout_is_threshold": "2.0_0.5"}, "lower <= upper"),
        ({"rollout_is": "sequence", "rollout_is_threshold": "two"}, "not a number"),
        ({"rollout_is": "token", "rollout_is_threshold": None}, "got None"),
    ],
)
def test_config_mistakes_are_explained(settings, message):
    with pytest.raises(AlgorithmConfigError, match=message):
        RolloutCorrectionConfig(**settings)


def test_the_is_threshold_is_not_read_without_is_weights():
    # As in verl, where scripts write rollout_is=null with rollout_is_threshold=null.
    assert not RolloutCorrectionConfig(rollout_is_threshold=None).enabled


def test_from_dict_rejects_unknown_and_removed_keys():
    config = RolloutCorrectionConfig.from_dict(
        {"rollout_is": "sequence", "bypass_mode": True, "debug_rollout_actor_probs": False}
    )
    assert config.enabled and config.rollout_is == "sequence"
    assert not RolloutCorrectionConfig.from_dict(None).enabled
    with pytest.raises(AlgorithmConfigError, match="use loss_type"):
        RolloutCorrectionConfig.from_dict({"use_policy_gradient": True})
    with pytest.raises(AlgorithmConfigError, match="lower_upper"):
        RolloutCorrectionConfig.from_dict({"rollout_rs_threshold_lower": 0.5})
    with pytest.raises(AlgorithmConfigError, match="unknown algorithm.rollout_correction keys"):
        RolloutCorrectionConfig.from_dict({"rollout_isx": "token"})


def test_nan_log_probs_on_padding_do_not_leak():
    training = torch.tensor([[-1.0, float("nan")]])
    rollout = torch.tensor([[-1.2, -0.5]])
    config = RolloutCorrectionConfig(rollout_is="sequence", rollout_rs="seq_mean_k3", rollout_rs_threshold=1.0)
    result = compute_rollout_correction(training, rollout, torch.tensor([[1, 0]]), config)
    torch.testing.assert_close(result.rollout_is_weights, torch.tensor([[math.exp(0.2), 0.0]]))
    torch.testing.assert_close(result.response_mask, torch.tensor([[1, 0]]))
    assert all(math.isfinite(value) for value in result.metrics.values())


def test_group_advantages_are_centred_under_the_importance_weights():
    # Group "a": zero-sum advantages, but the weights favour the first sample (the policy moved to
    # it): weighted, the group would push up. Group "b" has equal weights and stays as it is.
    advantages = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, 0.0], [0.5, 0.5, 0.5], [-0.5, -0.5, -0.5]])
    weights = torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.7, 0.7, 0.7], [0.7, 0.7, 0.7]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
    centred, metrics = center_group_advantages(advantages, weights, mask, ["a", "a", "b", "b"])
    row_weight = torch.tensor([1.5, 1.0])
    assert float((row_weight * centred[:2, 0]).sum()) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(centred[2:], advantages[2:])
    assert centred[0, 1] == centred[0, 0] and centred[0, 2] == 0.0  # one value per row, padding stays 0
    assert metrics["rollout_is_advantage_shift"] == pytest.approx((0.2 + 0.0) / 2)  # (1.5 - 1) / 2.5 in "a"
    unit, _ = center_group_advantages(advantages, torch.ones_like(weights), mask, ["a", "a", "b", "b"])
    torch.testing.assert_close(unit, advantages * mask)  # on policy nothing moves


# ---------------------------------------------------- rollout_is_batch_normalize from the config
BASE = ["data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused"]
NORMALIZE = "algorithm.rollout_correction.rollout_is_batch_normalize"


def correction_batch():
    """Two rows whose token ratios are 0.5, 1.5, 3.0 and 2.0 (one padded token)."""
    rollout = torch.log(torch.tensor([[0.2, 0.2, 0.1], [0.25, 0.5, 0.5]]))
    training = torch.log(torch.tensor([[0.1, 0.3, 0.3], [0.5, 0.5, 0.5]]))
    return TensorDict(
        {
            "old_log_probs": training,
            "rollout_log_probs": rollout,
            "response_mask": torch.tensor([[1, 1, 1], [1, 0, 0]]),
        },
        batch_size=[2],
    )


@pytest.mark.parametrize(
    "level, normalized, factor",
    [
        # token: truncated weights 0.5, 1.5, 2, 2 (mean 1.5); sequence: 0.5 * 1.5 * 3 = 2.25 -> 2, and 2 (mean 2)
        ("token", [[0.5 / 1.5, 1.0, 2 / 1.5], [2 / 1.5, 0.0, 0.0]], 1.5),
        ("sequence", [[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]], 2.0),
    ],
)
def test_batch_normalize_from_the_config_rescales_the_batch_weights_to_mean_one(level, normalized, factor):
    def weights_of(*overrides):
        config = load_config([*BASE, f"algorithm.rollout_correction.rollout_is={level}", *overrides])
        metrics = {}
        batch = apply_rollout_correction(
            correction_batch(), correction_config(config.algorithm.rollout_correction), metrics
        )
        return batch["rollout_is_weights"], metrics

    weights, metrics = weights_of(f"{NORMALIZE}=true")
    torch.testing.assert_close(weights, torch.tensor(normalized))
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(factor)
    assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(factor)  # measured before normalising
    plain, metrics = weights_of()
    torch.testing.assert_close(plain, torch.tensor(normalized) * factor)
    assert "rollout_corr/rollout_is_batch_norm_factor" not in metrics


def test_verls_batch_normalize_key_passes_the_shim_and_reaches_the_bypass_loss():
    migrated = LegacyConfigShim().migrate_overrides(
        [
            f"{NORMALIZE}=true",
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.bypass_mode=true",
            "algorithm.rollout_correction.loss_type=reinforce",
        ]
    )
    config = load_config([*BASE, *migrated])
    assert config.algorithm.rollout_correction.rollout_is_batch_normalize is True
    batch = correction_batch()
    log_prob = batch["old_log_probs"].clone().requires_grad_(True)
    advantages = torch.ones(2, 3)
    loss, metrics = compute_policy_loss_bypass_mode(
        batch["rollout_log_probs"],
        log_prob,
        advantages,
        batch["response_mask"],
        rollout_correction=dataclasses.asdict(config.algorithm.rollout_correction),
    )
    # REINFORCE with the normalised token weights 1/3, 1, 4/3, 4/3: token-mean of -w * log pi.
    logs = [math.log(0.1), math.log(0.3), math.log(0.3), math.log(0.5)]
    expected = -(logs[0] / 3 + logs[1] + 4 / 3 * logs[2] + 4 / 3 * logs[3]) / 4
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(1.5)


LEVELS = ("token", "sequence")
RANK_CODE = """
import json, os, sys, torch
import torch.distributed as dist
from core_v1.algorithms import compute_rollout_is_weights
dist.init_process_group("gloo")
rank = dist.get_rank()
log_ratio = torch.log(torch.tensor([[[0.5, 1.5, 3.0], [2.0, 1.0, 1.0]], [[1.2, 0.8, 1.0], [0.9, 1.1, 0.7]]][rank]))
mask = torch.tensor([[[1, 1, 1], [1, 0, 0]], [[1, 1, 0], [1, 1, 1]]][rank])
result = {"rank": rank}
for level in sys.argv[1:]:
    weights, metrics = compute_rollout_is_weights(log_ratio, mask, level, upper=2.0, batch_normalize=True)
    result[level] = {"weights": weights.tolist(), "factor": metrics["rollout_is_batch_norm_factor"]}
print(json.dumps(result))
dist.barrier()  # rank 0 hosts the rendezvous store: gloo aborts a rank whose peer tears down mid-exchange
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def two_rank_weights() -> dict[str, list[dict]]:
    """{level: each rank's weights and batch-norm factor}: two gloo ranks (two Python processes that
    start torch, once for both levels), each normalising its own micro-batch."""
    port = socket.socket()
    port.bind(("127.0.0.1", 0))
    environment = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port.getsockname()[1]),
        "WORLD_SIZE": "2",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    port.close()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_CODE, *LEVELS],
            env={**environment, "RANK": str(rank)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = [process.communicate(timeout=240)[0] for process in ranks]
    assert all(process.returncode == 0 for process in ranks), outputs
    results = sorted((json.loads(output.strip().splitlines()[-1]) for output in outputs), key=lambda r: r["rank"])
    return {level: [result[level] for result in results] for level in LEVELS}


@pytest.mark.slow
@pytest.mark.parametrize("level", LEVELS)
def test_batch_normalize_takes_one_mean_over_every_rank_as_verl_does(level, two_rank_weights):
    # In bypass mode each training rank computes the weights of its own micro-batch; with
    # torch.distributed initialised they share the mean of all ranks' weights, as in verl.
    ranks = two_rank_weights[level]
    whole = torch.log(torch.tensor([[0.5, 1.5, 3.0], [2.0, 1.0, 1.0], [1.2, 0.8, 1.0], [0.9, 1.1, 0.7]]))
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 1]])
    expected, metrics = compute_rollout_is_weights(whole, mask, level, upper=2.0, batch_normalize=True)
    torch.testing.assert_close(torch.tensor(ranks[0]["weights"] + ranks[1]["weights"]), expected)
    assert ranks[0]["factor"] == ranks[1]["factor"] == pytest.approx(metrics["rollout_is_batch_norm_factor"])


@pytest.mark.parametrize(
    "section, loss_mode, trains",
    [
        ({}, "vanilla", "vanilla"),
        ({"bypass_mode": True}, "vanilla", "bypass_mode"),  # verl (0.7 on) trains bypass mode with its own loss
        ({"bypass_mode": True, "loss_type": "reinforce"}, "vanilla", "bypass_mode"),
        ({"bypass_mode": True}, "dppo_tv", "dppo_tv"),  # another objective, anchored on the rollout's log-probs
    ],
)
def test_the_loss_the_actor_trains_with(section, loss_mode, trains):
    assert RolloutCorrectionConfig.from_dict(section).training_loss_mode(loss_mode) == trains


def test_bypass_options_only_the_bypass_loss_has_are_refused_with_another_loss():
    config = RolloutCorrectionConfig.from_dict({"bypass_mode": True, "loss_type": "reinforce"})
    with pytest.raises(AlgorithmConfigError, match="loss_type=reinforce needs the bypass loss.*loss_mode=gspo"):
        config.training_loss_mode("gspo")


@pytest.mark.parametrize("written, loss_type", [("True", "reinforce"), ("false", "ppo_clip")])
def test_verl_06s_use_policy_gradient_moves_to_loss_type(written, loss_type, capsys):
    migrated = LegacyConfigShim().migrate_overrides(
        ["algorithm.rollout_correction.bypass_mode=true", f"algorithm.rollout_correction.use_policy_gradient={written}"]
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if "use_policy_gradient" in line]
    assert len(lines) == 1 and f"-> algorithm.rollout_correction.loss_type={loss_type}" in lines[0]
    config = load_config([*BASE, *migrated])
    assert config.algorithm.rollout_correction.loss_type == loss_type
    assert (
        RolloutCorrectionConfig.from_dict(dataclasses.asdict(config.algorithm.rollout_correction)).training_loss_mode(
            config.actor_rollout_ref.actor.policy_loss.loss_mode
        )
        == "bypass_mode"
    )
