"""`trainer.smoke=true`: a user's own launch, two CPU steps on a stand-in model, outputs only in a
temporary directory.

Every run below is launched as a user launches it: `python -m core_v1.main_ppo` (or the user's
migrated shell script) in a project folder of their own, with their overrides plus
`trainer.smoke=true`, a model that is not on this machine or too large for it, and a HOME and
TMPDIR of the test's own, so that what the run writes can be checked. Each shows that the user's
code ran: the metric, side effect or output line it alone produces.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from core_v1.config import compose_config, to_config
from core_v1.smoke import (
    MAX_RESPONSE_TOKENS,
    PROMPTS_PER_STEP,
    SAMPLES_PER_PROMPT,
    SMOKE_STEPS,
    TRAIN_ROWS,
    smoke_config,
)
from core_v1.utils.tracking import read_metrics

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NOT_HERE = "Qwen/Qwen2.5-7B-Instruct"  # a hub id this machine has never downloaded
RUN_TIMEOUT_S = 600  # a cap, not a bar: a 20-s run took 231 s at a load average of 50

SPREAD_REWARD = """
import hashlib

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return int(hashlib.sha1(solution_str.encode()).hexdigest(), 16) % 997 / 997
"""
# Appended to the user's copy of the example sampler: a line on the run's output each time the
# trainer calls its `sample`. (A profile of the whole launch showed the same, but profiling made
# the launch 65 s instead of 50 s, at a load average of 5 on 2 cores.)
SAMPLE_CALLS_RECORDED = """

_example_sample = MyReplayBuffer.sample


def _recorded_sample(self, *args, **kwargs):
    print("my_sampler.py: sample", flush=True)
    return _example_sample(self, *args, **kwargs)


MyReplayBuffer.sample = _recorded_sample
"""
RAISING_REWARD = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    raise KeyError(f"no grader for {data_source}")
"""


@dataclass
class Sandbox:
    """A user's project folder, HOME and TMPDIR, all empty at the start."""

    project: Path
    home: Path
    tmp: Path

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "PYTHONDONTWRITEBYTECODE"))}
        env.update(
            HOME=str(self.home),
            TMPDIR=str(self.tmp),
            PYTHONPATH=str(REPO),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        )
        return env


@dataclass
class SmokeResult:
    code: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def workdir(self) -> Path:
        return Path(re.search(r"everything it writes goes to (\S+)", self.stdout).group(1))

    @property
    def verdict(self) -> str:
        return [line for line in self.stdout.splitlines() if line.startswith("smoke: passed")][-1]

    def metrics(self) -> list[dict]:
        return [row for row in read_metrics(self.workdir / "outputs" / "metrics.jsonl") if row["step"] > 0]


@pytest.fixture
def sandbox(tmp_path):
    yield from _sandbox(tmp_path)


def _sandbox(root: Path):
    # TMPDIR is short on purpose: Ray's socket paths under it must stay within 107 bytes (a deep
    # one is moved out by the smoke run, see core_v1.smoke.ray_temp_dir).
    tmp = Path(tempfile.mkdtemp(prefix="s", dir="/tmp"))
    box = Sandbox(root / "project", root / "home", tmp)
    box.project.mkdir()
    box.home.mkdir()
    yield box
    shutil.rmtree(tmp, ignore_errors=True)


