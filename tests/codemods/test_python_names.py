"""Python imports are rewritten only to names rlbridge has: the table's targets import for real,
and the source-reading name index agrees with real imports."""

from __future__ import annotations

import importlib
import warnings

import pytest

from codemods import python_names
from codemods.migrate import migrate_text
from shims.rename_table import PYTHON_NAME_ROWS


def _imports(qualified: str) -> bool:
    with warnings.catch_warnings():  # legacy_v0 warns that it is deprecated when imported
        warnings.simplefilter("ignore")
        try:
            importlib.import_module(qualified)
            return True
        except ImportError:
            module, _, name = qualified.rpartition(".")
            try:
                return hasattr(importlib.import_module(module), name)
            except ImportError:
                return False


TARGETS = sorted({row.new for row in PYTHON_NAME_ROWS if row.new is not None})


@pytest.mark.parametrize("target", TARGETS)
def test_every_python_name_row_targets_a_name_that_imports(target):
    assert _imports(target), f"the rename table points at {target}, which rlbridge does not have"
    assert python_names.exists(target)


@pytest.mark.parametrize(
    "name",
    [
        "core_v1.algorithms",
        "core_v1.algorithms.agg_loss",
        "core_v1.algorithms.AdvantageEstimator",
        "core_v1.reward.scorers.gsm8k.compute_score",
        "core_v1.reward.scorers.math",
        "legacy_v0.workers.RewardModelWorker",
        "legacy_v0.protocol.all_gather_data_proto",
        "core_v1.agent_loop.tool_agent.AgentData",
        "core_v1.no_such_module",
    ],
)
def test_the_name_index_agrees_with_real_imports(name):
    assert python_names.exists(name) == _imports(name)


def test_a_file_without_verl_is_left_alone():
    source = "import core_v1.algorithms as algos\n\nx = algos.agg_loss\n"
    result = migrate_text(source, "py")
    assert result.migrated == source and not result.findings


def test_no_rewritten_import_in_the_fixtures_points_at_a_missing_name():
    from tests.codemods.codemod_fixtures import fixture_pairs
    import ast

    for pair in fixture_pairs():
        if pair.kind != "py":
            continue
        tree = ast.parse(pair.expected_path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.module
                and node.module.split(".")[0] in ("core_v1", "legacy_v0")
            ):
                for alias in node.names:
                    if alias.name != "*":
                        assert _imports(f"{node.module}.{alias.name}"), (pair, node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] in ("core_v1", "legacy_v0"):
                        assert _imports(alias.name), (pair, alias.name)
