"""`trainer.dry_run=true`: validate and print the plan (V1 and V0), exit 0 or 2, never a traceback,
without starting Ray or loading a model; and the dry-run report over the corpus of old scripts."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core_v1.config import compose_config, to_config
from core_v1.main_ppo import main
from core_v1.trainer.constraints import check_mode_constraints
from codemods.dry_run_report import format_report, read_launches, run_report
from codemods.dry_run_report import main as report_main

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "old_scripts"


def assets_overrides(assets) -> list[str]:
    return [
        f"data.train_files={assets['train']}",
        f"data.val_files={assets['val']}",
        f"actor_rollout_ref.model.path={assets['model']}",
    ]


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess, float, float]:
    """The finished process, its wall seconds and its CPU seconds (user + system: what the dry run
    costs, whatever else shares the machine's cores)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "core_v1.main_ppo", *args], capture_output=True, text=True, timeout=120
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return result, wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def test_quickstart_dry_run_prints_the_plan_without_legacy_warnings_fast(tiny_assets):
    result, wall, cpu = run_cli("--config-name=quickstart", *assets_overrides(tiny_assets), "trainer.dry_run=true")
    print(f"quickstart dry run in a fresh interpreter: {cpu:.1f} CPU s, {wall:.1f} s wall")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no legacy key used: not one warning
    for label in ("trainer:     V1, mode sync", "devices:", "engines:", "agent loops:", "reward:", "data:"):
        assert label in result.stdout
    assert "cannot run here" not in result.stdout and "legacy key" not in result.stdout
    # About 10 CPU s, nearly all imports (torch, tensordict, transformers); starting Ray or loading
    # the model would add far more. A wide bound: this is a check of behaviour, not a benchmark.
    assert cpu < 20


def test_invalid_separate_async_exits_2_with_every_reason_and_no_traceback(tiny_assets, capsys):
    # In this process (`main` is what the command runs; its start-up in a fresh interpreter is the
    # quickstart dry run's test above): a fresh interpreter costs ~10 CPU s of imports.
    code = main(
        [
            "--config-name=quickstart",
            *assets_overrides(tiny_assets),
            "trainer.dry_run=true",
            "trainer.v1.trainer_mode=separate_async",
            "trainer.v1.separate_async.parameter_sync_step=4",
            "data.train_batch_size=16",
            "actor_rollout_ref.actor.ppo_mini_batch_size=16",
            "reward_model.enable=true",
        ]
    )
    result = capsys.readouterr()
    assert code == 2 and "Traceback" not in result.err
    error = result.err.strip().splitlines()[-1]
    assert error.startswith("error: ")
    for reason in (
        "data.train_batch_size (16) == trainer.v1.separate_async.parameter_sync_step (4)",
        "backend=naive",
        "reward.reward_model.enable=true needs reward.reward_model.model_path",
    ):
        assert error.count(reason) == 1
    assert "legacy key reward_model.enable -> reward.reward_model.enable" in result.err
    assert "legacy key:  reward_model.enable -> reward.reward_model.enable" in result.out


def test_v0_dry_run_plans_v0_without_starting_ray_or_loading_a_model(tiny_assets):
    code = (
        "import sys; from core_v1.main_ppo import main; "
        f"rc = main({['--config-name=quickstart', *assets_overrides(tiny_assets)]!r} "
        "+ ['trainer.use_v1=false', 'trainer.dry_run=true', 'algorithm.use_pf_ppo=true']); "
        "ray = sys.modules.get('ray'); print('ray started:', bool(ray and ray.is_initialized())); "
        "print('V0 trainer imported:', 'legacy_v0.main_ppo' in sys.modules); sys.exit(rc)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "trainer:     V0" in result.stdout
    assert "ray started: False" in result.stdout and "V0 trainer imported: False" in result.stdout


@pytest.mark.parametrize(
    "override, reason",
    [
        (
            "actor_rollout_ref.actor.strategy=deepspeed",
            "not supported: deepspeed strategy (actor_rollout_ref.actor.strategy); use fsdp",
        ),
        ("actor_rollout_ref.rollout.name=tgi", "not supported: tgi rollout engine"),
        ("actor_rollout_ref.model.lora.type=dora", "DoRA and other adapter types are not supported"),
        ("data.audio_key=aud", "audio inputs are not supported"),
        ("algorithm.adv_estimator=grpoo", "unknown advantage estimator 'grpoo'"),
        ("trainer.v1.trainer_mode=synk", "unknown trainer mode 'synk'"),
        ("actor_rollout_ref.rollout.multi_turn.completion_callback=a.B", "put that logic in an AgentLoop"),
    ],
)
def test_refusals_are_one_line_with_the_fix(override, reason, tiny_assets, capsys):
    code = main(["--config-name=quickstart", *assets_overrides(tiny_assets), "trainer.dry_run=true", override])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: ") and reason in err[-1]


def test_machine_limits_are_listed_but_the_config_passes(tiny_assets, capsys):
    code = main(
        [
            "--config-name=quickstart",
            *assets_overrides(tiny_assets),
            "trainer.dry_run=true",
            "trainer.device=auto",
            "trainer.n_gpus_per_node=8",
            "data.val_files=/nowhere/val.parquet",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "cannot run here: data file /nowhere/val.parquet does not exist here" in out
    if "devices:     cpu" in out:
        assert "the layout asks for 8 GPUs" in out


def separate_async(*overrides: str):
    return to_config(compose_config("quickstart", ["trainer.v1.trainer_mode=separate_async", *overrides]))


def test_separate_async_constraints_one_by_one():
    valid = [
        "trainer.v1.separate_async.parameter_sync_step=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "actor_rollout_ref.rollout.checkpoint_engine.backend=gloo",
        "data.train_batch_size=16",
    ]
    assert check_mode_constraints(separate_async(*valid)) == []
    assert (
        "change one of them"
        in check_mode_constraints(separate_async(*valid[1:], "trainer.v1.separate_async.parameter_sync_step=3"))[0]
    )
    assert "backend=naive" in check_mode_constraints(separate_async(*valid[:2], valid[3]))[0]
    # The reward model runs in the trainer process, not in the rollout pool: no constraint here.
    assert check_mode_constraints(separate_async(*valid, "reward.reward_model.enable=true")) == []
    assert check_mode_constraints(to_config(compose_config("quickstart", []))) == []  # sync has none


# --------------------------------------------------------------------------- the corpus


def test_corpus_dry_runs_pass_or_fail_with_one_line_never_a_traceback(tiny_assets):
    rows = run_report(
        [CORPUS], model=str(tiny_assets["model"]), train=str(tiny_assets["train"]), val=str(tiny_assets["val"])
    )
    print(format_report(rows))
    outcomes = [(row, trainer, outcome) for row in rows for trainer, outcome in (("V0", row.v0), ("V1", row.v1))]
    # Every launch of an entry rlbridge has, in every script (verl's DAPO and entropy recipes are such entries).
    assert len(rows) == sum(len(read_launches(p)) for p in CORPUS.iterdir() if p.is_file()) >= 35
    assert not [o for _, _, o in outcomes if o.kind == "traceback"], format_report(rows)
    assert all(o.kind in ("passes", "fails", "not expanded") for _, _, o in outcomes)
    assert all(o.reason and "\n" not in o.reason for _, _, o in outcomes if o.kind != "passes")
    by_script = {row.launch.script.name: row for row in rows}
    grpo = by_script["run_qwen2-7b_gsm8k_grpo.sh"]
    assert (grpo.v0.kind, grpo.v1.kind) == ("passes", "passes")
    pf_ppo = by_script["run_pf_ppo.sh"]
    assert (pf_ppo.v0.kind, pf_ppo.v1.kind) == ("passes", "passes")  # PF-PPO runs on both trainers
    dapo = by_script["run_dapo_qwen2_5_7b.sh"]  # variables, $((...)), ${X:-default}, + reward kwargs
    assert dapo.v1.kind == "passes" and dapo.v1.legacy_keys == 6
    prime = by_script["run_prime_rm.sh"]  # the prime reward manager moves (verl's 0 on failure, on both trainers);
    assert "reward_manager" not in prime.v1.reason and prime.v1.reason == prime.v0.reason  # its batch sizes stop it


def test_report_expands_shell_words_without_running_them():
    (launch,) = read_launches(CORPUS / "run_dapo_qwen2_5_7b.sh")
    assert "data.max_prompt_length=2048" in launch.argv and "data.max_response_length=8192" in launch.argv
    assert "trainer.nnodes=1" in launch.argv and "algorithm.adv_estimator=grpo" in launch.argv
    (launch,) = read_launches(CORPUS / "run_sweep_loop.sh")
    assert "actor_rollout_ref.actor.optim.lr=5e-7" in launch.argv  # a for variable takes its first value
    (launch,) = read_launches(CORPUS / "run_sync_entry.sh")
    assert launch.argv[0] == "trainer.v1.trainer_mode=sync"  # what main_ppo_sync implied


def test_a_default_word_starting_with_a_tilde_is_the_home_folder_as_bash_expands_it(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        "TRAIN_FILE=${TRAIN_FILE:-~/data/train.parquet}\n"
        'python3 -m verl.trainer.main_ppo data.train_files="${TRAIN_FILE}"\n'
    )
    (launch,) = read_launches(script, unset_as_empty=True)
    assert launch.argv == (f"data.train_files={Path.home()}/data/train.parquet",)


def test_a_for_loop_over_an_array_takes_its_first_element(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        'ENGINES=("vllm" "sglang_async")\nfor ENGINE in "${ENGINES[@]}"; do\n'
        '    python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.name="${ENGINE}"\ndone\n'
    )
    (launch,) = read_launches(script)
    assert launch.argv == ("actor_rollout_ref.rollout.name=vllm",)


def test_report_reads_scripts_tree_sitter_rejects_as_the_migration_tool_does(tmp_path):
    # bash accepts brackets in a `${VAR:-...}` default and a last-line backslash; tree-sitter does not.
    script = tmp_path / "run.sh"
    script.write_text(
        'TEST_FILE=${TEST_FILE:-["/data/val.parquet"]}\n'
        'python3 -m verl.trainer.main_ppo data.val_files="${TEST_FILE}" trainer.nnodes=1 \\\n'
    )
    (launch,) = read_launches(script)
    assert launch.not_expanded is None
    assert launch.argv == ("data.val_files=[/data/val.parquet]", "trainer.nnodes=1")  # bash drops those quotes


def test_report_splits_an_unquoted_string_variable_into_its_overrides_in_argument_order(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(
        'ARR=(trainer.nnodes=1)\nACTOR="\n    actor_rollout_ref.model.path=/m \\\n'
        '    actor_rollout_ref.actor.optim.lr=1e-6"\nEXTRA="trainer.seed=3"\nACTOR="$ACTOR $EXTRA"\n'
        "CONFIG_DIR=/cfg\n"
        "python3 -m verl.trainer.main_ppo --config-path $CONFIG_DIR data.train_files=t $ACTOR "
        '"${ARR[@]}" "$ACTOR" trainer.total_epochs=2\n'
    )
    (launch,) = read_launches(script)
    # bash splits `$ACTOR` into its words; the quoted "$ACTOR" is one word, not read as overrides.
    assert launch.argv == (
        "--config-path",
        "/cfg",
        "data.train_files=t",
        "actor_rollout_ref.model.path=/m",
        "actor_rollout_ref.actor.optim.lr=1e-6",
        "trainer.seed=3",
        "trainer.nnodes=1",
        "trainer.total_epochs=2",
    )


def test_report_reads_an_arrays_flags_string_variables_and_nested_arrays(tmp_path):
    # verl's V1-era scripts (examples/grpo_trainer/*_veomni.sh) build the launch from arrays like these.
    script = tmp_path / "run.sh"
    script.write_text(
        'ACTOR="\n    actor_rollout_ref.actor.ppo_mini_batch_size=32 \\\n    trainer.seed=3"\n'
        "CONFIG=(\n    --config-path=./config\n    -cn ppo_trainer\n)\nDATA=(data.train_batch_size=128)\n"
        'EXTRA=(\n    "${DATA[@]}"\n    $ACTOR\n    trainer.nnodes=1\n)\n'
        'python3 -m verl.trainer.main_ppo "${CONFIG[@]}" "${EXTRA[@]}" trainer.total_epochs=2\n'
    )
    (launch,) = read_launches(script)
    assert launch.argv == (
        "--config-path=./config",
        "-cn",
        "ppo_trainer",
        "data.train_batch_size=128",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32",
        "trainer.seed=3",
        "trainer.nnodes=1",
        "trainer.total_epochs=2",
    )


def test_report_cli_prints_the_table(tiny_assets, capsys):
    code = report_main(
        [
            str(CORPUS / "run_pf_ppo.sh"),
            "--model",
            str(tiny_assets["model"]),
            "--train-files",
            str(tiny_assets["train"]),
            "--val-files",
            str(tiny_assets["val"]),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "V0: passes" in out and "V1: passes" in out
    assert "V0 passes: 1" in out and "V1 passes: 1" in out


def test_report_skips_assignments_in_branches_known_not_to_run(tmp_path):
    # verl's tests/special_e2e/ppo_trainer/run_function_reward.sh writes its reward file only when asked to.
    script = tmp_path / "run.sh"
    script.write_text(
        "FN=${FN:-False}\nP=null\nRAY=(trainer.seed=1)\n"
        'if [ "${FN}" = "True" ]; then\n    P=/tmp/fn.py\nfi\n'
        'if [[ $FN == False ]] && [ -z "${UNSET:-}" ]; then\n    RAY=(trainer.seed=2)\n'
        'elif [ "$FN" != x ]; then\n    RAY+=(trainer.seed=3)\nelse\n    P=else\nfi\n'
        'if [ "$USER_SET" = 1 ]; then\n    RAY+=(trainer.nnodes=4)\nfi\n'
        'python3 -m verl.trainer.main_ppo reward.custom_reward_function.path=$P "${RAY[@]}"\n'
    )
    (launch,) = read_launches(script, unset_as_empty=True)
    # A test of a variable the user sets cannot be told: its branch is read, as bash runs it when they set it.
    assert launch.argv == ("reward.custom_reward_function.path=null", "trainer.seed=2", "trainer.nnodes=4")


def test_report_joins_a_value_continued_after_a_quote(tmp_path):
    # tree-sitter-bash ends `A='x,'` at the backslash-newline and reads `'y'` as a command; bash makes one word.
    script = tmp_path / "run.sh"
    script.write_text(
        "MODULES='{a.\\{*\\}:{},'\\\n'b:{}}'\nPATCHES=\"[x,\"\\\n\"y]\"\n"
        "python3 -m verl.trainer.main_ppo +k.m=${MODULES} +k.p=$PATCHES\n"
    )
    (launch,) = read_launches(script)
    assert launch.argv == ("+k.m={a.\\{*\\}:{},b:{}}", "+k.p=[x,y]")


def test_report_computes_arithmetic_in_a_default(tmp_path):
    # tree-sitter-bash reads `$((...))` inside `${VAR:-...}` as a command in a subshell.
    script = tmp_path / "run.sh"
    script.write_text(
        "LEN=${MAX_LEN:-$((1024 * 2))}\npython3 -m verl.trainer.main_ppo data.max_prompt_length=$((LEN + 1))\n"
    )
    (launch,) = read_launches(script)
    assert launch.argv == ("data.max_prompt_length=2049",)


def test_report_reads_nested_arithmetic_in_a_default_tree_sitter_rejects(tmp_path):
    # verl's examples/router_replay/run_qwen3_30b_a3b_megatron.sh: tree-sitter-bash cannot parse `$(((` there.
    script = tmp_path / "run.sh"
    script.write_text(
        "p=2\nr=3\nLEN=${LEN:-$(((p + r) * 2))}\npython3 -m verl.trainer.main_ppo data.max_prompt_length=$LEN\n"
    )
    (launch,) = read_launches(script)
    assert launch.argv == ("data.max_prompt_length=10",)


def test_report_knows_the_scripts_own_folder(tmp_path):
    # verl's examples/gdpo_trainer/run_qwen3_8b_fsdp.sh finds its checkout's root so.
    script = tmp_path / "examples" / "run.sh"
    script.parent.mkdir()
    script.write_text(
        'ROOT=$(cd -- "$(dirname "${BASH_SOURCE[0]}")/.." >/dev/null 2>&1 && pwd)\n'
        "HERE=$(cd $(dirname $0) && pwd)\n"
        "python3 -m verl.trainer.main_ppo reward.custom_reward_function.path=$ROOT/r.py trainer.x=$HERE\n"
    )
    (launch,) = read_launches(script, cwd=str(tmp_path), unset_as_empty=True)
    assert launch.argv == (f"reward.custom_reward_function.path={tmp_path}/r.py", f"trainer.x={tmp_path}/examples")
