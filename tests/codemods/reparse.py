"""Checks that migrated output still parses, shared by the codemod tests."""

from __future__ import annotations

import subprocess

import libcst  # noqa: F401  (imported so a missing dependency fails here, loudly)
from ruamel.yaml import YAML

from codemods.shell import first_error_line, parse_bash
from codemods.shell_words import masked_for_parsing


def assert_reparses(text: str, kind: str, original: str | None = None) -> None:
    """Shell: `bash -n`, and tree-sitter without ERROR nodes unless the original (masked) already
    had some; YAML: loads; Python: compiles."""
    if kind == "sh":
        if original is None or not parse_bash(masked_for_parsing(original.encode())).root_node.has_error:
            tree = parse_bash(masked_for_parsing(text.encode()))
            assert not tree.root_node.has_error, f"tree-sitter error at line {first_error_line(tree)}"
        checked = subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True)
        assert checked.returncode == 0, checked.stderr.decode()
    elif kind == "yaml":
        YAML(typ="safe").load(text)
    else:
        compile(text, "<migrated>", "exec")
