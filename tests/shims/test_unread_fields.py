"""Nothing accepted and then ignored: every schema field is read by V1's code or declared no-op.

A field of `core_v1/config/schema.py` that no code reads is a setting a user can write and that
changes nothing, silently. Each field must either be read by `core_v1` (outside the schema; the
dry-run plan, which only prints, does not count, while `unsupported_features`, which refuses, does)
or be declared no-op or refused in the key table (`shims.verl_keys.verdicts`), which warns or stops
when it is set. A no-op declaration for a field that code now reads is stale and fails too.

Reads are found in the source, not guessed from names alone: a field `a.b.c` counts as read where an
attribute chain ends in enough of its path to tell it from every other field (`rollout.n` is not
`val_kwargs.n`), where its section is passed somewhere and the field is read off a parameter typed
as that section's class, or off `config`/`cfg` (a worker's own section), or by `getattr` with its
name. Reads the source cannot show (a helper that takes the field's name as a string) are listed in
`READ_BY_NAME` with the module that reads them, and that module must name the field.
"""

from __future__ import annotations

import ast
import dataclasses
from functools import lru_cache
from pathlib import Path

import pytest

from core_v1.config import schema
from core_v1.config.schema import PPOConfig
from shims.verl_keys import verdicts
from shims.verl_keys.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
READERS = ROOT / "core_v1"
NOT_READERS = {READERS / "config" / "schema.py", READERS / "trainer" / "plan.py"}
SCHEMA_READERS = ("unsupported_features", "_v0_only_features")  # the schema's own refusals act on fields
GENERIC_OWNERS = {"config", "cfg"}  # `self.config.x` in a worker that holds its own section
WHOLE_SECTION_READERS = {"asdict", "dict", "vars", "to_container"}  # they read every field of a section
EVERY_FIELD = "*"

# field -> module that reads it in a way the source does not show (a helper that takes the field's
# name as a string; a section chosen at run time, `getattr(config.trainer.v1, cls.mode_section)`)
READ_BY_NAME = {
    "algorithm.kl_ctrl.kl_coef": "core_v1/algorithms/kl.py",
    "algorithm.kl_ctrl.target_kl": "core_v1/algorithms/kl.py",
    "algorithm.kl_ctrl.horizon": "core_v1/algorithms/kl.py",
    "algorithm.kl_ctrl.type": "core_v1/algorithms/kl.py",
    "trainer.v1.colocate_async.num_warmup_batches": "core_v1/trainer/modes/async_base.py",
    "trainer.v1.separate_async.num_warmup_batches": "core_v1/trainer/modes/async_base.py",
    "trainer.v1.colocate_async.reproducible": "core_v1/trainer/modes/async_base.py",
    "trainer.v1.separate_async.reproducible": "core_v1/trainer/modes/async_base.py",
    # clip_cov / kl_cov settings, passed to the policy loss by name (actor.py: _COV_LOSS_OPTIONS)
    **{
        f"actor_rollout_ref.actor.policy_loss.{name}": "core_v1/workers/actor.py"
        for name in ("clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef")
    },
    # a loop over (key, section) pairs that refuses a degree above 1 (the shim maps it to 1 first)
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size": "core_v1/workers/group.py",
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size": "core_v1/workers/group.py",
    "critic.fsdp.ulysses_sequence_parallel_size": "core_v1/workers/group.py",
}


