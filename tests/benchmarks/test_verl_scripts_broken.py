"""benchmarks/verl_scripts.py counts apart only the launches verl itself cannot run as written: a
config or reward file the tag lacks, or a logger list inside quotes; never a path it cannot judge."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import verl_scripts  # noqa: E402


def _tree(tmp_path: Path, submodule: bool = False) -> Path:
    (tmp_path / "verl/trainer/config").mkdir(parents=True)
    (tmp_path / "verl/trainer/config/ppo_trainer.yaml").write_text("{}\n")
    (tmp_path / "verl/utils/reward_score").mkdir(parents=True)
    (tmp_path / "verl/utils/reward_score/gsm8k.py").write_text("")
    if submodule:
        (tmp_path / ".gitmodules").write_text('[submodule "recipe"]\n\tpath = recipe\n')
    return tmp_path


def test_what_the_tag_holds_or_cannot_be_judged_is_not_broken(tmp_path):
    root = _tree(tmp_path)
    fine = [
        ["--config-path=config", "--config-name=ppo_trainer"],
        ["--config-path", f"{root}/verl/trainer/config", "--config-name", "ppo_trainer.yaml"],
        ["--config-path=/home/user/configs", "--config-name=mine"],  # the user's own folder
        ["reward.custom_reward_function.path=verl/utils/reward_score/gsm8k.py"],
        ["reward.custom_reward_function.path=/home/user/reward.py"],
        ["reward.custom_reward_function.path=null"],
        ["--config-path=@@BASE_DIR@@/recipe/x/configs", "--config-name=x"],  # the user's variable
        ["--config-name", "@@1@@"],
        ["reward.custom_reward_function.path=<path_to_reward.py>"],
        ["trainer.logger=[console,wandb]", "trainer.logger='console'"],
    ]
    for argv in fine:
        assert verl_scripts.broken_on_verl(argv, root) is None, argv


def test_a_missing_config_or_reward_file_and_a_quoted_logger_list_are_broken(tmp_path):
    root = _tree(tmp_path)
    assert "no folder 'config'" in verl_scripts.broken_on_verl(["--config-path=config", "-cn=dapo"], root)
    assert "reward function file" in verl_scripts.broken_on_verl(
        ["+reward.custom_reward_function.path=verl/utils/reward_score/openr1mm.py"], root
    )
    assert "one quoted string" in verl_scripts.broken_on_verl(["trainer.logger='[console,wandb]'"], root)
    assert "parser cannot read" in verl_scripts.broken_on_verl(["trainer.experiment_name=run_8npu}"], root)


def test_a_path_into_a_submodule_is_never_judged_missing(tmp_path):
    root = _tree(tmp_path, submodule=True)
    assert verl_scripts.broken_on_verl(["reward.custom_reward_function.path=recipe/retool/retool.py"], root) is None
    assert verl_scripts.broken_on_verl(["--config-path=config", "--config-name=dapo"], root) is None


def test_a_reward_file_the_script_writes_itself_is_not_judged_missing(tmp_path):
    root = _tree(tmp_path)
    token = f"reward.custom_reward_function.path={root}/my_reward.py"
    writes = f'path="$(pwd)/my_reward.py"\ncat <<EOF > "$path"\nEOF\npython3 -m verl.trainer.main_ppo {token}\n'
    assert verl_scripts.broken_on_verl([token], root, writes) is None
    assert "reward function file" in verl_scripts.broken_on_verl([token], root, f"python3 -m x \\\n  {token}\n")


def test_a_key_verls_configs_lack_set_without_plus_is_broken(tmp_path):
    root = _tree(tmp_path)
    (root / "recipe/entropy/config").mkdir(parents=True)
    (root / "recipe/entropy/config/entropy_trainer.yaml").write_text(
        "actor_rollout_ref:\n  actor:\n    policy_loss:\n      clip_cov_ratio: 0.0002\n"
    )
    unknown = verl_scripts.Outcome("fails", "unknown config key 'actor_rollout_ref.actor.loss_mode'. Did you mean ...")
    judged = verl_scripts._unknown_to_verl(unknown, ["actor_rollout_ref.actor.loss_mode=kl_cov"], root, "v0.4.1")
    assert "without '+'" in judged
    # Added with '+', a key of verl's configs at the tag, or one a YAML of the tree defines: not judged.
    assert verl_scripts._unknown_to_verl(unknown, ["+actor_rollout_ref.actor.loss_mode=kl_cov"], root, "v0.4.1") is None
    known = verl_scripts.Outcome("fails", "unknown config key 'actor_rollout_ref.actor.policy_loss.loss_mode'.")
    argv = ["actor_rollout_ref.actor.policy_loss.loss_mode=kl_cov"]
    assert verl_scripts._unknown_to_verl(known, argv, root, "v0.4.1") is None
    in_yaml = verl_scripts.Outcome("fails", "unknown config key 'actor_rollout_ref.actor.policy_loss.clip_cov_ratio'.")
    argv = ["actor_rollout_ref.actor.policy_loss.clip_cov_ratio=0.001"]
    assert verl_scripts._unknown_to_verl(in_yaml, argv, root, "v0.4.1") is None
    submodule = _tree(tmp_path / "sub", submodule=True)
    argv = ["actor_rollout_ref.actor.loss_mode=kl_cov"]
    assert verl_scripts._unknown_to_verl(unknown, argv, submodule, "v0.8.0") is None


def test_a_config_missing_from_a_folder_of_the_tree_is_broken_even_beside_a_submodule(tmp_path):
    root = _tree(tmp_path, submodule=True)
    (root / "verl/experimental/fully_async_policy/config").mkdir(parents=True)
    folder = "--config-path=verl/experimental/fully_async_policy/config"
    assert "no such config" in verl_scripts.broken_on_verl(
        [folder, "--config-name=fully_async_dapo_trainer.yaml"], root
    )
    (root / "verl/experimental/fully_async_policy/config/mine.yaml").write_text("{}\n")
    assert verl_scripts.broken_on_verl([folder, "--config-name=mine"], root) is None
