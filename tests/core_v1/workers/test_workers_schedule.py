"""The LR schedule: warmup, cosine and linear decay to min_lr_ratio, stepped once per update."""

import math

import pytest
import torch

from core_v1.config.schema import OptimConfig
from core_v1.workers import ActorEngine, WorkerConfigError
from core_v1.workers.training import build_lr_scheduler


def lrs_over(optim: OptimConfig, total_steps, updates: int) -> list[float]:
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=optim.lr)
    scheduler = build_lr_scheduler(optimizer, optim, total_steps, "actor_rollout_ref.actor.optim")
    lrs = []
    for _ in range(updates):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return lrs


def test_cosine_warms_up_from_min_lr_then_decays_to_it():
    # 10 updates, 20% warmup = 2 steps, floor 10%: hand-computed factors.
    optim = OptimConfig(lr=1.0, lr_scheduler_type="cosine", lr_warmup_steps_ratio=0.2, min_lr_ratio=0.1)
    lrs = lrs_over(optim, total_steps=10, updates=11)
    expected = [0.1, 0.55] + [0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * k / 8)) for k in range(9)]
    assert lrs == pytest.approx(expected)
    assert lrs[2] == pytest.approx(1.0) and lrs[6] == pytest.approx(0.55) and lrs[10] == pytest.approx(0.1)


def test_constant_warms_up_from_zero_over_explicit_steps():
    optim = OptimConfig(lr=2.0, lr_warmup_steps=4)
    assert lrs_over(optim, total_steps=None, updates=6) == pytest.approx([0.0, 0.5, 1.0, 1.5, 2.0, 2.0])


def test_no_warmup_means_the_full_lr_from_the_first_update():
    assert lrs_over(OptimConfig(lr=1.0), total_steps=None, updates=2) == pytest.approx([1.0, 1.0])


def test_linear_decays_to_min_lr_and_stays():
    optim = OptimConfig(lr=1.0, lr_scheduler_type="linear", lr_warmup_steps=0, min_lr_ratio=0.2)
    assert lrs_over(optim, total_steps=4, updates=6) == pytest.approx([1.0, 0.8, 0.6, 0.4, 0.2, 0.2])


def test_old_warmup_style_key_selects_the_schedule():
    optim = OptimConfig(lr=1.0, warmup_style="cosine", lr_warmup_steps=0)
    assert lrs_over(optim, total_steps=2, updates=3) == pytest.approx([1.0, 0.5, 0.0])


def test_a_decaying_schedule_without_a_step_count_says_how_to_give_one(make_config, make_batch):
    actor = ActorEngine(make_config("actor_rollout_ref.actor.optim.lr_scheduler_type=cosine"))
    with pytest.raises(WorkerConfigError, match="set_total_training_steps"):
        actor.update_policy(make_batch())


def test_the_engine_steps_the_schedule_once_per_update(make_config, make_batch):
    actor = ActorEngine(
        make_config(
            "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio=0.5",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",  # 4 optimizer steps per update
            "actor_rollout_ref.actor.optim.lr_scheduler_type=cosine",
        )
    )
    actor.set_total_training_steps(4)
    lrs = [actor.update_policy(make_batch())["actor/lr"] for _ in range(3)]
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3])
    with pytest.raises(WorkerConfigError, match="before the first update"):
        actor.set_total_training_steps(8)


def test_a_null_min_lr_ratio_is_valid_for_the_constant_schedule_only():
    # verl 0.7's optimizer config defaults min_lr_ratio to None; its constant schedule never reads it.
    assert lrs_over(OptimConfig(lr=1.0, min_lr_ratio=None), total_steps=None, updates=2) == pytest.approx([1.0, 1.0])
    with pytest.raises(WorkerConfigError, match="min_lr_ratio is null.*set actor_rollout_ref.actor.optim.min_lr_ratio"):
        lrs_over(OptimConfig(lr=1.0, lr_scheduler_type="cosine", min_lr_ratio=None), total_steps=4, updates=1)
