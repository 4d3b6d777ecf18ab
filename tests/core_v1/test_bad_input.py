"""A user's mistake ends with one `error:` line and exit code 2 (or, for a reward function that
raises on some samples, a counted failure while the run goes on) — never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core_v1.config import load_config
from core_v1.main_ppo import main, run_v1
from tests.conftest import quickstart_overrides


def _run_main(capsys, overrides):
    code = main(["--config-name=quickstart", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_missing_data_file(capsys, tiny_assets, tmp_path):
    code, err = _run_main(
        capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={tmp_path}/nope.parquet"]
    )
    assert code == 2
    assert err[-1].startswith("error: data file") and "does not exist" in err[-1]


@pytest.mark.parametrize("use_v1", ["true", "false"])
def test_a_config_file_that_is_not_yaml_is_one_line_naming_the_line(capsys, tmp_path, use_v1):
    (tmp_path / "mine.yaml").write_text("defaults: [ppo_trainer, _self_]\ntrainer:\n  ref: {x: ${a.b}}\n")
    code = main([f"--config-path={tmp_path}", "--config-name=mine", f"trainer.use_v1={use_v1}", "trainer.dry_run=true"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert (
        err.strip().splitlines()[-1].startswith(f"error: {tmp_path / 'mine.yaml'}, line 3, column 13 is not valid YAML")
    )


def test_row_without_prompt_column(capsys, tiny_assets, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "arithmetic", "question": "1 + 1 ="}] * 20), bad)
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={bad}"])
    assert code == 2
    assert "no 'prompt' column" in err[-1] and "data.prompt_key" in err[-1]


def test_unknown_agent_name(capsys, tiny_assets, tmp_path):
    code, err = _run_main(
        capsys,
        quickstart_overrides(tiny_assets, tmp_path, 1)
        + ["actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agnet"],
    )
    assert code == 2
    assert "unknown agent loop 'single_turn_agnet'" in err[-1] and "Did you mean 'single_turn_agent'" in err[-1]


def test_unknown_agent_name_in_a_data_row(capsys, tiny_assets, tmp_path):
    rows = pq.read_table(tiny_assets["train"]).to_pylist()
    rows[3]["agent_name"] = "no_such_loop"
    for row in rows[:3] + rows[4:]:
        row["agent_name"] = None
    data = tmp_path / "agents.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={data}"])
    assert code == 2 and "unknown agent loop 'no_such_loop'" in err[-1]


def test_unknown_trainer_mode(capsys, tiny_assets, tmp_path):
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + ["trainer.v1.trainer_mode=synk"])
    assert code == 2 and "unknown trainer mode 'synk'" in err[-1] and "Did you mean 'sync'" in err[-1]


def test_cli_error_is_one_line_without_traceback(tiny_assets, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "core_v1.main_ppo",
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 1),
            "trainer.total_epochs=abc",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_reward_function_that_raises_is_counted_and_the_run_goes_on(tiny_assets, ray_runtime, tmp_path):
    reward_file = tmp_path / "flaky_reward.py"
    reward_file.write_text(
        textwrap.dedent("""
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            if ground_truth in ("3", "5"):
                raise ValueError("the grader crashed")
            return 1.0 if solution_str.strip() == ground_truth else 0.0
    """)
    )
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            f"reward.custom_reward_function.path={reward_file}",
            "trainer.test_freq=-1",
            "data.train_batch_size=8",
            "actor_rollout_ref.actor.ppo_mini_batch_size=8",
            "actor_rollout_ref.rollout.n=2",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    failed = sum(r["rollout/failed_samples"] for r in rows)
    assert failed > 0 and failed % 2 == 0  # whole groups of the crashing prompts (n=2 sessions each)


def test_override_hydra_cannot_parse_is_one_line_naming_it(capsys):
    code, err = _run_main(capsys, ["data.train_files=<from the shell>", "trainer.dry_run=true"])
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: cannot read the override 'data.train_files=<from the shell>'")
    assert "key='value'" in err[0]  # the fix: quote it


# ------------------------------------------------------------------ every refusal before anything starts
AGENT_YAML_BAD_TARGET = "- name: my_agent\n  _target_: no_such_module_anywhere.MyLoop\n"
NOT_A_SAMPLER = "class NotASampler:\n    pass\n"
REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):\n    return 0.0\n"


def _refusals(tmp_path, write: bool = True):
    """Each kind of refusal: (overrides, a phrase the one error line must hold)."""
    reward, sampler, agents = tmp_path / "reward.py", tmp_path / "not_a_sampler.py", tmp_path / "agents.yaml"
    if write:
        reward.write_text(REWARD)
        sampler.write_text(NOT_A_SAMPLER)
        agents.write_text(AGENT_YAML_BAD_TARGET)
    missing = tmp_path / "missing"
    return {
        "schema value": (["data.truncation=sideways"], "data.truncation='sideways'"),
        "unsupported feature": (
            ["actor_rollout_ref.rollout.checkpoint_manager_class=my.Manager"],
            "not supported on V1",
        ),
        "unknown estimator": (["algorithm.adv_estimator=grpoo"], "grpoo"),
        "mode constraint": (["trainer.v1.trainer_mode=separate_async"], "backend=naive"),
        "plug-in file": ([f"trainer.v1.plugins=[{missing}.py]"], "does not exist"),
        "reward function file": ([f"reward.custom_reward_function.path={missing}.py"], "does not exist"),
        "reward function name": (
            [f"reward.custom_reward_function.path={reward}", "reward.custom_reward_function.name=no_such_fn"],
            "no_such_fn",
        ),
        "custom sampler class": (
            [f"trainer.v1.sampler.custom_sampler.path={sampler}", "trainer.v1.sampler.custom_sampler.name=NotASampler"],
            "not a ReplayBuffer",
        ),
        "agent loop target": (
            [
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={agents}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=my_agent",
            ],
            "no_such_module_anywhere",
        ),
        "tool config": ([f"actor_rollout_ref.rollout.multi_turn.tool_config_path={missing}.yaml"], "does not exist"),
        "worker class": (["trainer.v1.worker_class=no_such_package.workers:MyWorker"], "no_such_package"),
        "model path": ([f"actor_rollout_ref.model.path={missing}"], "local model directory"),
        "critic model path": (["algorithm.adv_estimator=gae", f"critic.model.path={missing}"], "local model directory"),
        "data file": ([f"data.train_files={missing}.parquet"], "does not exist"),
        "dynamic batch size": (
            ["actor_rollout_ref.actor.use_dynamic_bsz=true", "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=0"],
            "ppo_max_token_len_per_gpu",
        ),
        "model dtype": (["actor_rollout_ref.actor.fsdp_config.model_dtype=fp64"], "fp64"),
        "greedy rollout": (["actor_rollout_ref.rollout.temperature=0"], "temperature=0"),
        "lr schedule": (["actor_rollout_ref.actor.optim.min_lr_ratio=2.0"], "min_lr_ratio"),
        "kl controller": (
            ["algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.horizon=0"],
            "horizon",
        ),
        "kl penalty": (["algorithm.use_kl_in_reward=true", "algorithm.kl_penalty=nope"], "kl_penalty"),
        "filter groups with a sync sampler": (
            [
                "algorithm.filter_groups.enable=true",
                f"trainer.v1.sampler.custom_sampler.path={EXAMPLES / 'custom_sampler/my_sampler.py'}",
                "trainer.v1.sampler.custom_sampler.name=MyReplayBuffer",
            ],
            "filter_groups",
        ),
        "resume path": (["trainer.resume_mode=resume_path", f"trainer.resume_from_path={missing}"], "resume_from_path"),
        "training ranks": (["trainer.n_gpus_per_node=0"], "at least 1"),
        "weight-sync backend on CPU": (
            [
                "trainer.device=cpu",
                "trainer.v1.trainer_mode=separate_async",
                "actor_rollout_ref.rollout.checkpoint_engine.backend=nccl",
                "trainer.v1.separate_async.parameter_sync_step=1",
                "data.train_batch_size=4",
                "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            ],
            "nccl",
        ),
    }


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
REFUSAL_KINDS = sorted(_refusals(Path("/unused"), write=False))


@pytest.fixture
def nothing_may_start(monkeypatch):
    """Fail the test if the run gets as far as starting Ray (or, on V0, building the trainer)."""
    import ray

    from core_v1.trainer import setup

    def tripwire(*_args, **_kwargs):
        raise AssertionError("Ray was about to start before the refusal")

    monkeypatch.setattr(setup, "init_ray", tripwire)
    monkeypatch.setattr(ray, "init", tripwire)
    return ray.is_initialized()


@pytest.mark.parametrize("kind", REFUSAL_KINDS)
def test_every_refusal_is_one_line_before_ray_starts(
    kind, capsys, tiny_assets, tmp_path, monkeypatch, nothing_may_start
):
    import ray

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides, phrase = _refusals(tmp_path)[kind]
    started = time.monotonic()
    code = main(["--config-name=quickstart", *quickstart_overrides(tiny_assets, tmp_path / "out", 1), *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    errors = [line for line in err if line.startswith("error:")]
    assert len(errors) == 1 and err[-1] == errors[0] and phrase in errors[0], err
    assert not any("Traceback" in line for line in err)
    assert ray.is_initialized() is nothing_may_start  # nothing started it
    assert time.monotonic() - started < 60


V0_REFUSAL_KINDS = ("greedy rollout", "kl controller", "model path", "reward function file", "model dtype")


@pytest.mark.parametrize("kind", V0_REFUSAL_KINDS)
def test_v0_refusals_come_before_the_v0_trainer_is_built(
    kind, capsys, tiny_assets, tmp_path, monkeypatch, nothing_may_start
):
    import legacy_v0.main_ppo

    def tripwire(*_args, **_kwargs):
        raise AssertionError("the V0 trainer was about to be built before the refusal")

    monkeypatch.setattr(legacy_v0.main_ppo, "run_ppo", tripwire)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    overrides, phrase = _refusals(tmp_path)[kind]
    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path / "out", 1),
            *overrides,
            "trainer.use_v1=false",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2, err
    assert err[-1].startswith("error:") and phrase in err[-1], err
    assert sum(line.startswith("error:") for line in err) == 1 and not any("Traceback" in line for line in err)


def test_a_script_without_train_files_reads_verls_default_and_stops_naming_it(
    capsys, tiny_assets, tmp_path, monkeypatch
):
    """verl's schema defaults data.train_files to ~/data/rlhf/gsm8k/train.parquet, so a verl script
    that sets none means that file; here it is missing, which is the usual one line."""
    monkeypatch.setenv("HOME", str(tmp_path))
    model = f"actor_rollout_ref.model.path={tiny_assets['model']}"
    assert load_config([model]).data.train_files == "~/data/rlhf/gsm8k/train.parquet"
    assert load_config([model]).data.val_files is None  # rlbridge validates only on a file someone named
    assert main([model, "trainer.dry_run=true"]) == 0
    capsys.readouterr()
    code = main([model, "trainer.device=cpu", f"trainer.default_local_dir={tmp_path}/out"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: data file") and "data.train_files" in err[-1]
    assert str(tmp_path / "data/rlhf/gsm8k/train.parquet") in err[-1]
