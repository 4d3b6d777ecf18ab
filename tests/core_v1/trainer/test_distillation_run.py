"""On-policy distillation end to end on the CPU: the tiny quickstart student, trained with the
distillation loss alone (`use_task_rewards=false`, supervised k3, verl's default mode), moves toward
a different, sharper teacher (the student's body under another output layer, drawn at random and
scaled up). Answers are one token long, so that every sampled token's context is a prompt. The run
names two teachers routed by the rows' `data_source` (verl's multi-teacher form): the student's own
weights for "other", the sharp teacher for "arithmetic", the quickstart rows' source.

Two measurements: the trainer's own per-step estimate on that step's samples
(`distillation/teacher_kl`, the mean of log pi_student - log pi_teacher over the sampled tokens),
and an exact one made here from the saved weights alone: KL(student || teacher) over the whole
vocabulary at the answer position of the validation prompts, before and after training. Measured
(2026-12-05, 6 steps, ~65 s on the shared 2-core machine at load 20): the estimate per step 0.77,
0.73, 0.57, 0.18, 0.14, 0.05; the exact KL 1.07 -> 0.06.

(With two-token answers, 8 steps, the first position's exact KL fell as far (1.07 -> 0.16) while the
second's, whose contexts are spread over every first token the student samples, rose: 1.05 -> 1.28.)
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from core_v1.main_ppo import main
from core_v1.utils.tracking import read_metrics
from tests.conftest import local_ray, quickstart_overrides

STEPS = 6
# The teacher: the student's body with another output layer, drawn at random and sharper.
TEACHER_SHARPNESS = 10.0


def _make_teacher(student: Path, root: Path) -> Path:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(student)
    weight = model.lm_head.weight
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        weight.copy_(TEACHER_SHARPNESS * (weight + weight.std() * torch.randn(weight.shape, generator=generator)))
    model.save_pretrained(root / "teacher")
    return root / "teacher"


@pytest.fixture(scope="module")
def distilled(tiny_assets, tmp_path_factory):
    root = tmp_path_factory.mktemp("distillation")
    teacher = _make_teacher(tiny_assets["model"], root)
    out = root / "run"
    overrides = quickstart_overrides(
        tiny_assets,
        out,
        STEPS,
        "trainer.logger=[jsonl]",
        f"trainer.save_freq={STEPS}",
        "data.max_response_length=1",
        "data.train_batch_size=16",
        "actor_rollout_ref.rollout.n=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=4",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        "actor_rollout_ref.actor.optim.lr_scheduler_type=constant",
        "distillation.enabled=true",
        "distillation.teacher_key=data_source",
        # Two teachers, routed by the rows' data_source: every quickstart row is "arithmetic"; the other
        # teacher is the student itself, against which nothing would move.
        f"+distillation.teacher_models.arithmetic.model_path={teacher}",
        "+distillation.teacher_models.arithmetic.key=arithmetic",
        f"+distillation.teacher_models.other.model_path={tiny_assets['model']}",
        "+distillation.teacher_models.other.key=other",
        "distillation.distillation_loss.loss_mode=k3",
        "distillation.distillation_loss.use_task_rewards=false",
        "distillation.distillation_loss.use_policy_gradient=false",
    )
    with local_ray():
        assert main(["--config-name=quickstart", *overrides]) == 0
    rows = [row for row in read_metrics(out / "metrics.jsonl") if row["step"] > 0]
    trained = next((out / f"global_step_{STEPS}" / "actor").rglob("config.json")).parent
    return rows, tiny_assets["model"], trained, teacher, tiny_assets["val"]


@torch.no_grad()
def _exact_kl(student_dir: Path, teacher_dir: Path, val_file: Path, tokenizer_dir: Path) -> float:
    """Mean over the validation prompts of KL(student || teacher) of the one-token answer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    student = AutoModelForCausalLM.from_pretrained(student_dir).eval()
    teacher = AutoModelForCausalLM.from_pretrained(teacher_dir).eval()
    kls = []
    for messages in pd.read_parquet(val_file)["prompt"]:
        ids = torch.tensor(
            [
                tokenizer.apply_chat_template(
                    list(messages), add_generation_prompt=True, tokenize=True, return_dict=False
                )
            ]
        )
        log_p = torch.log_softmax(student(ids).logits[0, -1].float(), -1)
        log_q = torch.log_softmax(teacher(ids).logits[0, -1].float(), -1)
        kls.append(float((log_p.exp() * (log_p - log_q)).sum()))
    return sum(kls) / len(kls)


@pytest.mark.slow
def test_the_student_moves_toward_the_teacher(distilled):
    rows, initial, trained, teacher, val = distilled
    estimates = [row["distillation/teacher_kl"] for row in rows]
    assert len(estimates) == STEPS
    assert "distillation/loss" in rows[-1] and "actor/pg_loss" in rows[-1]
    # The trainer's estimate on fresh samples each step
    assert sum(estimates[-2:]) / 2 < 0.5 * sum(estimates[:2]) / 2, estimates
    before, after = _exact_kl(initial, teacher, val, initial), _exact_kl(trained, teacher, val, initial)
    print(f"teacher_kl estimates {[round(e, 3) for e in estimates]}; exact KL {before:.3f} -> {after:.3f}")
    assert after < 0.5 * before, (before, after)
