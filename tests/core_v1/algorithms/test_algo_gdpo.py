"""verl's GDPO estimator against advantages computed by hand, its inputs and refusals, and the
verl keys that select it reaching the advantage stage (V1) and V0's compute_advantage."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from core_v1.algorithms import AlgorithmInputError, compute_session_advantage, get_adv_estimator_fn
from core_v1.config import ConfigError, load_config
from core_v1.trainer.stages import advantage_stage

EPSILON = 1e-6


def gdpo_by_hand(
    components: dict[str, list[float]],
    groups: list[str],
    lengths: list[int],
    width: int,
    weights: dict[str, float],
    divide_by_std: bool = True,
) -> list[list[float]]:
    """GRPO per component within each group (a group of one: mean 0, std 1), the weighted sum,
    then whitening over every valid token (unbiased variance), zero on padding."""
    rows = len(groups)
    summed = [0.0] * rows
    for key, scores in components.items():
        for row in range(rows):
            members = [scores[other] for other in range(rows) if groups[other] == groups[row]]
            mean, std = (statistics.mean(members), statistics.stdev(members)) if len(members) > 1 else (0.0, 1.0)
            advantage = (scores[row] - mean) / (std + EPSILON) if divide_by_std else scores[row] - mean
            summed[row] += weights[key] * advantage
    tokens = [summed[row] for row in range(rows) for _ in range(lengths[row])]
    mean = statistics.mean(tokens)
    scale = 1 / math.sqrt(statistics.variance(tokens) + 1e-8)
    return [
        [(summed[row] - mean) * scale if position < lengths[row] else 0.0 for position in range(width)]
        for row in range(rows)
    ]


GROUPS = ["a", "a", "a", "b", "b", "c"]
LENGTHS = [3, 1, 2, 3, 2, 2]
ACCURACY = [1.0, 0.0, 0.0, 3.0, -3.0, 2.0]
FORMAT = [0.5, 1.0, 1.0, 0.0, 0.0, 1.0]
EXTRA = [{"accuracy_reward": acc, "format_reward": fmt, "other": 7.0} for acc, fmt in zip(ACCURACY, FORMAT)]


def mask_of(lengths, width=3):
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()


def token_scores(scores, lengths, width=3):
    """Scores on each row's last valid token, as the reward stage writes them."""
    tokens = torch.zeros(len(scores), width)
    tokens[torch.arange(len(scores)), torch.tensor(lengths) - 1] = torch.tensor(scores)
    return tokens


def test_gdpo_normalises_each_component_in_its_group_then_whitens_the_weighted_sum():
    mask = mask_of(LENGTHS)
    advantages, returns = get_adv_estimator_fn("gdpo")(
        token_level_rewards=token_scores([9.0] * 6, LENGTHS),
        response_mask=mask,
        index=GROUPS,
        reward_extra=EXTRA,
        gdpo_reward_keys=["accuracy_reward", "format_reward"],
        gdpo_reward_weights=[1.0, 0.5],
    )
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
        GROUPS,
        LENGTHS,
        3,
        {"accuracy_reward": 1.0, "format_reward": 0.5},
    )
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=1e-5)
    assert torch.equal(advantages, returns)


def test_gdpo_is_not_grpo_on_the_summed_reward():
    # Group "b"'s accuracy spread (3 vs -3) would drown its format signal in the sum; per component
    # each is scaled to unit spread first. Equal weights here.
    mask = mask_of(LENGTHS)
    summed = [a + f for a, f in zip(ACCURACY, FORMAT)]
    gdpo, _ = get_adv_estimator_fn("gdpo")(
        token_level_rewards=token_scores(summed, LENGTHS),
        response_mask=mask,
        index=GROUPS,
        reward_extra=EXTRA,
        gdpo_reward_keys=["accuracy_reward", "format_reward"],
    )
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
        GROUPS,
        LENGTHS,
        3,
        {"accuracy_reward": 1.0, "format_reward": 1.0},
    )
    torch.testing.assert_close(gdpo, torch.tensor(expected), atol=1e-5, rtol=1e-5)
    grpo, _ = get_adv_estimator_fn("grpo")(
        token_level_rewards=token_scores(summed, LENGTHS), response_mask=mask, index=GROUPS
    )
    assert not torch.allclose(gdpo, grpo, atol=1e-2)


def test_gdpo_without_std_division_when_called_so():
    mask = mask_of(LENGTHS)
    advantages, _ = get_adv_estimator_fn("gdpo")(
        token_level_rewards=torch.zeros(6, 3),
        response_mask=mask,
        index=np.array(GROUPS, dtype=object),
        reward_extra=np.array(EXTRA, dtype=object),
        gdpo_reward_keys=["accuracy_reward"],
        norm_adv_by_std_in_grpo=False,
    )
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY}, GROUPS, LENGTHS, 3, {"accuracy_reward": 1.0}, divide_by_std=False
    )
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=1e-5)


