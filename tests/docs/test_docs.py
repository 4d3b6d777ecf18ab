"""The user docs live in the project and stay true to it: every relative link resolves, every
codemod rule is on the migration page, every extension page names an example and a test that exist,
and nothing points at documents outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from codemods.rules import RULES

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_PATH = re.compile(r"`((?:examples|tests|core_v1|legacy_v0|shims|codemods|benchmarks)/[\w./-]+)`")


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_links_and_paths_resolve(page):
    text = page.read_text()
    for target in _LINK.findall(text):
        if "://" not in target:
            assert (page.parent / target).exists(), f"{page.name}: broken link {target}"
    for path in _PATH.findall(text):
        assert (ROOT / path.rstrip(".")).exists(), f"{page.name}: {path} does not exist"


def test_every_codemod_rule_is_on_the_migration_page():
    text = (DOCS / "migration.md").read_text()
    missing = [name for name in RULES.names() if f"`{name}`" not in text]
    assert not missing, f"docs/migration.md lacks rules {missing} (python -m codemods.migrate --list-rules)"


def test_every_extension_page_names_a_runnable_example():
    for page in sorted((DOCS / "extending").glob("*.md")):
        examples = [p for p in _PATH.findall(page.read_text()) if p.startswith("examples/")]
        assert examples, f"{page.name} names no example"


def test_nothing_points_outside_the_repository():
    offenders = []
    for path in list(ROOT.glob("*.md")) + [
        p
        for top in ("core_v1", "legacy_v0", "shims", "codemods", "docs", "examples")
        for p in (ROOT / top).rglob("*")
        if p.suffix in (".py", ".md", ".yaml")
    ]:
        if re.search(r"\b(DESIGN|MIGRATION)\.md\b|\.\./shared/", path.read_text(errors="replace")):
            offenders.append(str(path.relative_to(ROOT)))
    assert not offenders