def leaf_fields() -> list[tuple[str, str]]:
    """(dotted path, owning class name) of every field that is not itself a section."""
    found = []

    def walk(cls, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")
            else:
                found.append((prefix + f.name, cls.__name__))

    walk(PPOConfig, "")
    return found


SCHEMA_CLASSES = {name for name, obj in vars(schema).items() if isinstance(obj, type) and dataclasses.is_dataclass(obj)}


def chain_of(node: ast.AST) -> tuple[str, ...]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


class SourceReads:
    """The attribute chains a set of modules reads, with a little flow: aliases (`aro, mode =
    config.actor_rollout_ref, config.trainer.v1.separate_async`), parameters typed with a schema
    class (and `self.x = param`), and sections passed to a function (`correction_config(
    config.algorithm.rollout_correction)` reads what `correction_config` reads off its parameter)."""

    def __init__(self):
        self.chains: set[tuple[str, ...]] = set()
        self.typed_reads: set[tuple[str, str]] = set()
        self.param_reads: dict[tuple[str, str], set[tuple[str, ...]]] = {}  # (function, param) -> tails
        self.params: dict[str, list[str]] = {}  # function name -> parameter names
        self.calls: list[tuple[str, dict]] = []  # (callee, {parameter name or position: chain})

    def read_module(self, tree: ast.AST) -> None:
        aliases, typed, self.loop_names = self._aliases(tree), self._typed(tree), self._loop_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._function(node)
            elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Store):
                self._attribute(chain_of(node), aliases, typed)
            elif isinstance(node, ast.Call):
                self._call(node, aliases)

    def _getattr_names(self, call: ast.Call) -> list[str]:
        """The names `getattr(x, NAME)` reads: a constant, or a loop variable over constants
        (`{k: getattr(rollout, k) for k in ("gpu_memory_utilization", ...)}`)."""
        if getattr(call.func, "id", None) != "getattr" or len(call.args) < 2:
            return []
        name = call.args[1]
        if isinstance(name, ast.Constant):
            return [str(name.value)]
        return self.loop_names.get(name.id, []) if isinstance(name, ast.Name) else []

    @staticmethod
    def _loop_names(tree: ast.AST) -> dict[str, list[str]]:
        found = {}
        for node in ast.walk(tree):
            if (
                isinstance(node, (ast.For, ast.comprehension))
                and isinstance(node.target, ast.Name)
                and isinstance(node.iter, (ast.Tuple, ast.List))
                and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.iter.elts)
            ):
                found.setdefault(node.target.id, []).extend(e.value for e in node.iter.elts)
        return found

    def _attribute(self, chain: tuple[str, ...], aliases: dict, typed: dict) -> None:
        if not chain:
            return
        self.chains.add(chain)
        if chain[0] in aliases:
            self.chains.add(aliases[chain[0]] + chain[1:])
        for owner_length in (1, 2):  # `param.field` or `self.attr.field`
            owner = ".".join(chain[:owner_length])
            if owner in typed and len(chain) > owner_length:
                self.typed_reads.add((typed[owner], chain[owner_length]))

    def _function(self, node) -> None:
        params = [a.arg for a in node.args.args + node.args.kwonlyargs]
        self.params.setdefault(node.name, params)
        for inner in ast.walk(node):
            if isinstance(inner, ast.Attribute):
                chain = chain_of(inner)
                if len(chain) > 1 and chain[0] in params:
                    self.param_reads.setdefault((node.name, chain[0]), set()).add(chain[1:])
            elif (
                isinstance(inner, ast.Call)
                and inner.args
                and isinstance(inner.args[0], ast.Name)
                and inner.args[0].id in params
            ):
                reads = self.param_reads.setdefault((node.name, inner.args[0].id), set())
                reads.update((name,) for name in self._getattr_names(inner))
                if getattr(inner.func, "id", getattr(inner.func, "attr", None)) in WHOLE_SECTION_READERS:
                    reads.add((EVERY_FIELD,))

    def _call(self, node: ast.Call, aliases: dict) -> None:
        func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if func == "getattr":
            owner = self._expand(chain_of(node.args[0]), aliases) if node.args else ()
            self.chains.update(owner + (name,) for name in self._getattr_names(node))
            return
        if func in WHOLE_SECTION_READERS and node.args:
            self.chains.add(self._expand(chain_of(node.args[0]), aliases) + (EVERY_FIELD,))
        args = {i: self._expand(chain_of(a), aliases) for i, a in enumerate(node.args)}
        args.update({k.arg: self._expand(chain_of(k.value), aliases) for k in node.keywords if k.arg})
        self.calls.append((func, {k: v for k, v in args.items() if len(v) > 1}))

    @staticmethod
    def _expand(chain: tuple[str, ...], aliases: dict) -> tuple[str, ...]:
        return aliases[chain[0]] + chain[1:] if chain and chain[0] in aliases else chain

    @staticmethod
    def _aliases(tree: ast.AST) -> dict[str, tuple[str, ...]]:
        aliases = {}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Assign) or len(node.targets) != 1:
                continue
            target, value = node.targets[0], node.value
            pairs = (
                zip(target.elts, value.elts)
                if isinstance(target, ast.Tuple)
                and isinstance(value, ast.Tuple)
                and len(target.elts) == len(value.elts)
                else [(target, value)]
            )
            for name, expression in pairs:
                chain = chain_of(expression)
                if (
                    isinstance(expression, ast.Call)
                    and getattr(expression.func, "id", None) == "getattr"
                    and len(expression.args) >= 2
                    and isinstance(expression.args[1], ast.Constant)
                ):
                    chain = chain_of(expression.args[0]) + (str(expression.args[1].value),)  # getattr(x, "a")
                if isinstance(name, ast.Name) and len(chain) > 1:
                    aliases[name.id] = chain
        return aliases

    @staticmethod
    def _typed(tree: ast.AST) -> dict[str, str]:
        typed = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for arg in node.args.args + node.args.kwonlyargs:
                    annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                    names = set(annotation.replace('"', " ").replace("|", " ").replace(".", " ").split())
                    typed.update({arg.arg: cls for cls in names & SCHEMA_CLASSES})
        for node in ast.walk(tree):  # `self._contents = contents` with `contents: CheckpointContentsConfig`
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.value, ast.Name)
                and node.value.id in typed
                and chain_of(node.targets[0])[:1] == ("self",)
            ):
                typed[".".join(chain_of(node.targets[0]))] = typed[node.value.id]
        return typed

    def resolve_calls(self) -> None:
        """What a function reads off a parameter, read off the section a caller passed in."""
        for func, args in self.calls:
            params = self.params.get(func, [])
            offset = 1 if params[:1] in (["self"], ["cls"]) else 0
            for where, chain in args.items():
                param = (
                    where
                    if isinstance(where, str)
                    else (params[where + offset] if where + offset < len(params) else None)
                )
                for tail in self.param_reads.get((func, param), ()):
                    self.chains.add(chain + tail)


