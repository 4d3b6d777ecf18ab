"""`python -m codemods.migrate --verify`: the old arguments as V0 reads them against the migrated
ones as V1 reads them; verdicts, rules named, a broken rule caught, launches that would not run
still compared (keys the key table refuses left out on both sides), unreadable arguments, files
never written, and verl's own launch scripts (v0.5.0..v0.7.1, from the mirror; skipped without it)."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import subprocess
from pathlib import Path

import pytest

from codemods.migrate import main
from codemods.verify import Verifier, VerifyOptions
from codemods.verify_judge import EQUIVALENT, INTENDED, NO, UNEXPECTED, UNREADABLE
from codemods.verify_report import format_report
from shims import rename_table

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verify"
VERL_MIRROR = Path(os.environ.get("VERL_MIRROR", "/work/.mirror/verl-project+verl/repo"))
VERL_TAGS = ("v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0", "v0.7.1")


def verify(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--verify", *args], out=out, err=io.StringIO())
    return code, out.getvalue()


def verdicts_of(report: Path) -> list[dict]:
    return json.loads(report.read_text())["launches"]


@pytest.fixture
def reward_script(tmp_path: Path) -> Path:
    """A V0 launch whose reward function moved (custom_reward_function.* -> reward.custom_reward_function.*)."""
    (tmp_path / "reward.py").write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return float(solution_str.strip() == ground_truth)\n"
    )
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/bash\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
        "data.train_files=data/train.parquet actor_rollout_ref.model.path=models/tiny "
        f"custom_reward_function.path={tmp_path / 'reward.py'} custom_reward_function.name=my_score\n"
    )
    return script


def test_fixture_pair_shows_the_three_verdicts(tmp_path):
    script = FIXTURES / "three_verdicts.sh"
    before = script.read_bytes()
    code, out = verify(str(script), "--report", str(tmp_path / "report.json"))
    assert code == 1, out  # the unexpected difference is a bug: exit 1
    found = [
        {
            "line": v["line"],
            "verdict": v["verdict"],
            "differences": [[d["setting"], d["rule"]] for d in v["differences"]],
        }
        for v in verdicts_of(tmp_path / "report.json")
    ]
    assert found == json.loads((FIXTURES / "three_verdicts.expected.json").read_text())
    assert script.read_bytes() == before  # --verify never writes the user's file
    assert "algorithm.trainer_loop: sync -> colocate_async  [no rule makes this: unexpected]" in out


def test_a_rename_row_broken_on_purpose_is_an_unexpected_difference(reward_script, monkeypatch, tmp_path):
    assert verify(str(reward_script))[0] == 0  # the table as it is: equivalent
    # custom_reward_function.<k> sent to a wrong home: the codemod and the run-time shim both follow
    # the broken row, but V0's view reads verl's own home of the key (verify_view.OLD_HOMES).
    rows = [
        dataclasses.replace(row, new="reward.reward_kwargs.<k>") if row.old == "custom_reward_function.<k>" else row
        for row in rename_table._ROWS_BY_SPECIFICITY
    ]
    monkeypatch.setattr(rename_table, "_ROWS_BY_SPECIFICITY", rows)
    code, out = verify(str(reward_script), "--report", str(tmp_path / "report.json"))
    assert code == 1, out
    [launch] = verdicts_of(tmp_path / "report.json")
    assert launch["verdict"] == UNEXPECTED
    broken = {d["setting"]: d for d in launch["differences"]}["reward.custom_reward_function.path"]
    assert broken["old"] == str(reward_script.parent / "reward.py") and broken["new"] is None
    assert broken["rule"] is None


def test_a_skipped_rule_is_left_to_the_run_time_shim(reward_script):
    code, out = verify(str(reward_script), "--skip", "custom-reward-function")
    assert code == 0 and f"{reward_script}:2: {EQUIVALENT}" in out


def test_a_reading_that_crashes_is_reported_as_a_bug_and_the_rest_still_verified(reward_script, monkeypatch):
    calls = []

    def crash_once(argv, without=()):
        calls.append(argv)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return read_as_v1(argv, without)

    from codemods.verify_read import read_as_v1

    reward_script.write_text(reward_script.read_text() * 2)  # two launches
    monkeypatch.setattr("codemods.verify_judge.read_as_v1", crash_once)
    code, out = verify(str(reward_script))
    assert code == 1
    assert "internal error (RuntimeError: boom); a bug of rlbridge: please report" in out
    assert f"{reward_script}:4: {EQUIVALENT}" in out  # the second launch (line 4)


LAUNCH = "python3 -m verl.trainer.main_ppo data.train_files=d.parquet actor_rollout_ref.model.path=m"


def verify_launch(tmp_path: Path, *overrides: str) -> dict:
    """The JSON verdict of one launch of verl's trainer with `overrides`."""
    script = tmp_path / "run.sh"
    script.write_text(" ".join([LAUNCH, *overrides]) + "\n")
    verify(str(script), "--report", str(tmp_path / "report.json"))
    [launch] = verdicts_of(tmp_path / "report.json")
    return launch


