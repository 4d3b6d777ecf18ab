"""`python -m codemods.migrate --verify`: the old arguments as V0 reads them against the migrated
ones as V1 reads them; verdicts, rules named, a broken rule caught, files never written, and
verl's own launch scripts (v0.5.0..v0.7.1, from the mirror; skipped without it)."""

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
from codemods.verify_judge import EQUIVALENT, REFUSED_BY_V0, UNEXPECTED
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
    (tmp_path / "reward.py").write_text("def my_score(data_source, solution_str, ground_truth, extra_info=None):\n"
                                        "    return float(solution_str.strip() == ground_truth)\n")
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/bash\npython3 -m verl.trainer.main_ppo algorithm.adv_estimator=grpo "
                      "data.train_files=data/train.parquet actor_rollout_ref.model.path=models/tiny "
                      f"custom_reward_function.path={tmp_path / 'reward.py'} custom_reward_function.name=my_score\n")
    return script


def test_fixture_pair_shows_the_three_verdicts(tmp_path):
    script = FIXTURES / "three_verdicts.sh"
    before = script.read_bytes()
    code, out = verify(str(script), "--report", str(tmp_path / "report.json"))
    assert code == 1, out  # the unexpected difference is a bug: exit 1
    found = [{"line": v["line"], "verdict": v["verdict"],
              "differences": [[d["setting"], d["rule"]] for d in v["differences"]]}
             for v in verdicts_of(tmp_path / "report.json")]
    assert found == json.loads((FIXTURES / "three_verdicts.expected.json").read_text())
    assert script.read_bytes() == before  # --verify never writes the user's file
    assert "algorithm.trainer_loop: sync -> colocate_async  [no rule makes this: unexpected]" in out
    assert "[entrypoint: verl's V0 config defaults actor_rollout_ref.model.path" in out


def test_a_rename_row_broken_on_purpose_is_an_unexpected_difference(reward_script, monkeypatch, tmp_path):
    assert verify(str(reward_script))[0] == 0  # the table as it is: equivalent
    # custom_reward_function.<k> sent to a wrong home: the codemod and the run-time shim both follow
    # the broken row, but V0's view reads verl's own home of the key (verify_view.OLD_HOMES).
    rows = [dataclasses.replace(row, new="reward.reward_kwargs.<k>") if row.old == "custom_reward_function.<k>" else row
            for row in rename_table._ROWS_BY_SPECIFICITY]
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

    def crash_once(argv):
        calls.append(argv)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return read_as_v1(argv)

    from codemods.verify_read import read_as_v1
    reward_script.write_text(reward_script.read_text() * 2)  # two launches
    monkeypatch.setattr("codemods.verify_judge.read_as_v1", crash_once)
    code, out = verify(str(reward_script))
    assert code == 1
    assert "internal error (RuntimeError: boom); a bug of rlbridge: please report" in out
    assert f"{reward_script}:4: {EQUIVALENT}" in out  # the second launch (line 4)


def test_what_v0_refuses_is_its_own_verdict_with_v0s_error_line(tmp_path):
    script = tmp_path / "lora.sh"
    script.write_text("python3 -m verl.trainer.main_ppo data.train_files=d.parquet actor_rollout_ref.model.path=m "
                      "actor_rollout_ref.model.lora_rank=8 critic.model.lora_rank=8\n")
    code, out = verify(str(script))
    assert code == 0
    assert out.splitlines()[0] == f"{script}:1: {REFUSED_BY_V0}"
    assert "LoRA" in out.splitlines()[1]


def test_a_launchs_yaml_config_is_read_migrated_on_v1_and_never_written(tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.mkdir()
    yaml = config / "mine.yaml"
    yaml.write_text("defaults:\n  - ppo_trainer\n  - _self_\nreward_model:\n  reward_manager: dapo\n"
                    "  reward_kwargs:\n    max_resp_len: 256\ntrainer:\n  val_generations_to_log_to_wandb: 4\n")
    script = tmp_path / "run.sh"
    script.write_text("python3 -m verl.trainer.main_ppo --config-path=config --config-name=mine "
                      "data.train_files=d.parquet actor_rollout_ref.model.path=m\n")
    before = yaml.read_bytes()
    monkeypatch.chdir(tmp_path)  # a relative --config-path is read from where the script runs
    code, out = verify(str(tmp_path), "--report", str(tmp_path / "report.json"))
    assert code == 0, out
    found = {Path(v["file"]).name: v for v in verdicts_of(tmp_path / "report.json")}
    assert found["run.sh"]["verdict"] == EQUIVALENT
    # The YAML on its own leaves the data and model paths to verl's V0 defaults, which V1 lacks.
    assert {(d["setting"], d["rule"]) for d in found["mine.yaml"]["differences"]} == {
        ("data.train_files", "entrypoint"), ("actor_rollout_ref.model.path", "entrypoint")}
    assert yaml.read_bytes() == before


# --------------------------------------------------------------------------- verl's own scripts
def _files_new_in(tag: str) -> list[str]:
    """examples/ and recipe/ files of `tag` (launch scripts and YAML) not identical in an earlier
    tag of VERL_TAGS: each distinct file is verified once."""
    def listing(at: str) -> set[tuple[str, str]]:
        out = subprocess.run(["git", "-C", str(VERL_MIRROR), "ls-tree", "-r", at, "--", "examples", "recipe"],
                             check=True, capture_output=True, text=True).stdout
        return {(line.split()[2], line.split("\t")[1]) for line in out.splitlines()
                if line.endswith((".sh", ".yaml", ".yml"))}
    earlier = set().union(*(listing(t) for t in VERL_TAGS[:VERL_TAGS.index(tag)]))
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
