"""The corpus of old launch scripts: all migrate (exit 0/1), idempotently, re-parse, and fast."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from codemods.audit import unmarked_shell_keys
from codemods.files import discover
from codemods.migrate import EXIT_CHANGED, EXIT_CLEAN, main, migrate_text
from tests.codemods.reparse import assert_reparses

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "old_scripts"
SCRIPTS = sorted(p for p in CORPUS.iterdir() if p.is_file())


def test_corpus_has_at_least_30_scripts_found_by_discovery():
    assert len(SCRIPTS) >= 30
    assert {c.path for c in discover([CORPUS])} == set(SCRIPTS)  # incl. the extension-less one


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_script_migrates_idempotently_and_reparses(script: Path):
    source = script.read_text()
    result = migrate_text(source, "sh")
    assert not result.failed, result.findings
    assert_reparses(result.migrated, "sh")
    assert migrate_text(result.migrated, "sh").migrated == result.migrated
    assert "verl.trainer.main_ppo" not in result.migrated
    assert "verl/trainer/main_ppo.py" not in result.migrated


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_no_legacy_key_is_left_unmarked(script: Path):
    # The audit reads override words without the shell engine's parser: a launch the engine did
    # not recognise (a recipe, a string variable, a script tree-sitter rejects) shows up here.
    assert unmarked_shell_keys(migrate_text(script.read_text(), "sh").migrated) == []


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_cli_over_the_corpus_then_check_is_clean(tmp_path, capsys):
    work = tmp_path / "scripts"
    shutil.copytree(CORPUS, work)
    started = time.perf_counter()
    assert main([str(work)]) == EXIT_CHANGED
    elapsed = time.perf_counter() - started
    print(f"corpus of {len(SCRIPTS)} scripts migrated in {elapsed:.2f}s")
    assert elapsed < 3.0
    assert main(["--check", str(work)]) == EXIT_CLEAN
    assert (work / "train_grpo_noext").stat().st_mode & 0o111, "executable bit kept"


def test_already_v1_script_is_untouched():
    source = (CORPUS / "run_already_v1.sh").read_text()
    result = migrate_text(source, "sh")
    assert result.migrated == source and not result.findings
