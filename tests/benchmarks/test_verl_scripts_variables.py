"""benchmarks/verl_scripts.py gives variables a user sets the values a user would; run for real, such a
variable left unset is one error line that says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import verl_scripts  # noqa: E402

from core_v1.main_ppo import main  # noqa: E402
from codemods.dry_run_report import read_launches  # noqa: E402
from shims.verl_keys.verdicts import verl_keys  # noqa: E402

SCRIPT = """\
set -x
TP=${TP:-2}
EXPERIMENT="qwen_$(now)"
python3 -m verl.trainer.main_ppo \\
    actor_rollout_ref.model.path=$MODEL_PATH \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=$TP \\
    trainer.nnodes=$NNODES \\
    trainer.experiment_name=$EXPERIMENT \\
    actor_rollout_ref.model.lora_adapter_path=$ADAPTER \\
    actor_rollout_ref.actor.use_kl_loss=$USE_KL
"""


def test_user_set_variables_get_typical_values_by_key(tmp_path, monkeypatch):
    for name in ("MODEL_PATH", "NNODES", "ADAPTER", "USE_KL", "TP"):
        monkeypatch.delenv(name, raising=False)
    script = tmp_path / "run.sh"
    script.write_text(SCRIPT)
    (launch,) = read_launches(script, unset_as_empty=True, stand_in=verl_scripts.mark_variable)
    argv, names = verl_scripts.fill_user_variables(launch.argv)
    assert names == {"MODEL_PATH", "NNODES", "EXPERIMENT", "ADAPTER", "USE_KL"}  # TP has a default in the script
    values = dict(token.split("=", 1) for token in argv)
    assert values["actor_rollout_ref.rollout.tensor_model_parallel_size"] == "2"
    assert values["trainer.nnodes"] == "1"  # verl's default
    assert values["actor_rollout_ref.actor.use_kl_loss"] == "false"
    assert values["actor_rollout_ref.model.lora_adapter_path"] == "/placeholder/adapter"
    # Assigned from a command only bash can run: a user's run has some name; verl's default is one.
    assert values["trainer.experiment_name"] == verl_keys()["trainer.experiment_name"]["default"]


def test_an_unset_variable_run_for_real_is_one_error_line_that_says_so(capsys):
    # bash expands `trainer.nnodes=$NNODES` with NNODES unset to `trainer.nnodes=`.
    code = main(
        ["data.train_files=x.parquet", "actor_rollout_ref.model.path=m", "trainer.nnodes=", "trainer.dry_run=true"]
    )
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1
    assert "trainer.nnodes" in errors[0] and "shell variable" in errors[0] and "unset" in errors[0]


def test_a_placeholder_the_script_leaves_for_the_user_gets_a_typical_value(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        'CKPT="<path_to_dist_ckpt>"\npython3 -m verl.trainer.main_ppo '
        "actor_rollout_ref.actor.megatron.dist_checkpointing_path=${CKPT} trainer.nnodes=1\n"
    )
    (launch,) = read_launches(script, unset_as_empty=True, stand_in=verl_scripts.mark_variable)
    argv, names = verl_scripts.fill_user_variables(launch.argv)
    assert names == {"<path_to_dist_ckpt>"}
    assert argv == [
        "actor_rollout_ref.actor.megatron.dist_checkpointing_path=/placeholder/path_to_dist_ckpt",
        "trainer.nnodes=1",
    ]


def test_a_tags_tree_keeps_the_reward_functions_scripts_name_by_path_but_not_verls_code(tmp_path):
    repo = tmp_path / "verl"
    for path in (
        "verl/trainer/main_ppo.py",
        "verl/utils/reward_score/rlla.py",
        "verl/trainer/config/a.yaml",
        "examples/run.sh",
    ):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text("x = 1\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q", "-b", "main"], ["add", "."], ["commit", "-qm", "c"]):
        subprocess.run([*git, *args], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(repo), str(tmp_path / "mirror")], check=True)
    with verl_scripts.scripts_of(tmp_path / "mirror", "main") as root:
        kept = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert kept == ["examples/run.sh", "verl/trainer/config/a.yaml", "verl/utils/reward_score/rlla.py"]


def test_a_config_name_the_user_passes_gets_verls_own():
    # verl's tests/special_e2e/run_test.sh: --config-name "$1".
    for argv in (["--config-name", "@@1@@", "trainer.nnodes=1"], ["--config-name=@@CONFIG@@"]):
        filled, names = verl_scripts.fill_user_variables(argv)
        assert "ppo_trainer" in " ".join(filled) and "@@" not in " ".join(filled) and names
