"""Every rule, every file kind: input -> expected, idempotent, re-parses, expected findings."""

from __future__ import annotations

import pytest

from tests.codemods.codemod_fixtures import FixturePair, finding_lines, fixture_pairs
from codemods.findings import Severity, marker_text
from codemods.migrate import migrate_text
from codemods.rules import RULES, RuleSelection
from tests.codemods.reparse import assert_reparses

PAIRS = fixture_pairs()


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_fixture_pair(pair: FixturePair):
    source = pair.input_path.read_text(encoding="utf-8")
    expected = pair.expected_path.read_text(encoding="utf-8")
    result = migrate_text(source, pair.kind)
    assert result.migrated == expected
    assert finding_lines(result.findings) == pair.findings_path.read_text(encoding="utf-8").splitlines()
    assert any(f.rule == pair.rule for f in result.findings), f"rule {pair.rule} did not speak"
    assert_reparses(result.migrated, pair.kind, source)
    again = migrate_text(result.migrated, pair.kind)
    assert again.migrated == result.migrated, "a second run changed the file"


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_manual_findings_leave_one_marker_each(pair: FixturePair):
    result = migrate_text(pair.input_path.read_text(encoding="utf-8"), pair.kind)
    for finding in result.findings:
        if finding.severity is Severity.MANUAL:
            assert result.migrated.count(marker_text(finding.rule, finding.message)) == 1


@pytest.mark.parametrize("pair", PAIRS, ids=str)
def test_skipping_the_rule_silences_it(pair: FixturePair):
    source = pair.input_path.read_text(encoding="utf-8")
    result = migrate_text(source, pair.kind, RuleSelection.from_ids(skip=[pair.rule]))
    assert all(f.rule != pair.rule for f in result.findings)


def test_every_rule_has_a_fixture_pair_for_each_of_its_kinds():
    covered = {(pair.kind, pair.rule) for pair in PAIRS}
    missing = [(kind, name) for name in RULES for kind in RULES.get(name).kinds if (kind, name) not in covered]
    assert not missing


def test_only_one_rule_runs_only_that_rule():
    pair = next(p for p in PAIRS if (p.kind, p.rule) == ("sh", "reward-model-moved"))
    result = migrate_text(pair.input_path.read_text(), "sh", RuleSelection.from_ids(only=["entrypoint"]))
    assert {f.rule for f in result.findings} <= {"entrypoint"}
    assert "reward_model.enable" in result.migrated
