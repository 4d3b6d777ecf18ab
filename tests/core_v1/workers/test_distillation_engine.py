"""On-policy distillation on one rank: the teacher engine's log-probs, the actor's loss with the
teacher's term, the teachers a config names and the routing of rows to them."""

from __future__ import annotations

import pytest
import torch

from core_v1.config import load_config
from core_v1.config.schema import ConfigError
from core_v1.trainer.constraints import config_problems
from core_v1.workers import ActorEngine
from core_v1.workers.distillation import TeacherEngine, route_rows, teacher_models, teacher_roles

_DISTILL = ("distillation.enabled=true", "distillation.distillation_loss.use_task_rewards=false")
_TOPK = ("distillation.distillation_loss.loss_mode=forward_kl_topk", "distillation.distillation_loss.topk=4")


def _own_log_probs(actor, batch):
    batch = batch.clone()
    batch["old_log_probs"] = actor.compute_log_prob(batch)[0]
    return batch


def _teacher(make_config, tiny_model_dir, *overrides):
    config = make_config(
        *_DISTILL, f"distillation.teacher_models.teacher_model.model_path={tiny_model_dir}", *overrides
    )
    return config, TeacherEngine(config, tiny_model_dir)


def test_a_teacher_of_the_students_weights_scores_as_the_student_at_temperature_one(
    make_config, make_batch, tiny_model_dir
):
    config, teacher = _teacher(make_config, tiny_model_dir)
    batch = make_batch()
    actor = ActorEngine(config)
    expected = actor.compute_log_prob(batch)[0] * batch["response_mask"]
    assert torch.allclose(teacher.compute_teacher_log_prob(batch) * batch["response_mask"], expected, atol=1e-5)
    # the student's log-probs follow the rollout's temperature; the teacher's never do (verl's teachers)
    hot_config, hot_teacher = _teacher(make_config, tiny_model_dir, "actor_rollout_ref.rollout.temperature=2.0")
    assert torch.allclose(hot_teacher.compute_teacher_log_prob(batch) * batch["response_mask"], expected, atol=1e-5)
    assert set(teacher_roles(config, torch.device("cpu"))) == {"teacher"}


def test_against_its_own_weights_the_distillation_loss_and_its_gradient_are_zero(
    make_config, make_batch, tiny_model_dir
):
    config, teacher = _teacher(make_config, tiny_model_dir, "distillation.distillation_loss.loss_mode=k3")
    actor = ActorEngine(config)
    batch = _own_log_probs(actor, make_batch())
    batch["teacher_log_prob"] = teacher.compute_teacher_log_prob(batch)
    metrics = actor.update_policy(batch)
    assert metrics["distillation/loss"] == pytest.approx(0.0, abs=1e-6)
    assert metrics["actor/grad_norm"] == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        ("distillation.distillation_loss.loss_mode=k3",),
        ("distillation.distillation_loss.loss_mode=k1", "distillation.distillation_loss.use_policy_gradient=true"),
    ],
)
def test_the_update_raises_the_log_probs_the_teacher_prefers(make_config, make_batch, tiny_model_dir, overrides):
    config = make_config(
        *_DISTILL,
        f"distillation.teacher_models.teacher_model.model_path={tiny_model_dir}",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        *overrides,
    )
    actor = ActorEngine(config)
    batch = _own_log_probs(actor, make_batch())
    batch["teacher_log_prob"] = batch["old_log_probs"] + 1.0  # the teacher likes every sampled token more
    assert actor.update_policy(batch)["distillation/loss"] != 0.0
    after = actor.compute_log_prob(batch)[0]
    mask = batch["response_mask"].bool()
    assert (after - batch["old_log_probs"])[mask].mean() > 0.05


def test_the_teachers_a_config_names(make_config):
    single = make_config(*_DISTILL, "distillation.teacher_models.teacher_model.model_path=/t")
    assert teacher_models(single.distillation) == {"": "/t"}
    several = make_config(
        *_DISTILL,
        "+distillation.teacher_models.math.model_path=/m",
        "+distillation.teacher_models.math.key=gsm8k",
        "+distillation.teacher_models.geo.model_path=/g",
        "+distillation.teacher_models.geo.key=geo3k",
    )
    assert teacher_models(several.distillation) == {"gsm8k": "/m", "geo3k": "/g"}  # verl drops `teacher_model`
    unkeyed = make_config(
        *_DISTILL,
        "+distillation.teacher_models.a.model_path=/a",
        "+distillation.teacher_models.b.model_path=/b",
        "+distillation.teacher_models.b.key=x",
    )
    with pytest.raises(ConfigError, match=r"distillation.teacher_models.a.key is not set"):
        teacher_models(unkeyed.distillation)
    with pytest.raises(ConfigError, match=r"teacher_model.model_path"):
        teacher_models(make_config(*_DISTILL).distillation)


