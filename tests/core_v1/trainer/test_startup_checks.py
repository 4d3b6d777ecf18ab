"""Mistakes that used to surface after Ray started (or after a minute of Hub retries) end before
anything starts, with one `error:` line and exit code 2."""

from __future__ import annotations

import time

from core_v1.config import load_config
from core_v1.main_ppo import main
from core_v1.trainer.constraints import machine_problems, model_problems
from tests.conftest import quickstart_overrides


def _run(capsys, overrides):
    code = main(["--config-name=quickstart", *overrides])
    return code, capsys.readouterr().err.strip().splitlines()


def test_missing_model_path_fails_in_seconds(capsys, tiny_assets, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    code, err = _run(
        capsys,
        quickstart_overrides(tiny_assets, tmp_path, 1) + [f"actor_rollout_ref.model.path={tmp_path}/no-such-model"],
    )
    assert code == 2 and len(err) >= 1
    assert err[-1].startswith("error: actor_rollout_ref.model.path: model") and "no-such-model" in err[-1]
    assert "local model directory" in err[-1]
    assert time.monotonic() - started < 30


def test_a_config_that_names_no_model_gets_verls_default_and_the_key_in_its_error(tmp_path, monkeypatch):
    # verl's scripts may leave the model path to verl's default; it composes here and, where that
    # directory is absent, the start-up check names the key it came from.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    config = load_config(["trainer.device=cpu"])
    assert config.actor_rollout_ref.model.path == "~/models/deepseek-llm-7b-chat"
    problems = [problem for problem in machine_problems(config) if "model" in problem]
    assert problems == [problems[0]] and problems[0].startswith(
        "actor_rollout_ref.model.path: model '~/models/deepseek-llm-7b-chat' is not a local directory"
    )


def test_unreachable_hub_is_named_not_retried(monkeypatch):
    import huggingface_hub.constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)  # read at import (conftest sets it)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    started = time.monotonic()
    problems = model_problems("some-org/some-model")
    assert len(problems) == 1 and "cannot be reached" in problems[0]
    assert time.monotonic() - started < 15


def test_an_existing_directory_is_taken_as_it_is(tmp_path):
    assert model_problems(str(tmp_path)) == []


def test_verl_06s_rejection_criterion_runs_as_07s_with_one_line(capsys, tiny_assets, tmp_path):
    code, err = _run(
        capsys,
        quickstart_overrides(tiny_assets, tmp_path, 1)
        + [
            "trainer.dry_run=true",
            "algorithm.rollout_correction.rollout_rs=token",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
        ],
    )
    assert code == 0
    assert any("rollout_rs=token_k1 (it was token)" in line for line in err), err


def test_unknown_rejection_criterion_is_one_error_line_before_start(capsys, tiny_assets, tmp_path):
    code, err = _run(
        capsys,
        quickstart_overrides(tiny_assets, tmp_path, 1)
        + [
            "algorithm.rollout_correction.rollout_rs=tokens_k1",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
        ],
    )
    assert code == 2
    assert err[-1].startswith("error: ") and "unknown criteria ['tokens_k1']" in err[-1]


def test_dry_run_refuses_a_bad_rollout_correction(capsys, tiny_assets, tmp_path):
    code, err = _run(
        capsys,
        quickstart_overrides(tiny_assets, tmp_path, 1)
        + ["trainer.dry_run=true", "algorithm.rollout_correction.rollout_is=tokens"],
    )
    assert code == 2 and "rollout_is='tokens' is unknown" in err[-1]


def test_an_async_pipeline_larger_than_the_train_set_is_noted():
    from types import SimpleNamespace

    from core_v1.trainer.modes.async_base import AsyncPPOTrainer

    def trainer(prompts: int, batch: int, warmup: int):
        return SimpleNamespace(
            components=SimpleNamespace(train_sampler=SimpleNamespace(dataset=[{}] * prompts)),
            num_warmup_batches=warmup,
            train_batch_size=batch,
            config=SimpleNamespace(trainer=SimpleNamespace(v1=SimpleNamespace(trainer_mode="colocate_async"))),
        )

    notice = AsyncPPOTrainer.small_train_set_notice(trainer(prompts=25, batch=16, warmup=1))
    assert notice.startswith("note: colocate_async keeps 32 prompt groups in flight") and "has 25 prompts" in notice
    assert AsyncPPOTrainer.small_train_set_notice(trainer(prompts=25, batch=8, warmup=1)) is None
    assert AsyncPPOTrainer.small_train_set_notice(trainer(prompts=1000, batch=16, warmup=3)) is None