def test_a_tool_agent_launch_runs_on_both_trainers(tmp_path):
    # V0's rollout runs V1's agent loops: neither side refuses a tool agent (V0-only refusals: below).
    launch = verify_launch(tmp_path, "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent")
    assert (launch["verdict"], launch["runs"], launch["wont_run"], launch["old_wont_run"]) == (EQUIVALENT, "V1", "", "")


def test_verls_one_step_off_trainer_becomes_separate_async_by_the_entrypoint_rule(tmp_path):
    script = tmp_path / "run.sh"
    script.write_text(LAUNCH.replace("verl.trainer.main_ppo", "verl.experimental.one_step_off_policy.main_ppo") + "\n")
    code, out = verify(str(script), "--report", str(tmp_path / "report.json"))
    assert code == 0, out
    [launch] = verdicts_of(tmp_path / "report.json")
    assert launch["verdict"] == INTENDED
    assert [(d["setting"], d["old"], d["new"], d["rule"]) for d in launch["differences"]] == [
        ("algorithm.trainer_loop", "sync", "separate_async", "entrypoint")
    ]


def test_a_launch_neither_trainer_runs_is_compared_with_both_reasons(tmp_path):
    launch = verify_launch(tmp_path, f"custom_reward_function.path={tmp_path / 'missing.py'}")
    assert (launch["verdict"], launch["runs"]) == (EQUIVALENT, NO)
    assert "missing.py' (reward.custom_reward_function.{path,name}) does not exist" in launch["wont_run"]
    assert launch["old_wont_run"] == launch["wont_run"]  # V0 refuses it with the same line
    code, out = verify(str(tmp_path / "run.sh"))
    assert code == 0 and out.splitlines()[:3] == [
        f"{tmp_path / 'run.sh'}:1: {EQUIVALENT} (does not run here)",
        f"    does not run here: {launch['wont_run']}",
        "    nor does the old launch, with the same line",
    ]


def test_a_command_substitution_is_read_once_for_both_sides(tmp_path):
    # `$(date +%N)` differs between any two runs of it; the old and the migrated launch must see one value.
    script = tmp_path / "run.sh"
    script.write_text(f"{LAUNCH} trainer.experiment_name=run_$(date +%s%N)\n")
    with Verifier(VerifyOptions(cwd=tmp_path, unset_as_empty=True)) as verifier:
        [verdict] = verifier.verify_paths([script])
    assert verdict.verdict == EQUIVALENT, verdict.differences


def test_a_relative_reward_file_is_found_from_where_the_script_runs(tmp_path):
    (tmp_path / "reward.py").write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
    )
    script = tmp_path / "run.sh"
    script.write_text(f"{LAUNCH} custom_reward_function.path=reward.py\n")
    with Verifier(VerifyOptions(cwd=tmp_path)) as verifier:
        [verdict] = verifier.verify_paths([script])
    assert (verdict.verdict, verdict.runs, verdict.old_wont_run) == (EQUIVALENT, "V1", "")


def test_a_reward_manager_neither_trainer_has_is_read_and_compared_with_its_arguments(tmp_path):
    # Each trainer refuses the name as it starts; the views still hold the name and its arguments.
    launch = verify_launch(tmp_path, "reward_model.reward_manager=mine", "reward_model.reward_kwargs.alpha=2")
    assert (launch["verdict"], launch["runs"]) == (EQUIVALENT, NO)
    assert "unknown reward manager 'mine'" in launch["wont_run"]
    assert "unknown V0 reward manager 'mine'" in launch["old_wont_run"]


def test_keys_the_key_table_refuses_are_left_out_on_both_sides_and_named(tmp_path):
    # Two refused keys in one line; the reward-loop key moves (reward_model.* -> reward.*) on the way.
    launch = verify_launch(
        tmp_path,
        "reward_model.reward_loop_source=importlib",
        "actor_rollout_ref.model.mtp.enable_train=true",
        "actor_rollout_ref.rollout.n=4",
    )
    assert (launch["verdict"], launch["runs"]) == (EQUIVALENT, NO)
    assert [k["key"] for k in launch["compared_without"]] == [
        "reward_model.reward_loop_source",
        "actor_rollout_ref.model.mtp.enable_train",
    ]
    assert "custom reward manager" in launch["compared_without"][0]["reason"]
    assert launch["wont_run"].startswith("not supported on rlbridge: reward.reward_manager.source=importlib")
    assert launch["old_wont_run"].startswith("not supported on rlbridge: ")