def test_gdpo_sees_the_last_output_of_each_session_and_broadcasts_it():
    # Session "s0" has two outputs (rows 0 and 1, the last carries the reward components); the
    # first output's extras hold none of them and must not be read.
    sessions = ["s0", "s0", "s1", "s2", "s3"]
    groups = ["a", "a", "a", "b", "b"]
    lengths = [2, 3, 1, 2, 3]
    extra = [{}, {"acc": 1.0}, {"acc": 0.0}, {"acc": 2.0}, {"acc": 5.0}]
    advantages, _ = compute_session_advantage(
        get_adv_estimator_fn("gdpo"),
        sessions,
        [0, 1, 0, 0, 0],
        token_level_rewards=torch.zeros(5, 3),
        response_mask=mask_of(lengths),
        index=groups,
        reward_extra=extra,
        gdpo_reward_keys=["acc"],
    )
    last = gdpo_by_hand({"acc": [1.0, 0.0, 2.0, 5.0]}, ["a", "a", "b", "b"], [3, 1, 2, 3], 3, {"acc": 1.0})
    session_value = last[0][0]
    expected = [[session_value, session_value, 0.0], *last]
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(reward_extra=EXTRA), "needs algorithm.gdpo_reward_keys"),
        (dict(gdpo_reward_keys=["accuracy_reward"]), "needs `reward_extra`"),
        (
            dict(reward_extra=EXTRA, gdpo_reward_keys=["accuracy_reward", "format_reward"], gdpo_reward_weights=[1.0]),
            "1 weights for 2 keys",
        ),
        (
            dict(
                reward_extra=EXTRA[:5] + [{"accuracy_reward": 1.0}],
                gdpo_reward_keys=["accuracy_reward", "format_reward"],
            ),
            r"'format_reward' .* is missing on 1 of 6 rows: .*row 5 has \['accuracy_reward'\]",
        ),
        (dict(reward_extra=EXTRA[:4], gdpo_reward_keys=["accuracy_reward"]), "4 rows for a batch of 6"),
    ],
)
def test_gdpo_says_which_input_is_missing(options, message):
    with pytest.raises(AlgorithmInputError, match=message):
        get_adv_estimator_fn("gdpo")(
            token_level_rewards=torch.zeros(6, 3), response_mask=mask_of(LENGTHS), index=GROUPS, **options
        )


# -------------------------------------------------------------------------- selected by the config
BASE = ["data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused", "algorithm.adv_estimator=gdpo"]
KEYS = "algorithm.gdpo_reward_keys=[accuracy_reward,format_reward]"


def stage_batch() -> TensorDict:
    return TensorDict(
        {"token_level_scores": token_scores([9.0] * 6, LENGTHS), "response_mask": mask_of(LENGTHS)}, batch_size=[6]
    )


def test_the_config_selects_gdpo_and_its_keys_reach_the_advantage_stage():
    config = load_config([*BASE, KEYS, "algorithm.gdpo_reward_weights=[1.0,0.5]"])
    assert config.algorithm.gdpo_reward_keys == ["accuracy_reward", "format_reward"]
    metrics = {}
    batch = advantage_stage(
        stage_batch(),
        metrics,
        algorithm=config.algorithm,
        kl_ctrl=None,
        uids=GROUPS,
        sessions=[str(row) for row in range(6)],
        output_index=None,
        reward_extra=EXTRA,
    )
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
        GROUPS,
        LENGTHS,
        3,
        {"accuracy_reward": 1.0, "format_reward": 0.5},
    )
    torch.testing.assert_close(batch["advantages"], torch.tensor(expected), atol=1e-5, rtol=1e-5)
    # verl's per-component statistics (population std)
    assert metrics["gdpo/accuracy_reward/mean"] == pytest.approx(statistics.mean(ACCURACY))
    assert metrics["gdpo/accuracy_reward/std"] == pytest.approx(statistics.pstdev(ACCURACY), rel=1e-6)
    assert metrics["gdpo/format_reward/max"] == 1.0 and metrics["gdpo/format_reward/min"] == 0.0


def test_verls_gdpo_script_overrides_pass_the_shim():
    from shims.config import LegacyConfigShim

    # As verl's examples/gdpo_trainer/run_qwen1_5b_gdpo.sh writes them (the `+` added a key verl's YAML lacked).
    migrated = LegacyConfigShim().migrate_overrides(
        ["algorithm.adv_estimator=gdpo", '+algorithm.gdpo_reward_keys=["accuracy_reward", "format_reward"]']
    )
    config = load_config(["data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused", *migrated])
    assert config.algorithm.adv_estimator == "gdpo"
    assert config.algorithm.gdpo_reward_keys == ["accuracy_reward", "format_reward"]


