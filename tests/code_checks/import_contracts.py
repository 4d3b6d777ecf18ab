"""import-linter contract types the built-in ones lack; `[tool.importlinter]` in pyproject.toml uses them.

- `acyclic_modules`: no import cycle between modules, function-level (lazy) imports included, as
  grimp builds the graph. A cycle is reported as its strongly connected group, with the imports
  that close it, so the module that does two jobs is easy to find.
- `no_private_names`: no name starting with `_` (nor a module whose name does) imported from
  another package: `core_v1.algorithms.gpg` may import `_aggregate` from
  `core_v1.algorithms.policy_loss`, `core_v1.trainer` may not. Packages are compared `depth`
  levels deep (2: `core_v1.algorithms`, `codemods`).
"""

from __future__ import annotations

import re

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


def strongly_connected_groups(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iteratively: each group of more than one module that import one another."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        groups = strongly_connected_groups(graph)
        edges = [
            [(a, b) for a in group for b in sorted(graph.find_modules_directly_imported_by(a)) if b in group]
            for group in groups
        ]
        return ContractCheck(kept=not groups, metadata={"groups": groups, "edges": edges})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for group, edges in zip(check.metadata["groups"], check.metadata["edges"]):
            output.print_error(f"Import cycle among {len(group)} modules:", bold=True)
            for importer, imported in edges:
                output.print_error(f"- {importer} -> {imported}")
            output.new_line()


_PRIVATE = re.compile(r"\b_[A-Za-z0-9]\w*")


class NoPrivateNamesContract(Contract):
    type_name = "no_private_names"

    depth = fields.IntegerField(minimum=1, default=2)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        depth = int(self.depth)  # type: ignore[call-overload]
        found = []
        for importer in sorted(graph.modules):
            for imported in sorted(graph.find_modules_directly_imported_by(importer)):
                if _package(graph, importer, depth) == _package(graph, imported, depth):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    names = _imported_names(detail["line_contents"])
                    private = [name for name in names if _PRIVATE.fullmatch(name)]
                    if private or imported.rsplit(".", 1)[-1].startswith("_"):
                        found.append(
                            f"{importer}:{detail['line_number']} imports "
                            f"{', '.join(private) or imported} from {imported}"
                        )
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(f"- {line}")
        output.new_line()


def _package(graph: grimp.ImportGraph, module: str, depth: int) -> str:
    """The package a module belongs to (itself when it is one), cut to `depth` levels."""
    package = module if graph.find_children(module) else module.rpartition(".")[0] or module
    return ".".join(package.split(".")[:depth])


def _imported_names(line: str) -> list[str]:
    """The names a `from X import a, b as c` line binds from X (its first line, as grimp keeps it)."""
    if " import " not in line or not line.lstrip().startswith("from "):
        return []
    names = line.split(" import ", 1)[1].split("#", 1)[0].strip(" ()\\")
    return [part.split(" as ")[0].strip() for part in names.split(",") if part.strip()]