def test_the_rest_of_a_launch_with_a_refused_key_is_still_compared(tmp_path, monkeypatch):
    # A rule broken on purpose still shows beside a refused key (the launch is not set aside).
    rows = [
        dataclasses.replace(row, new="reward.reward_kwargs.<k>") if row.old == "custom_reward_function.<k>" else row
        for row in rename_table._ROWS_BY_SPECIFICITY
    ]
    monkeypatch.setattr(rename_table, "_ROWS_BY_SPECIFICITY", rows)
    launch = verify_launch(
        tmp_path, "actor_rollout_ref.model.mtp.enable_train=true", "custom_reward_function.name=mine"
    )
    assert launch["verdict"] == UNEXPECTED
    assert {(d["setting"], d["rule"]) for d in launch["differences"]} == {
        ("reward.custom_reward_function.name", None),
        ("reward.score_kwargs", None),
    }
    assert [k["key"] for k in launch["compared_without"]] == ["actor_rollout_ref.model.mtp.enable_train"]


@pytest.mark.parametrize(
    ("override", "said"),
    [
        ("trainer.experiment_name=run}", "cannot read the override 'trainer.experiment_name=run}'"),
        ("trainer.nnodes=", "trainer.nnodes='' is not a value it takes: an integer; default 1 (the value is empty"),
    ],
)
def test_arguments_that_cannot_be_read_are_unreadable_with_the_error_line(tmp_path, override, said):
    launch = verify_launch(tmp_path, override)
    assert (launch["verdict"], launch["runs"], launch["count"]) == (UNREADABLE, "", 0)
    assert launch["detail"].startswith(said)


def test_v1_refusing_what_v0_runs_is_unexpected_unless_v0_would_not_run_it_either(tmp_path, monkeypatch):
    from core_v1.trainer import constraints

    monkeypatch.setattr(constraints, "_mode_problems", lambda config: ["a V1-only refusal"])  # V1's checks only
    launch = verify_launch(tmp_path)
    assert (launch["verdict"], launch["runs"], launch["wont_run"]) == (UNEXPECTED, NO, "a V1-only refusal")
    assert [d["new"] for d in launch["differences"]] == ["refused: a V1-only refusal"]
    launch = verify_launch(tmp_path, "actor_rollout_ref.model.mtp.enable_train=true")  # V0 refuses it too
    assert (launch["verdict"], launch["runs"], launch["count"]) == (EQUIVALENT, NO, 0)
    assert launch["old_wont_run"].startswith("not supported on rlbridge: actor_rollout_ref.model.mtp.enable_train=true")


def test_a_directory_table_says_where_each_migrated_launch_runs(tmp_path):
    (tmp_path / "runs.sh").write_text(LAUNCH + "\n")
    (tmp_path / "refused.sh").write_text(f"{LAUNCH} actor_rollout_ref.model.mtp.enable_train=true\n")
    (tmp_path / "broken.sh").write_text(f"{LAUNCH} trainer.nnodes=\n")
    code, out = verify(str(tmp_path), "--report", str(tmp_path / "report.json"))
    assert code == 0, out
    table = [line.split() for line in out.split("\n\n")[0].splitlines()]
    assert table == [
        ["file", "line", "verdict", "runs", "count"],
        ["broken.sh", "1", "unreadable", "-", "0"],
        ["refused.sh", "1", "equivalent", "no", "0"],
        ["runs.sh", "1", "equivalent", "V1", "0"],
    ]
    assert (
        "3 launch(es): 2 equivalent, 0 intended differences, 0 unexpected differences, 1 unreadable; "
        "1 run on rlbridge" in out
    )
    assert "refused.sh:1: equivalent (does not run here)" in out  # the details say why
    assert json.loads((tmp_path / "report.json").read_text())["summary"]["run_on_rlbridge"] == 1


def test_a_launchs_yaml_config_is_read_migrated_on_v1_and_never_written(tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.mkdir()
    yaml = config / "mine.yaml"
    # verl 0.7's own ppo_trainer carries the older reward homes as null placeholders: they set nothing.
    yaml.write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\nreward_model:\n  reward_manager: dapo\n"
        "  reward_kwargs:\n    max_resp_len: 256\n  enable: null\n  model:\n    path: null\n"
        "custom_reward_function:\n  path: null\n  name: null\ntrainer:\n  val_generations_to_log_to_wandb: 4\n"
    )
    script = tmp_path / "run.sh"
    script.write_text(
        "python3 -m verl.trainer.main_ppo --config-path=config --config-name=mine "
        "data.train_files=d.parquet actor_rollout_ref.model.path=m\n"
    )
    before = yaml.read_bytes()
    monkeypatch.chdir(tmp_path)  # a relative --config-path is read from where the script runs
    code, out = verify(str(tmp_path), "--report", str(tmp_path / "report.json"))
    assert code == 0, out
    found = {Path(v["file"]).name: v for v in verdicts_of(tmp_path / "report.json")}
    assert found["run.sh"]["verdict"] == EQUIVALENT
    # The YAML on its own leaves the data and model paths to verl's defaults, which V1 shares.
    assert found["mine.yaml"]["verdict"] == EQUIVALENT and found["mine.yaml"]["differences"] == []
    assert yaml.read_bytes() == before


