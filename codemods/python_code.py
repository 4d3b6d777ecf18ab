"""Python engine: rewrite verl-era imports and APIs with libcst, resolving names by qualified name.

Names are resolved with libcst's `QualifiedNameProvider`, so `import verl.protocol as vp`,
`from verl import DataProto as DP` and dotted use (`verl.trainer.ppo.core_algos.agg_loss`) are all
recognised, and a local variable that happens to share a name is not. What it does:

- imports (`py-imports`): every module/class row of `shims.rename_table` is applied to plain,
  aliased and star imports; a from-import whose names now live in different modules is split; a
  renamed class (`AsyncLLMServerManager` -> `LLMServerClient`) is renamed where it is used unless
  it was imported under an alias.
- removed APIs (`py-removed-api`) and verl imports the table does not cover (`py-unmapped-verl`)
  keep their import and get a `# TODO(migrate:RULE): ...` line above it.
- an import is rewritten only to a name rlbridge has (`codemods.python_names`, read from the source):
  `core_algos.AdvantageEstimator`, whose module moved but which `core_v1.algorithms` lacks, keeps
  its import and gets a marker (`py-no-equivalent`), as does a use `module.NAME` of a moved module.
- subclasses (`py-subclass`) of V0 workers and removed classes, and constructions
  (`py-constructor`) of server managers, get a marker naming the V1 extension point.
- the v0.5 agent loop (`py-agent-loop-run`): `run(self, messages, sampling_params)` becomes
  `run(self, sampling_params, **kwargs)` with `messages = kwargs["raw_prompt"]`, and in that
  class `await self.server_manager.generate(...)` (`py-generate-output`), which returned a token
  list in v0.5, becomes `(await ...).token_ids`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node
from libcst.metadata import MetadataWrapper, PositionProvider, QualifiedNameProvider

from codemods import python_names
from codemods.findings import Finding, MigrationResult, Severity, marker_text
from codemods.rules import ALL_RULES, RuleSelection
from shims import rename_table
from shims.rename_table import NameAction

_LEGACY_ROOTS = rename_table.legacy_python_roots()
_AGENT_LOOP_BASES = frozenset(
    {
        "core_v1.agent_loop.AgentLoopBase",
        "verl.experimental.agent_loop.AgentLoopBase",
        "verl.experimental.agent_loop.agent_loop.AgentLoopBase",
    }
)


def _dotted(expression: str) -> cst.Attribute | cst.Name:
    return cst.parse_expression(expression)  # type: ignore[return-value]


def _is_legacy(module: str) -> bool:
    return module.split(".")[0] in _LEGACY_ROOTS


@dataclass
class _ImportPlan:
    """What one import statement becomes: replacement statements and markers for its line."""

    replacements: list[cst.BaseSmallStatement]
    markers: list[tuple[str, str]] = field(default_factory=list)  # (rule, message)


class _Migrator(cst.CSTTransformer):
    METADATA_DEPENDENCIES = (QualifiedNameProvider, PositionProvider)

    def __init__(self, selection: RuleSelection, header_comments: frozenset[str] = frozenset()):
        super().__init__()
        self.selection = selection
        # libcst keeps the comments above the first statement in the module header, not in the
        # statement: a marker already there must not be added again.
        self._header_comments = header_comments
        self.findings: list[Finding] = []
        self._statement_markers: list[list[tuple[str, str]]] = []
        self._local_renames: dict[str, tuple[str, str]] = {}  # local name -> (old qualified, new local)
        self._dotted_renames: dict[str, str] = {}  # `import a.b` usage prefix -> new prefix
        self._in_import = 0
        self._v05_classes: list[bool] = []
        self._missing_targets: dict[str, str] = {}  # verl name -> its table target rlbridge lacks

    # ------------------------------------------------------------------ bookkeeping

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def _qualified(self, node: cst.CSTNode) -> set[str]:
        return {q.name for q in self.get_metadata(QualifiedNameProvider, node, set())}

    def _report(self, rule: str, node: cst.CSTNode, severity: Severity, message: str) -> bool:
        if not self.selection.enabled(rule):
            return False
        self.findings.append(Finding(rule, self._line(node), severity, message))
        return True

    def _mark(self, rule: str, node: cst.CSTNode, message: str) -> None:
        """A MANUAL finding plus a marker above the innermost enclosing statement."""
        if self._report(rule, node, Severity.MANUAL, message) and self._statement_markers:
            self._statement_markers[-1].append((rule, message))

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            self._statement_markers.append([])
        if isinstance(node, (cst.Import, cst.ImportFrom)):
            self._in_import += 1
        return super().on_visit(node)

    def on_leave(self, original_node: cst.CSTNode, updated_node):
        updated = super().on_leave(original_node, updated_node)
        if isinstance(original_node, (cst.Import, cst.ImportFrom)):
            self._in_import -= 1
        if isinstance(original_node, (cst.SimpleStatementLine, cst.BaseCompoundStatement)):
            updated = _with_markers(updated, self._statement_markers.pop(), self._header_comments)
        return updated

    # ------------------------------------------------------------------ imports

    def leave_SimpleStatementLine(self, original_node, updated_node):
        body: list[cst.BaseSmallStatement] = []
        for original, updated in zip(original_node.body, updated_node.body):
            plan = self._plan_import(original) if isinstance(original, (cst.Import, cst.ImportFrom)) else None
            if plan is None:
                body.append(updated)
                continue
            body.extend(plan.replacements)
            self._statement_markers[-1].extend(plan.markers)
        if len(body) == len(updated_node.body) and all(a is b for a, b in zip(body, updated_node.body)):
            return updated_node
        if len(original_node.body) == 1 and len(body) > 1:
            # One import split in several: one line each, the first keeping the comments above.
            lines = [updated_node.with_changes(body=[body[0]])]
            lines += [cst.SimpleStatementLine(body=[statement]) for statement in body[1:]]
            return cst.FlattenSentinel(lines)
        return updated_node.with_changes(body=[s.with_changes(semicolon=cst.MaybeSentinel.DEFAULT) for s in body])

    def _plan_import(self, node: cst.Import | cst.ImportFrom) -> _ImportPlan | None:
        if isinstance(node, cst.Import):
            return self._plan_plain_import(node)
        if node.relative or node.module is None:
            return None
        module = get_full_name_for_node(node.module)
        if not _is_legacy(module):
            return None
        if isinstance(node.names, cst.ImportStar):
            return self._plan_star_import(node, module)
        return self._plan_from_import(node, module)

    def _plan_plain_import(self, node: cst.Import) -> _ImportPlan | None:
        aliases, markers, changed = [], [], False
        for alias in node.names:
            name = get_full_name_for_node(alias.name)
            if not _is_legacy(name):
                aliases.append(alias)
                continue
            action = self._resolve(name)
            if (
                action is not None
                and action.new_name
                and self._report(action.row.rule, node, Severity.INFO, f"import {name} -> import {action.new_name}")
            ):
                aliases.append(alias.with_changes(name=_dotted(action.new_name)))
                if alias.asname is None:
                    self._dotted_renames[name] = action.new_name
                changed = True
                continue
            aliases.append(alias)
            markers.extend(self._removed_or_unmapped(node, name, action))
        if not changed and not markers:
            return None
        return _ImportPlan([node.with_changes(names=_fix_commas(aliases))] if changed else [node], markers)

    def _plan_star_import(self, node: cst.ImportFrom, module: str) -> _ImportPlan | None:
        action = self._resolve(module)
        if (
            action is not None
            and action.new_name
            and self._report(
                action.row.rule, node, Severity.INFO, f"from {module} import * -> from {action.new_name} import *"
            )
        ):
            return _ImportPlan([node.with_changes(module=_dotted(action.new_name))])
        markers = self._removed_or_unmapped(node, f"{module}.*", action)
        return _ImportPlan([node], markers) if markers else None

    def _plan_from_import(self, node: cst.ImportFrom, module: str) -> _ImportPlan | None:
        # Names that stay (removed or unmapped) come first: the markers go above the first line.
        groups: dict[str, list[cst.ImportAlias]] = {module: []}
        markers: list[tuple[str, str]] = []
        for alias in node.names:
            name = get_full_name_for_node(alias.name)
            action = self._resolve(f"{module}.{name}")
            if (
                action is None
                or action.new_name is None
                or not self._report(action.row.rule, node, Severity.INFO, f"{module}.{name} -> {action.new_name}")
            ):
                groups.setdefault(module, []).append(alias)
                markers.extend(self._removed_or_unmapped(node, f"{module}.{name}", action))
                continue
            new_module, new_name = action.new_name.rsplit(".", 1)
            if new_name != name:
                if alias.asname is None:
                    self._local_renames[name] = (f"{module}.{name}", new_name)
                alias = alias.with_changes(name=cst.Name(new_name))
            groups.setdefault(new_module, []).append(alias)
        groups = {target: aliases for target, aliases in groups.items() if aliases}
        if list(groups) == [module] and not markers:
            return None
        statements = [
            node.with_changes(module=_dotted(target), names=_fix_commas(aliases)) for target, aliases in groups.items()
        ]
        return _ImportPlan(statements, markers)

    def _resolve(self, name: str) -> NameAction | None:
        """The table's answer for `name`, with `new_name` None when rlbridge lacks the target."""
        action = rename_table.resolve_python_name(name)
        if action is None or action.new_name is None or python_names.exists(action.new_name):
            return action
        self._missing_targets[name] = action.new_name
        return NameAction(name, None, action.row)

    def _no_equivalent_message(self, name: str, row) -> str:
        return (
            f"{name} would become {self._missing_targets[name]}, which rlbridge does not have ({row.old} "
            f"moved to {row.new}, but not all of it); replace it with an rlbridge API by hand"
        )

    def _removed_or_unmapped(self, node, name: str, action: NameAction | None) -> list[tuple[str, str]]:
        if name in self._missing_targets:
            rule, message = "py-no-equivalent", self._no_equivalent_message(name, action.row)
        elif action is not None and action.new_name is None:
            rule, message = action.row.rule, f"{name}: {action.row.message}"
        else:
            rule = "py-unmapped-verl"
            message = (
                f"{name} is not in the rename table and rlbridge does not ship verl; "
                "replace it with an rlbridge API by hand"
            )
        if not self._report(rule, node, Severity.MANUAL, message):
            return []
        return [(rule, message)]

    # ------------------------------------------------------------------ uses of renamed names

    def leave_Name(self, original_node, updated_node):
        if self._in_import or original_node.value not in self._local_renames:
            return updated_node
        old_qualified, new_local = self._local_renames[original_node.value]
        if old_qualified not in self._qualified(original_node):
            return updated_node  # a local that shadows the imported name
        return updated_node.with_changes(value=new_local)

    def leave_Attribute(self, original_node, updated_node):
        if self._in_import or not self._dotted_renames:
            return updated_node
        written = get_full_name_for_node(original_node)
        if written in self._dotted_renames and written in self._qualified(original_node):
            return _dotted(self._dotted_renames[written]).with_changes(lpar=updated_node.lpar, rpar=updated_node.rpar)
        return updated_node

    def visit_Attribute(self, node: cst.Attribute) -> None:
        # `core_algos.AdvantageEstimator` after the module import moved: the module exists, the name may not.
        if self._in_import:
            return
        for module in sorted(self._qualified(node.value)):
            action = rename_table.resolve_python_name(module)
            if action is None or action.new_name is None or python_names.module_file(action.new_name) is None:
                continue
            target = f"{action.new_name}.{node.attr.value}"
            if not python_names.exists(target):
                self._missing_targets[f"{module}.{node.attr.value}"] = target
                self._mark(
                    "py-no-equivalent",
                    node,
                    "this use of " + self._no_equivalent_message(f"{module}.{node.attr.value}", action.row),
                )
            return

    def visit_Call(self, node: cst.Call) -> None:
        for qualified in self._qualified(node.func):
            action = rename_table.resolve_python_name(qualified)
            if action is not None and action.row.call_message and action.qualified_name == action.row.old:
                self._mark("py-constructor", node, f"{qualified}(...): {action.row.call_message}")
                return

    # ------------------------------------------------------------------ classes

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        base_names = {q for base in node.bases for q in self._qualified(base.value)}
        for qualified in sorted(base_names):
            action = rename_table.resolve_python_name(qualified)
            if action is not None and action.row.subclass_message:
                self._mark(
                    "py-subclass", node, f"{node.name.value} subclasses {qualified}: {action.row.subclass_message}"
                )
        is_agent_loop = bool(base_names & _AGENT_LOOP_BASES)
        self._v05_classes.append(
            is_agent_loop and any(isinstance(s, cst.FunctionDef) and _v05_run_messages_param(s) for s in node.body.body)
        )

    def leave_ClassDef(self, original_node, updated_node):
        self._v05_classes.pop()
        return updated_node

    def leave_FunctionDef(self, original_node, updated_node):
        if not (self._v05_classes and self._v05_classes[-1]):
            return updated_node
        messages = _v05_run_messages_param(original_node)
        if messages is None or not self._report(
            "py-agent-loop-run",
            original_node,
            Severity.WARNING,
            f"run(self, {messages}, sampling_params) -> run(self, sampling_params, "
            f"**kwargs); {messages} now comes from kwargs['raw_prompt']",
        ):
            return updated_node
        params = updated_node.params
        new_params = params.with_changes(
            params=[params.params[0], params.params[2]], star_kwarg=cst.Param(cst.Name("kwargs"))
        )
        read = cst.parse_statement(f'{messages} = kwargs["raw_prompt"]')
        body = list(updated_node.body.body)
        at = 1 if body and _is_docstring(body[0]) else 0
        body.insert(at, read)
        return updated_node.with_changes(params=new_params, body=updated_node.body.with_changes(body=body))

    def leave_Await(self, original_node, updated_node):
        if not (self._v05_classes and self._v05_classes[-1]) or not _is_server_generate(original_node.expression):
            return updated_node
        if not self._report(
            "py-generate-output",
            original_node,
            Severity.WARNING,
            "server_manager.generate(...) now returns an object: its token list is .token_ids "
            "(log-probs in .log_probs, stop reason in .stop_reason)",
        ):
            return updated_node
        return cst.Attribute(
            value=updated_node.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()]), attr=cst.Name("token_ids")
        )