def reads_of(tree: ast.AST) -> tuple[set[tuple[str, ...]], set[tuple[str, str]]]:
    reads = SourceReads()
    reads.read_module(tree)
    reads.resolve_calls()
    return reads.chains, reads.typed_reads


def reader_trees() -> list[ast.AST]:
    trees = []
    for path in sorted(READERS.rglob("*.py")):
        if path not in NOT_READERS:
            trees.append(ast.parse(path.read_text()))
    schema_tree = ast.parse((READERS / "config" / "schema.py").read_text())
    trees += [node for node in schema_tree.body if isinstance(node, ast.FunctionDef) and node.name in SCHEMA_READERS]
    return trees


@lru_cache(maxsize=1)
def all_reads() -> tuple[frozenset, frozenset]:
    reads = SourceReads()
    for tree in reader_trees():
        reads.read_module(tree)
    reads.resolve_calls()
    return frozenset(reads.chains | interpolated_reads(reads.chains)), frozenset(reads.typed_reads)


def interpolated_reads(chains: set) -> set[tuple[str, ...]]:
    """A field the schema interpolates into another (`rollout.response_length` is
    `${data.max_response_length}`) is read wherever that other field is."""
    found = set()
    for path, target in interpolations().items():
        tail = tuple(path.split("."))[-2:]
        if any(chain[i : i + 2] == tail for chain in chains for i in range(len(chain) - 1)):
            found.add(tuple(target.split(".")))
    return found


@lru_cache(maxsize=1)
def interpolations() -> dict[str, str]:
    """{field: the field its default interpolates} from the schema's `II(...)` defaults."""
    found = {}

    def walk(cls, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{f.name}.")
            elif isinstance(default, str) and default.startswith("${") and default.endswith("}"):
                found[prefix + f.name] = default[2:-1]

    walk(PPOConfig, "")
    return found


@lru_cache(maxsize=1)
def all_paths() -> tuple[tuple[str, ...], ...]:
    from core_v1.config import config_keys

    return tuple(tuple(key.split(".")) for key in config_keys())


def distinguishing_suffix(parts: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest tail of a path, two parts at least, that no other schema path ends with (`x.tool`
    alone could be any object's `tool`)."""
    for k in range(min(2, len(parts)), len(parts) + 1):
        if sum(1 for other in all_paths() if other[-k:] == parts[-k:]) == 1:
            return parts[-k:]
    return parts


def contains(sequence: tuple[str, ...]) -> bool:
    k = len(sequence)
    return any(chain[i : i + k] == sequence for chain in all_reads()[0] for i in range(len(chain) - k + 1))


def is_read(path: str, owner: str) -> bool:
    parts = tuple(path.split("."))
    if contains(distinguishing_suffix(parts)):
        return True
    section, name = parts[:-1], parts[-1]
    if not section or not contains(distinguishing_suffix(section)):
        return False  # the section itself never reaches any code
    if contains(distinguishing_suffix(section) + (EVERY_FIELD,)):
        return True
    owners = GENERIC_OWNERS | {f"{section[-1]}_config", f"{section[-1]}_cfg"}  # `reward_config.reward_kwargs`
    return (owner, name) in all_reads()[1] or any(contains((generic, name)) for generic in owners)


def declared_quiet(path: str) -> bool:
    row = verdicts.row_for(path)
    return row is not None and row.verdict in (Verdict.NO_OP, Verdict.REFUSED)


FIELDS = leaf_fields()


def test_every_field_is_read_or_declared_no_op():
    unread = [
        path
        for path, owner in FIELDS
        if path not in READ_BY_NAME and not is_read(path, owner) and not declared_quiet(path)
    ]
    assert unread == [], (
        "fields accepted and then ignored: read them, or give them a no-op/refused row with the "
        "reason in shims/verl_keys/verdicts.py"
    )


def test_no_op_declarations_are_not_stale():
    """A field declared no-op that code now reads: remove its row from shims/verl_keys/verdicts.py."""
    stale = [
        path
        for path, owner in FIELDS
        if verdicts.row_for(path) is not None
        and verdicts.row_for(path).verdict is Verdict.NO_OP
        and (path in READ_BY_NAME or is_read(path, owner))
    ]
    assert stale == []


@pytest.mark.parametrize("path, module", sorted(READ_BY_NAME.items()))
def test_reads_by_name_are_where_they_are_said_to_be(path, module):
    name = path.rsplit(".", 1)[-1]
    assert f'"{name}"' in (ROOT / module).read_text() or f".{name}" in (ROOT / module).read_text()


def test_the_analysis_tells_fields_of_the_same_name_apart():
    # `n` of the rollout is read (`rollout.n`); a field only the plan prints is not.
    assert is_read("actor_rollout_ref.rollout.n", "RolloutConfig")
    tree = ast.parse("def f(config):\n    return config.trainer.project_name\n")
    chains, _ = reads_of(tree)
    assert ("config", "trainer", "project_name") in chains
    assert distinguishing_suffix(("actor_rollout_ref", "rollout", "val_kwargs", "n")) == ("val_kwargs", "n")