def test_a_yaml_config_edited_between_two_verifications_is_read_again(tmp_path, monkeypatch):
    # The readings reuse a composition of the same arguments and a parsed YAML file only while the
    # file's bytes are the same; the edit below keeps its size, within the same clock tick.
    yaml = tmp_path / "config" / "mine.yaml"
    yaml.parent.mkdir()
    yaml.write_text("defaults:\n  - ppo_trainer\n  - _self_\ndata:\n  max_prompt_length: 64\n")
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo --config-path=config --config-name=mine\n")
    monkeypatch.chdir(tmp_path)
    assert verify(str(script), "--report", str(tmp_path / "report.json"))[0] == 0
    assert verdicts_of(tmp_path / "report.json")[0]["verdict"] == EQUIVALENT
    yaml.write_text(yaml.read_text().replace("max_prompt_length", "max_prompt_lenght"))  # a typo now
    verify(str(script), "--report", str(tmp_path / "report.json"))
    (launch,) = verdicts_of(tmp_path / "report.json")
    assert launch["verdict"] == UNREADABLE and "data.max_prompt_lenght" in launch["detail"], launch


@pytest.mark.parametrize(
    "before",
    [
        "",
        'TEST_FILE=${TEST_FILE:-["/data/test.parquet"]}\n',
    ],  # verl's entropy scripts: bash reads it, the parser does not
    ids=["plain", "a line the parser cannot read"],
)
def test_a_recipe_launch_is_read_on_the_recipes_own_config_on_both_sides(tmp_path, monkeypatch, before):
    # verl's DAPO recipe composes recipe/dapo/config/dapo_trainer.yaml (its @hydra.main's), which the
    # migration names; the old launch is read on it too, so its settings are no difference.
    config = tmp_path / "recipe/dapo/config"
    config.mkdir(parents=True)
    (config / "dapo_trainer.yaml").write_text(
        "defaults:\n  - ppo_trainer\n  - _self_\nreward_model:\n  reward_manager: dapo\n"
        "trainer:\n  project_name: verl-dapo\n"
    )
    (tmp_path / "run.sh").write_text(
        before + "python3 -m recipe.dapo.main_dapo data.train_files=d.parquet actor_rollout_ref.model.path=m\n"
    )
    monkeypatch.chdir(tmp_path)
    code, out = verify(str(tmp_path / "run.sh"), "--report", str(tmp_path / "report.json"))
    (found,) = verdicts_of(tmp_path / "report.json")
    assert found["verdict"] == EQUIVALENT, out


# --------------------------------------------------------------------------- verl's own scripts
def _files_new_in(tag: str) -> list[str]:
    """examples/ and recipe/ files of `tag` (launch scripts and YAML) not identical in an earlier
    tag of VERL_TAGS: each distinct file is verified once."""

    def listing(at: str) -> set[tuple[str, str]]:
        out = subprocess.run(
            ["git", "-C", str(VERL_MIRROR), "ls-tree", "-r", at, "--", "examples", "recipe"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return {
            (line.split()[2], line.split("\t")[1])
            for line in out.splitlines()
            if line.endswith((".sh", ".yaml", ".yml"))
        }

    earlier = set().union(*(listing(t) for t in VERL_TAGS[: VERL_TAGS.index(tag)]))
    return sorted(path for blob, path in listing(tag) - earlier)


@pytest.mark.slow
@pytest.mark.skipif(not (VERL_MIRROR / "HEAD").is_file(), reason="verl's git mirror is not here")
@pytest.mark.parametrize("tag", VERL_TAGS)
def test_verls_launch_scripts_show_no_unexpected_difference(tag):
    from benchmarks.verl_scripts import scripts_of

    with scripts_of(VERL_MIRROR, tag) as root:  # git archive of the tag's examples/ and recipe/
        with Verifier(VerifyOptions(cwd=root, unset_as_empty=True)) as verifier:
            verdicts = verifier.verify_paths([root / path for path in _files_new_in(tag)])
        unexpected = [v for v in verdicts if v.verdict == UNEXPECTED]
        assert not unexpected, format_report(unexpected, [root])
    assert sum(v.verdict == EQUIVALENT for v in verdicts) > 0