def launch(box: Sandbox, *command: str) -> SmokeResult:
    started = time.monotonic()
    result = subprocess.run(
        list(command), cwd=box.project, env=box.env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    out = SmokeResult(result.returncode, result.stdout, result.stderr, time.monotonic() - started)
    print(f"{' '.join(command)}\n-> exit {out.code} in {out.seconds:.1f} s\n{out.stdout}\n{out.stderr[-3000:]}")
    return out


def smoke(box: Sandbox, *overrides: str) -> SmokeResult:
    """`python -m core_v1.main_ppo --config-name=quickstart ... trainer.smoke=true` in the project folder."""
    return launch(
        box,
        sys.executable,
        "-m",
        "core_v1.main_ppo",
        "--config-name=quickstart",
        *overrides,
        "trainer.smoke=true",
        "trainer.progress_bar=false",
    )


def passed(result: SmokeResult) -> SmokeResult:
    assert result.code == 0, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert len(result.metrics()) == SMOKE_STEPS
    return result


def data_overrides(assets) -> list[str]:
    return [f"data.train_files={assets['train']}", f"data.val_files={assets['val']}"]


def files_of(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file under `roots`: size and modification time."""
    return {
        str(path): (path.stat().st_size, path.stat().st_mtime_ns)
        for root in roots
        for path in root.rglob("*")
        if path.is_file() or path.is_symlink()
    }


@pytest.fixture(scope="module")
def big_local_model(tmp_path_factory, tiny_assets) -> Path:
    """A local model folder with a tokenizer and the config of a ~0.5B Qwen2 (no weights): too large
    for two CPU steps, so the smoke run builds its stand-in around this tokenizer."""
    from transformers import AutoTokenizer, Qwen2Config

    out = tmp_path_factory.mktemp("big-model")
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets["model"])
    tokenizer.save_pretrained(out)
    Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=896,
        intermediate_size=4864,
        num_hidden_layers=24,
        num_attention_heads=14,
        num_key_value_heads=2,
    ).save_pretrained(out)
    return out


# ------------------------------------------------------------------ the rewrite alone (no training)
VERL_LAUNCH = [
    "algorithm.adv_estimator=grpo",
    "data.train_batch_size=1024",
    "data.max_response_length=1024",
    "actor_rollout_ref.actor.ppo_mini_batch_size=256",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=40",
    "actor_rollout_ref.rollout.n=5",
    "actor_rollout_ref.rollout.name=vllm",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
    "trainer.logger=[console,wandb]",
    "trainer.n_gpus_per_node=8",
    "trainer.save_freq=20",
    "trainer.test_freq=5",
    "trainer.total_epochs=15",
    "trainer.device=cuda",
]


def test_rewrite_shrinks_consistently_and_says_what_it_replaced(tiny_assets, big_local_model, tmp_path):
    dumps = ["trainer.rollout_data_dir=/nfs/rollouts", "trainer.validation_data_dir=/nfs/validation"]
    raw = compose_config(
        "ppo_trainer",
        [
            *data_overrides(tiny_assets),
            f"actor_rollout_ref.model.path={big_local_model}",
            *VERL_LAUNCH,
            *dumps,
            "trainer.smoke=true",
        ],
    )
    replacements = smoke_config(raw, tmp_path)
    config = to_config(raw)  # the smoke form is a valid config
    lines = [r.line() for r in replacements]
    assert any(
        line.startswith(f"smoke: actor model {big_local_model} -> tiny stand-in")
        and f"your tokenizer from {big_local_model}" in line
        for line in lines
    ), lines
    assert any("actor_rollout_ref.rollout.name vllm -> hf" in line for line in lines), lines
    assert any("trainer.logger [console, wandb] -> [console, jsonl]" in line for line in lines), lines
    assert all(line.startswith("smoke: ") and line.endswith(")") for line in lines)
    data, aro, trainer = config.data, config.actor_rollout_ref, config.trainer
    assert (data.train_batch_size, aro.actor.ppo_mini_batch_size, aro.rollout.n) == (PROMPTS_PER_STEP, 1, 2)
    assert aro.actor.ppo_micro_batch_size_per_gpu == aro.rollout.log_prob_micro_batch_size_per_gpu == 1
    assert data.max_response_length == aro.rollout.response_length == MAX_RESPONSE_TOKENS
    assert (trainer.total_training_steps, trainer.test_freq, trainer.save_freq) == (SMOKE_STEPS,) * 3
    assert (trainer.device, trainer.nnodes, trainer.n_gpus_per_node, aro.rollout.name) == ("cpu", 1, 1, "hf")
    assert Path(trainer.default_local_dir).parent == tmp_path and trainer.smoke is False
    assert Path(trainer.rollout_data_dir).parent == Path(trainer.validation_data_dir).parent == tmp_path / "outputs"
    # The stand-in is a real save_pretrained folder with the user's vocabulary.
    from transformers import AutoConfig, AutoTokenizer

    stand_in = AutoConfig.from_pretrained(aro.model.path)
    assert (
        stand_in.vocab_size == len(AutoTokenizer.from_pretrained(big_local_model)) and stand_in.num_hidden_layers == 2
    )
    import pyarrow.parquet as pq

    assert pq.read_table(data.train_files).num_rows == TRAIN_ROWS


def test_a_small_local_model_is_kept_and_a_missing_data_file_is_one_error_line(tiny_assets, tmp_path, capsys):
    from core_v1.main_ppo import main

    raw = compose_config(
        "quickstart",
        [*data_overrides(tiny_assets), f"actor_rollout_ref.model.path={tiny_assets['model']}", "trainer.smoke=true"],
    )
    smoke_config(raw, tmp_path)
    assert raw.actor_rollout_ref.model.path == str(tiny_assets["model"])
    assert "kept (a local model of" in capsys.readouterr().out
    code = main(
        [
            "--config-name=quickstart",
            f"data.train_files={tmp_path}/nope.parquet",
            "trainer.smoke=true",
            f"actor_rollout_ref.model.path={NOT_HERE}",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: data file") and "nope.parquet" in err[-1]


def test_smoke_flag_on_a_launcher_that_skips_the_rewrite_is_refused(tiny_assets):
    from core_v1.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="trainer.smoke=true is carried out by `python -m core_v1.main_ppo`"):
        load_config([*data_overrides(tiny_assets), f"actor_rollout_ref.model.path={NOT_HERE}", "trainer.smoke=true"])


def test_smoke_dry_run_prints_the_replacements_and_the_plan_of_the_smoke_form(tiny_assets, sandbox):
    result = launch(
        sandbox,
        sys.executable,
        "-m",
        "core_v1.main_ppo",
        "--config-name=quickstart",
        *data_overrides(tiny_assets),
        f"actor_rollout_ref.model.path={NOT_HERE}",
        "trainer.smoke=true",
        "trainer.dry_run=true",
        "trainer.use_v1=false",
    )
    assert result.code == 0, result.stderr
    assert f"smoke: actor model {NOT_HERE} -> tiny stand-in" in result.stdout
    assert "trainer:     V0" in result.stdout and f"model:       {result.workdir / 'model'}" in result.stdout


# ------------------------------------------------------------------ the project's examples, smoke-run
@dataclass
class PluginsRun:
    result: SmokeResult
    box: Sandbox
    before: dict[str, tuple[int, int]]  # the project folder and HOME as they were before the launch


@pytest.fixture(scope="module")
def plugins_run(tiny_assets, big_local_model, tmp_path_factory) -> PluginsRun:
    """One smoke launch with five of the project's plug-ins at once: the example trainer mode, the
    example advantage estimator (with a reward file of the user's that spreads scores), the example
    V0 worker subclass, the example agent loop (registered by its YAML file) and the example replay
    buffer (the user's file in their project, named by a relative path). The launch also reads its
    data by relative paths, saves a checkpoint and asks for wandb and tensorboard. Each test below
    checks what one of them alone produces; one launch instead of five, as each costs ~30 s on 2
    cores, nearly all of it start-up."""
    root = tmp_path_factory.mktemp("plugins")
    for box in _sandbox(root):
        (box.project / "spread_reward.py").write_text(SPREAD_REWARD)
        sampler = (EXAMPLES / "custom_sampler" / "my_sampler.py").read_text()
        (box.project / "my_sampler.py").write_text(sampler + SAMPLE_CALLS_RECORDED)
        (box.project / "data").mkdir()
        for split in ("train", "val"):
            shutil.copy(tiny_assets[split], box.project / "data" / f"{split}.parquet")
        before = files_of(box.project, box.home)
        result = passed(
            smoke(
                box,
                "data.train_files=data/train.parquet",
                "data.val_files=data/val.parquet",
                f"actor_rollout_ref.model.path={big_local_model}",
                f"trainer.v1.plugins=[{EXAMPLES / 'custom_trainer_mode/my_trainer.py'},"
                f"{EXAMPLES / 'custom_estimator/my_estimator.py'}]",
                "trainer.v1.trainer_mode=my_mode",
                "algorithm.adv_estimator=median_baseline",
                "reward.custom_reward_function.path=spread_reward.py",
                "actor_rollout_ref.rollout.n=4",
                "trainer.v1.worker_class=examples.v0_custom_worker.custom_worker:LogProbAuditWorker",
                f"actor_rollout_ref.rollout.agent.agent_loop_config_path={EXAMPLES / 'custom_agent_loop/my_agents.yaml'}",
                "actor_rollout_ref.rollout.agent.default_agent_loop=my_agent",
                "trainer.v1.sampler.custom_sampler.path=my_sampler.py",
                "trainer.v1.sampler.custom_sampler.name=MyReplayBuffer",
                "trainer.save_freq=10",
                "trainer.logger=[console,wandb,tensorboard]",
            )
        )
        yield PluginsRun(result, box, before)


@pytest.mark.slow
def test_custom_agent_loop(plugins_run, big_local_model):
    result = plugins_run.result
    assert f"your tokenizer from {big_local_model}" in result.stdout
    # Every trajectory came from the YAML-registered loop.
    assert all(row["rollout/agent_loop/my_agent/share"] == 1.0 for row in result.metrics())
    assert "agent loops my_agent" in result.verdict


@pytest.mark.slow
def test_tool_agent(sandbox):
    from examples.tool_agent.prepare import run_overrides, write_data

    write_data(sandbox.project / "data", num_train=16, num_val=8)  # the user's data, in their project
    result = passed(smoke(sandbox, *run_overrides("data", "models/tool-agent-7b")))
    last = result.metrics()[-1]
    assert last["rollout/agent_loop/tool_agent/share"] == 1.0 and last["rollout/failed_samples"] == 0
    assert {"reward/answered/mean", "reward/tool_rounds/mean"} <= last.keys()  # the example's reward.py scored
    assert "reward/tool_rounds/mean" in result.verdict


@pytest.mark.slow
def test_custom_sampler_and_nothing_written_outside_the_temporary_directory(plugins_run):
    """The sampler is the user's file in their project, named by a relative path. Afterwards the
    project folder and HOME are exactly as before, and all the run wrote is in its work directory
    under TMPDIR."""
    result, box = plugins_run.result, plugins_run.box
    # MyReplayBuffer.sample (the user's file) gave the trainer its batch at each of the two steps.
    assert result.stdout.splitlines().count("my_sampler.py: sample") == SMOKE_STEPS
    assert "trainer.logger [console, wandb, tensorboard] -> [console, tensorboard, jsonl]" in result.stdout
    assert files_of(box.project, box.home) == plugins_run.before
    assert list(box.tmp.iterdir()) == [result.workdir]
    assert (result.workdir / "ray").is_dir() and "Ray's session files go to" not in result.stdout
    outputs = result.workdir / "outputs"
    assert (outputs / "metrics.jsonl").is_file() and (outputs / "tensorboard").is_dir()
    assert any(outputs.glob("global_step_2*")), sorted(p.name for p in outputs.iterdir())


@pytest.mark.slow
def test_custom_trainer_mode(plugins_run):
    assert "on V1 (my_mode)" in plugins_run.result.verdict
    # my_mode pushes weights only after even steps: step 2 samples with the weights of step 0.
    assert [row["training/off_policy/trajectory_staleness/max"] for row in plugins_run.result.metrics()] == [0, 1]


@pytest.mark.slow
def test_custom_estimator(plugins_run):
    assert f"actor_rollout_ref.rollout.n 4 -> {SAMPLES_PER_PROMPT}" in plugins_run.result.stdout
    rows = plugins_run.result.metrics()
    # median_baseline's signature with two samples a prompt: the worse one gets exactly 0 (GRPO would
    # give it a negative advantage), the better one a positive one.
    assert [row["critic/advantages/min"] for row in rows] == [0.0] * SMOKE_STEPS
    assert max(row["critic/advantages/max"] for row in rows) > 0


@pytest.mark.slow
def test_v0_custom_worker(plugins_run):
    """The example's V0 worker subclass, run by V1's training ranks as `trainer.v1.worker_class` names it."""
    for step, row in enumerate(plugins_run.result.metrics(), start=1):
        assert 0.0 <= row["custom/low_prob_token_frac"] <= 1.0 and row["custom/old_log_prob_mean"] < 0.0
        assert row["custom/audited_batches"] >= step  # the subclass's compute_log_prob ran each step
    assert "custom/low_prob_token_frac" in plugins_run.result.verdict


# ------------------------------------------------------------------ a migrated verl script
GSM8K_ROWS = [
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
        "How many clips did Natalia sell altogether in April and May?",
        "72",
    ),
    (
        "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. "
        "How much did she earn?",
        "10",
    ),
    (
        "Betty is saving money for a new wallet which costs $100. Betty has only half of the money she "
        "needs. How much more money does Betty need?",
        "50",
    ),
    ("James writes a 3-page letter to 2 different friends twice a week. How many pages does he write a year?", "624"),
]


def write_gsm8k(home: Path) -> None:
    """verl's GSM8K parquet layout at the paths verl's script reads ($HOME/data/gsm8k)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = home / "data" / "gsm8k"
    out.mkdir(parents=True)
    for split, count in (("train", 8), ("test", 4)):
        rows = [
            {
                "data_source": "openai/gsm8k",
                "ability": "math",
                "prompt": [
                    {
                        "role": "user",
                        "content": f'{q} Let\'s think step by step and output the final answer after "####".',
                    }
                ],
                "reward_model": {"style": "rule", "ground_truth": a},
                "extra_info": {"split": split, "index": i},
            }
            for i, (q, a) in enumerate((GSM8K_ROWS * 3)[:count])
        ]
        pq.write_table(pa.Table.from_pylist(rows), out / f"{split}.parquet")


@pytest.fixture
def migrated_script(sandbox) -> Path:
    """verl's GRPO-on-GSM8K launch (Qwen2-7B, vLLM with TP 2, 8 GPUs, wandb), migrated by the codemod."""
    script = sandbox.project / "run_qwen2-7b_gsm8k_grpo.sh"
    shutil.copy(REPO / "tests" / "fixtures" / "old_scripts" / script.name, script)
    migrate = subprocess.run(
        [sys.executable, "-m", "codemods.migrate", str(script)], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert migrate.returncode == 1, migrate.stderr  # 1: changed
    assert "python3 -m core_v1.main_ppo" in script.read_text()
    write_gsm8k(sandbox.home)
    return script


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["V1", "V0"])
def test_migrated_verl_grpo_script(migrated_script, sandbox, trainer):
    extra = ["trainer.use_v1=false"] if trainer == "V0" else []
    result = passed(launch(sandbox, "bash", migrated_script.name, *extra, "trainer.smoke=true"))
    for replaced in (
        "actor model Qwen/Qwen2-7B-Instruct -> tiny stand-in",
        "data.train_batch_size 1024 -> 2, actor_rollout_ref.actor.ppo_mini_batch_size 256 -> 1, "
        "actor_rollout_ref.rollout.n 5 -> 2",
        "trainer.n_gpus_per_node 8 -> 1",
        "actor_rollout_ref.rollout.name vllm -> hf",
        "trainer.logger [console, wandb] -> [console, jsonl]",
    ):
        assert replaced in result.stdout
    rows = result.metrics()
    assert all("actor/kl_loss" in row for row in rows)  # use_kl_loss: the reference policy ran too
    assert result.verdict.startswith(f"smoke: passed on {'V0' if trainer == 'V0' else 'V1 (sync)'}")


# ------------------------------------------------------------------ a reward function that always raises
@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["V1", "V0"])
def test_reward_function_that_raises_is_one_error_line_naming_it(tiny_assets, sandbox, trainer):
    (sandbox.project / "my_reward.py").write_text(RAISING_REWARD)
    result = smoke(
        sandbox,
        *data_overrides(tiny_assets),
        f"actor_rollout_ref.model.path={NOT_HERE}",
        "reward.custom_reward_function.path=my_reward.py",
        *(["trainer.use_v1=false"] * (trainer == "V0")),
    )
    assert result.code == 2
    assert "Traceback" not in result.stderr
    errors = [line for line in (result.stdout + result.stderr).splitlines() if line.startswith("error:")]
    assert len(errors) == 1, errors
    assert re.search(r"reward function \S*my_reward\.py:compute_score", errors[0]) and "KeyError" in errors[0]
    assert "no grader for arithmetic" in errors[0] and errors[0] == result.stderr.strip().splitlines()[-1]
