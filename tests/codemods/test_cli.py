"""The CLI: modes, exit codes, report, bad input, and large unrelated trees."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from codemods.migrate import EXIT_CHANGED, EXIT_CLEAN, EXIT_ERROR, main

OLD_SCRIPT = """#!/bin/bash
python3 -m verl.trainer.main_ppo \\
    reward_model.enable=True \\
    reward_model.strategy=fsdp2 \\
    trainer.total_epochs=1
"""


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(args), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "run.sh"
    path.write_text(OLD_SCRIPT)
    path.chmod(0o755)
    return path


def test_diff_prints_and_writes_nothing(script):
    code, out, err = run_cli("--diff", str(script))
    assert code == EXIT_CHANGED
    assert "+python3 -m core_v1.main_ppo" in out and "+    reward.reward_model.enable=True" in out
    assert script.read_text() == OLD_SCRIPT
    assert "files would change" in err


def test_check_exits_1_and_writes_nothing(script):
    assert run_cli("--check", str(script))[0] == EXIT_CHANGED
    assert script.read_text() == OLD_SCRIPT


def test_default_rewrites_in_place_keeping_mode_then_nothing_to_do(script):
    code, _, err = run_cli(str(script))
    assert code == EXIT_CHANGED
    text = script.read_text()
    assert "reward.reward_model.enable=True" in text and "# TODO(migrate:reward-model-served)" in text
    assert script.stat().st_mode & 0o777 == 0o755
    assert "reward-model-served" in err  # the summary table counts the manual item
    assert run_cli(str(script))[0] == EXIT_CLEAN
    assert not list(script.parent.glob(".*.migrate")), "no temporary file left behind"


def test_report_json(script, tmp_path):
    report = tmp_path / "report.json"
    run_cli("--check", "--report", str(report), str(script))
    data = json.loads(report.read_text())
    (entry,) = data["files"]
    assert entry["status"] == "changed" and entry["kind"] == "sh"
    severities = {(f["rule"], f["severity"]) for f in entry["findings"]}
    assert ("reward-model-served", "MANUAL") in severities and ("entrypoint", "INFO") in severities
    assert all(isinstance(f["line"], int) and f["message"] for f in entry["findings"])
    assert data["summary"]["manual_per_rule"] == {"reward-model-served": 1}


def test_only_and_skip(script):
    run_cli("--only", "entrypoint", str(script))
    text = script.read_text()
    assert "core_v1.main_ppo" in text and "reward_model.enable=True" in text
    run_cli("--skip", "reward-model-served", str(script))
    assert "reward.reward_model.enable" in script.read_text() and "TODO" not in script.read_text()


def test_unknown_rule_is_a_clear_error(script):
    code, _, err = run_cli("--only", "entrypiont", str(script))
    assert code == EXIT_ERROR and "Did you mean 'entrypoint'" in err


def test_list_rules():
    code, out, _ = run_cli("--list-rules")
    assert code == EXIT_CLEAN
    assert "keep-on-v0" in out and "py-agent-loop-run" in out and "manual" in out


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("binary.sh", b"\x7fELF\x00\x01\x02", "binary file"),
        ("latin1.yaml", "trainer:\n  name: caf\xe9\n".encode("latin-1"), "not UTF-8"),
        ("broken.sh", b"python3 -m verl.trainer.main_ppo a=1 $(\n", "cannot parse"),
        ("broken.yaml", b"reward_model:\n  enable: [true\n", "not valid YAML"),
        ("broken.py", b"from verl import DataProto\ndef f(:\n", "not valid Python"),
        ("notes.txt", b"hello", "unknown file kind"),
    ],
)
def test_bad_input_is_named_left_untouched_and_exits_2(tmp_path, script, name, content, message):
    bad = tmp_path / name
    bad.write_bytes(content)
    code, _, err = run_cli(str(bad), str(script))
    assert code == EXIT_ERROR
    assert f"{bad}:" in err and message in err
    assert bad.read_bytes() == content
    assert "core_v1.main_ppo" in script.read_text(), "the good file is still migrated"


def test_missing_path_exits_2(tmp_path):
    code, _, err = run_cli(str(tmp_path / "nope.sh"))
    assert code == EXIT_ERROR and "no such file" in err


def test_directory_with_thousands_of_unrelated_files(tmp_path):
    tree = tmp_path / "project"
    for index in range(2000):
        folder = tree / f"pkg{index % 20}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"data{index}.txt").write_text("nothing to see")
    (tree / "pkg0" / "blob").write_bytes(b"\x00\x01binary without extension")
    (tree / ".git").mkdir()
    (tree / ".git" / "hook.sh").write_text(OLD_SCRIPT)
    (tree / "ci.yaml").write_text("jobs:\n  test:\n    runs-on: ubuntu-latest\n")
    (tree / "train.py").write_text("import os\nprint(os.getcwd())\n")
    code, _, err = run_cli("--check", str(tree))
    assert code == EXIT_CLEAN
    assert "files scanned                    2" in err  # ci.yaml and train.py; .git skipped
    assert (tree / ".git" / "hook.sh").read_text() == OLD_SCRIPT
