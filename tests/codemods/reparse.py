"""Checks that migrated output still parses, shared by the codemod tests."""

from __future__ import annotations

import subprocess

import libcst  # noqa: F401  (imported so a missing dependency fails here, loudly)
from ruamel.yaml import YAML

from codemods.shell import first_error_line, parse_bash


def assert_reparses(text: str, kind: str) -> None:
    """Shell: tree-sitter without ERROR nodes and `bash -n`; YAML: loads; Python: compiles."""
    if kind == "sh":
        tree = parse_bash(text.encode())
        assert not tree.root_node.has_error, f"tree-sitter error at line {first_error_line(tree)}"
        checked = subprocess.run(["bash", "-n"], input=text.encode(), capture_output=True)
        assert checked.returncode == 0, checked.stderr.decode()
    elif kind == "yaml":
        YAML(typ="safe").load(text)
    else:
        compile(text, "<migrated>", "exec")