def test_rows_go_to_the_teacher_of_their_routing_column():
    assert route_rows([""], 3, None, "data_source") == {"": [0, 1, 2]}
    assert route_rows(["gsm8k", "geo3k"], 3, ["geo3k", "gsm8k", "geo3k"], "data_source") == {
        "geo3k": [0, 2],
        "gsm8k": [1],
    }
    with pytest.raises(ConfigError, match="no teacher for data_source='math'"):
        route_rows(["gsm8k", "geo3k"], 1, ["math"], "data_source")
    with pytest.raises(ConfigError, match="distillation.teacher_key='task'"):
        route_rows(["gsm8k", "geo3k"], 1, None, "task")


@pytest.mark.parametrize(
    "overrides, line",
    [
        (("trainer.use_v1=false",), "runs on V1 only"),
        (("distillation.distillation_loss.loss_mode=reverse_kl_topk",), "reverse_kl_topk"),
        ((*_TOPK[:1], "distillation.distillation_loss.topk=0"), "topk=0"),
        (("distillation.distillation_loss.policy_loss_mode=gspo",), "policy_loss_mode='gspo'"),
    ],
)
def test_what_it_cannot_run_is_one_line_before_anything_starts(tiny_model_dir, overrides, line):
    config = load_config(
        [
            f"actor_rollout_ref.model.path={tiny_model_dir}",
            "data.train_files=unused.parquet",
            "distillation.enabled=true",
            f"distillation.teacher_models.teacher_model.model_path={tiny_model_dir}",
            *overrides,
        ]
    )
    problems = [problem for problem in config_problems(config) if "distillation" in problem]
    assert len(problems) == 1 and line in problems[0] and "\n" not in problems[0], problems


def test_a_teacher_of_another_vocabulary_is_one_line(make_config, make_batch, tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from core_v1.workers.errors import WorkerConfigError

    small = Qwen2Config(
        vocab_size=16,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    Qwen2ForCausalLM(small).save_pretrained(tmp_path)
    config = make_config(*_DISTILL, f"distillation.teacher_models.teacher_model.model_path={tmp_path}")
    with pytest.raises(WorkerConfigError, match="outside the teacher's vocabulary"):
        TeacherEngine(config, str(tmp_path)).compute_teacher_log_prob(make_batch())


def test_a_topk_teacher_writes_its_k_likeliest_tokens_and_against_its_own_weights_the_loss_is_zero(
    make_config, make_batch, tiny_model_dir
):
    config, teacher = _teacher(make_config, tiny_model_dir, *_TOPK)
    actor = ActorEngine(config)
    batch = _own_log_probs(actor, make_batch())
    log_probs, top, ids = teacher.compute_teacher_log_prob(batch)
    mask = batch["response_mask"].bool()
    assert top.shape == ids.shape == (*mask.shape, 4) and ids.dtype == torch.long
    assert torch.allclose(log_probs * mask, batch["old_log_probs"] * mask, atol=1e-5)
    assert (top[mask][:, :-1] >= top[mask][:, 1:]).all()  # largest first
    assert (top[mask][:, 0] >= log_probs[mask] - 1e-5).all()  # no sampled token beats the top one
    batch["teacher_log_prob"], batch["teacher_topk_log_probs"], batch["teacher_topk_ids"] = log_probs, top, ids
    metrics = actor.update_policy(batch)
    assert metrics["distillation/loss"] == pytest.approx(0.0, abs=1e-5)
    assert 0.0 < metrics["distillation/teacher_mass"] == pytest.approx(metrics["distillation/student_mass"], abs=1e-5)


def test_the_topk_update_moves_the_student_towards_the_teachers_tokens(make_config, make_batch, tiny_model_dir):
    config = make_config(
        *_DISTILL,
        *_TOPK[:1],
        "distillation.distillation_loss.topk=1",
        f"distillation.teacher_models.teacher_model.model_path={tiny_model_dir}",
        "actor_rollout_ref.actor.optim.lr=1e-2",
    )
    actor = ActorEngine(config)
    batch = _own_log_probs(actor, make_batch())
    # a teacher certain of each sampled token: its top-1 is that token, with log-prob 0
    batch["teacher_topk_ids"] = batch["responses"][..., None].long()
    batch["teacher_topk_log_probs"] = torch.zeros(*batch["responses"].shape, 1)
    batch["teacher_log_prob"] = torch.zeros(batch["responses"].shape)
    assert actor.update_policy(batch)["distillation/loss"] > 0.0
    after = actor.compute_log_prob(batch)[0]
    mask = batch["response_mask"].bool()
    assert (after - batch["old_log_probs"])[mask].mean() > 0.05