def _v05_run_messages_param(function: cst.FunctionDef) -> str | None:
    """The messages parameter's name when `function` is the v0.5 `run(self, messages, sampling_params)`."""
    params = function.params
    names = [p.name.value for p in params.params]
    if (
        function.name.value != "run"
        or len(names) != 3
        or names[2] != "sampling_params"
        or params.star_kwarg is not None
        or not isinstance(params.star_arg, cst.MaybeSentinel)
    ):
        return None
    return names[1]


def _is_server_generate(expression: cst.BaseExpression) -> bool:
    if not isinstance(expression, cst.Call) or not isinstance(expression.func, cst.Attribute):
        return False
    owner = get_full_name_for_node(expression.func.value) or ""
    return expression.func.attr.value == "generate" and owner.split(".")[-1] == "server_manager"


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], cst.Expr)
        and isinstance(statement.body[0].value, cst.SimpleString)
    )


def _fix_commas(aliases: list[cst.ImportAlias]) -> list[cst.ImportAlias]:
    """Drop the trailing comma a split left on the last alias (keeps the others' spacing)."""
    if not aliases:
        return aliases
    return [*aliases[:-1], aliases[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)]


def _with_markers(statement, markers: list[tuple[str, str]], present: frozenset[str] = frozenset()):
    """Add `# TODO(migrate:RULE): ...` lines above a statement, skipping ones already there."""
    if not markers or isinstance(statement, (cst.FlattenSentinel, cst.RemovalSentinel)):
        if isinstance(statement, cst.FlattenSentinel) and markers:
            first, *rest = statement.nodes
            return cst.FlattenSentinel([_with_markers(first, markers, present), *rest])
        return statement
    existing = {line.comment.value for line in statement.leading_lines if line.comment is not None} | present
    added = []
    for rule, message in markers:
        comment = "# " + marker_text(rule, message)
        if comment not in existing:
            existing.add(comment)
            added.append(cst.EmptyLine(indent=True, comment=cst.Comment(comment)))
    return statement.with_changes(leading_lines=[*statement.leading_lines, *added]) if added else statement


def migrate_python(text: str, selection: RuleSelection = ALL_RULES) -> MigrationResult:
    """Migrate one Python module; source libcst cannot parse comes back unchanged with an ERROR."""
    try:
        module = cst.parse_module(text)
    except cst.ParserSyntaxError as error:
        return MigrationResult(
            text,
            text,
            (Finding("parse", error.raw_line, Severity.ERROR, f"not valid Python ({error.message}); left untouched"),),
        )
    if not any(root in text for root in _LEGACY_ROOTS) and "AgentLoopBase" not in text:
        return MigrationResult(text, text)
    migrator = _Migrator(selection, frozenset(line.comment.value for line in module.header if line.comment))
    migrated = MetadataWrapper(module).visit(migrator).code
    findings = tuple(sorted(migrator.findings, key=lambda f: f.line))
    try:
        compile(migrated, "<migrated>", "exec")
    except SyntaxError as error:
        return MigrationResult(
            text,
            text,
            (
                *findings,
                Finding(
                    "internal",
                    error.lineno or 1,
                    Severity.ERROR,
                    "the rewritten code would not compile; left untouched (a codemods bug: please report)",
                ),
            ),
        )
    return MigrationResult(text, migrated, findings)