def test_v0_compute_advantage_reads_gdpo_keys_from_the_algorithm_section():
    from legacy_v0.protocol import DataProto
    from legacy_v0.trainer import compute_advantage

    config = load_config([*BASE, KEYS])
    # verl keeps each component as a column of its own; rlbridge's V0 trainer as `reward_extra` rows.
    columns = {
        "uid": np.array(GROUPS, dtype=object),
        "accuracy_reward": np.array(ACCURACY),
        "format_reward": np.array(FORMAT),
    }
    for non_tensors in (columns, {"uid": np.array(GROUPS, dtype=object), "reward_extra": np.array(EXTRA)}):
        data = DataProto.from_dict(
            tensors={"token_level_rewards": token_scores([9.0] * 6, LENGTHS), "response_mask": mask_of(LENGTHS)},
            non_tensors=non_tensors,
        )
        data = compute_advantage(data, "gdpo", config=config.algorithm)
        expected = gdpo_by_hand(
            {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
            GROUPS,
            LENGTHS,
            3,
            {"accuracy_reward": 1.0, "format_reward": 1.0},
        )
        torch.testing.assert_close(data.batch["advantages"], torch.tensor(expected), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([], "needs algorithm.gdpo_reward_keys"),
        ([KEYS, "algorithm.gdpo_reward_weights=[1.0]"], "1 weights for 2 algorithm.gdpo_reward_keys"),
        ([KEYS, "algorithm.norm_adv_by_std_in_grpo=false"], "GDPO divides each reward component by its group std"),
    ],
)
def test_the_config_refuses_what_gdpo_cannot_run(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config([*BASE, *overrides])


def test_v1_trainers_advantage_stage_hands_the_reward_extra_column_to_gdpo():
    """GDPO whitens over tokens, so V1 runs it as a stage function over the rows' tensors (on rank 0;
    here, without ranks, in this process) with the handle's `reward_extra` column."""
    from types import SimpleNamespace

    from core_v1.batch.meta import BatchMeta
    from core_v1.trainer.base import PPOTrainer
    from core_v1.transfer_store import make_transfer_store, trajectory_key

    store = make_transfer_store("local")
    keys = [trajectory_key(f"{ord(group):016x}", row) for row, group in enumerate(GROUPS)]
    store.put(
        "step",
        {
            key: {
                "prompt_ids": torch.tensor([5]),
                "response_ids": torch.arange(1, length + 1),
                "response_mask": torch.ones(length, dtype=torch.long),
            }
            for key, length in zip(keys, LENGTHS)
        },
    )
    batch = BatchMeta(
        "step",
        keys,
        {
            "uid": GROUPS,
            "session_id": list(range(6)),
            "output_index": [0] * 6,
            "score": [9.0] * 6,
            "reward_extra": EXTRA,
            "model_tokens": LENGTHS,
            "prompt_len": [1] * 6,
            "response_len": LENGTHS,
        },
    )
    trainer = PPOTrainer.__new__(PPOTrainer)  # only the advantage stage's inputs, as the sessions tests do
    trainer.config, trainer.kl_ctrl = load_config([*BASE, KEYS]), None
    trainer.components = SimpleNamespace(store=store, workers=None)
    trainer.replay_buffer = SimpleNamespace(pad_token_id=0)
    metrics = {}
    batch = trainer._compute_advantage(batch, metrics)
    stored = store.get("step", keys, fields=["advantages"])["advantages"]
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
        GROUPS,
        LENGTHS,
        3,
        {"accuracy_reward": 1.0, "format_reward": 1.0},
    )
    for row, length in enumerate(LENGTHS):
        torch.testing.assert_close(stored[row], torch.tensor(expected[row][:length]), atol=1e-5, rtol=1e-5)
    assert "advantages" in batch.fields and "gdpo/format_reward/mean" in metrics


def test_v0_trainers_advantage_stage_hands_its_reward_extra_column_to_gdpo():
    from legacy_v0.protocol import DataProto
    from legacy_v0.trainer import RayPPOTrainer

    trainer = RayPPOTrainer.__new__(RayPPOTrainer)  # only the advantage stage's inputs
    trainer.config, trainer.kl_ctrl_in_reward = load_config([*BASE, KEYS]), None
    data = DataProto.from_dict(
        tensors=dict(stage_batch().items()),
        non_tensors={"uid": np.array(GROUPS, dtype=object), "reward_extra": np.array(EXTRA)},
    )
    advantages = trainer._compute_advantage(data, {}).batch["advantages"]
    expected = gdpo_by_hand(
        {"accuracy_reward": ACCURACY, "format_reward": FORMAT},
        GROUPS,
        LENGTHS,
        3,
        {"accuracy_reward": 1.0, "format_reward": 1.0},
    )
    torch.testing.assert_close(advantages, torch.tensor(expected), atol=1e-5, rtol=1e-5)
