"""The config shim: every V0 config key a run receives moves to its V1 home, out loud.

Two passes, both driven by `shims.rename_table` (the table `codemods` uses too):

1. `migrate_overrides(tokens)`, before composition: each command-line override (`key=value`,
   `+key=value`, `++key=value`, `~key`, read with Hydra's own override parser) whose key is legacy
   is rewritten to the new key, dropped (a deleted key), or refused (a key whose feature is gone).
2. `LegacyConfigShim.migrate_config(cfg)`, after composition: the same for legacy keys that came
   from YAML files (a user's `--config-path` config with a `reward_model:` section, say). This
   works because `core_v1.config.loader` composes with the schema's sections open and checks keys
   only after this hook has run (`compose_config(..., migrate=shim.migrate_config)`); keys the
   schema keeps for their V1 meaning (`actor_rollout_ref.rollout.mode`) are legacy only for the
   values the table names, and such a key is reset to its schema default rather than deleted.

Every legacy key prints one line on stderr,
`legacy key X -> Y (python -m codemods.migrate <file> rewrites it)`, and leaves a `LegacyNote` for
the dry-run plan. A key the table marks manual stops the run with one `ConfigError` line that names
the replacement, unless its value asks for nothing (null, empty, or verl's own default).

Both passes also apply the key table of `shims.verl_keys.verdicts` to each key (after its move):
a key declared no-op is accepted and named, with the reason, in one `warning:` line per reason
(a schema key keeps its value, other keys are dropped); a key declared refused stops the run with
one `not supported on rlbridge:` line, unless its value asks for nothing (then it is a no-op). A
value naming a backend rlbridge lacks that computes the same training (`strategy=megatron`) is set
to what rlbridge has, with one line. In YAML a schema key that holds its schema default says
nothing. A run without such keys prints nothing. After composition, verl names in the tool,
interaction and reward files the config names are judged too (`shims.class_paths`), by the same
rule: a name rlbridge has loads as rlbridge's (one line; `serve_verl_names` adds the import hook's
plug-in to `trainer.v1.plugins`), one it lacks stops the run (`judge_named_files=False` leaves that
start-up check to the caller: `refuse_named_files`).

The refusals of keys raise `RefusedKeysError`, which names each refused key with its reason, so
that a reader (`codemods.verify_read`) can read the rest of the config without them.
"""

from __future__ import annotations

import functools
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from core_v1.config import config_keys
from core_v1.config.loader import parse_override
from core_v1.config.schema import PPOConfig
from shims import async_trainers, rename_table, verl_imports
from shims.class_paths import NamedFiles, verl_names_in_files
from shims.refusals import RefusedKey, RefusedKeysError  # noqa: F401  (importable from here, as before)
from shims.rename_table import Action, KeyAction
from shims.verl_keys import verdicts
from shims.verl_keys.verdicts import Verdict, VerdictRow

COMMAND_LINE = "<file>"  # the launch script is not known at run time; the codemod takes its path


@dataclass(frozen=True)
class LegacyNote:
    """What one legacy key became: `new_key` None means it was deleted."""

    old_key: str
    new_key: Optional[str]
    action: Action
    message: str
    also_set: tuple[tuple[str, str], ...] = ()
    source: str = COMMAND_LINE
    values: Optional[tuple[str, str]] = None  # (as written, as set) when the move rewrites the value

    def describe(self) -> str:
        """One line for the plan and for stderr (without the codemod hint)."""
        if self.new_key is None:
            text = f"{self.old_key} deleted: {self.message}"
        elif self.values is not None:
            text = f"{self.old_key} -> {self.new_key}={self.values[1]} (it was {self.values[0]}): {self.message}"
        else:
            text = f"{self.old_key} -> {self.new_key}"
            if self.also_set:
                text += ", also " + ", ".join(f"{k}={v}" for k, v in self.also_set)
            if self.action is Action.CAVEAT and self.message:
                text += f": {self.message}"
        return text

    def warning(self) -> str:
        return f"legacy key {self.describe()} (python -m codemods.migrate {self.source} rewrites it)"


@dataclass(frozen=True)
class NoOpNote:
    """A key rlbridge accepts but that cannot change the run here (`shims.verl_keys.verdicts`)."""

    old_key: str
    new_key: Optional[str]
    reason: str
    value: Optional[str] = None  # as written, for the message

    def named(self) -> str:
        shown = f"={self.value}" if self.value is not None and len(self.value) <= 40 else ""
        moved = "" if self.new_key in (None, self.old_key) else f" (V1: {self.new_key})"
        return f"{self.old_key}{shown}{moved}"

    def describe(self) -> str:
        return f"{self.named()} has no effect here: {self.reason}"


@dataclass(frozen=True)
class MappedNote:
    """A value naming a backend rlbridge lacks, set to what it has (`verdicts.VALUE_MAPS`)."""

    old_key: str
    value: str
    new_value: str
    reason: str

    def describe(self) -> str:
        return f"{self.old_key}={self.value} -> {self.new_value}: {self.reason}"


def no_op_warnings(notes: list[NoOpNote]) -> list[str]:
    """One line per reason, naming every key it covers (a config copied whole from verl has
    hundreds of such keys, most sharing a handful of reasons)."""
    by_reason: dict[str, list[NoOpNote]] = {}
    for note in notes:
        by_reason.setdefault(note.reason, []).append(note)
    return [
        f"warning: {', '.join(n.named() for n in group)} {'has' if len(group) == 1 else 'have'} no effect "
        f"here: {reason}"
        for reason, group in by_reason.items()
    ]


@dataclass
class LegacyConfigShim:
    """The legacy-key migration of one start-up; `notes` lists every key it moved, deleted or
    accepted as a no-op.

    `config_dir` is the user's `--config-path` (named in the warnings for keys found in YAML).
    """

    config_dir: Optional[str] = None
    judge_named_files: bool = True  # False: the caller runs `refuse_named_files` (a reading that only reads)
    notes: list[LegacyNote | NoOpNote | MappedNote] = field(default_factory=list)
    _warned: int = 0  # notes[:_warned] have been printed
    # verl config-group choices (`model_engine=torchtitan`) whose engine optimizer's schedule the
    # composed config gets, and the keys the command line set (the user's choices win).
    _group_choices: list[tuple[str, str]] = field(default_factory=list)
    _command_line_keys: set[str] = field(default_factory=set)

    # ----------------------------------------------------------------------- command line
    def migrate_overrides(self, overrides: list[str]) -> list[str]:
        """The override tokens with every legacy key rewritten, dropped or refused (ConfigError)."""
        parsed = _last_of_each_key([(token, _parse_override(token)) for token in overrides])
        user_keys = {override.key_or_group for _, override in parsed if override is not None}
        self._command_line_keys |= user_keys
        migrated, extra, refused, unsupported = [], [], [], []
        for token, override in parsed:
            group = None if override is None else verdicts.group_of(override.key_or_group, override.package)
            if group is not None:  # `model_engine=megatron`: a choice of verl's configs, which are not ours
                choice = None if override.is_delete() else _shown(override.value())
                self._judge_group(group, choice, unsupported)
                if choice is not None:
                    self._group_choices.append((group, choice))
                continue
            if override is not None and async_trainers.owns(override.key_or_group):
                migrated.append(token if token.startswith(("+", "~")) else f"++{token}")  # translated once composed
                continue
            action = None if override is None else _resolve(override)
            if action is not None and _no_op_as_written(override.key_or_group):
                action = None  # a no-op key (`reward_model._target_`) is one wherever verl kept it
            if action is not None and action.action is Action.MANUAL:
                value = _DELETED if override.is_delete() else override.value()
                if not self._quiet_manual(action, value):
                    refused.append(action)
                continue
            v1_key = None if override is None else _v1_key(override.key_or_group, action)
            value = None if override is None else _DELETED if override.is_delete() else override.value()
            mapped = None if value in (None, _DELETED) else verdicts.value_map_for(v1_key, _verdict_value(value))
            mapped = mapped or _boolean_as_number(v1_key, value)
            if mapped is not None:  # a backend rlbridge lacks, set to what it has
                self._map(override.key_or_group, _shown(value), mapped)
                migrated.append(f"{mapped.key}={mapped.new_value}")
                continue
            row = None if override is None else verdicts.row_for(v1_key)
            if row is not None:  # a no-op or refused key (possibly after its move): one line, no legacy note
                if self._judge(override.key_or_group, v1_key, value, row, unsupported):
                    migrated.extend(
                        self._rewrite(token, override, action, note=False)
                        if action
                        else [_set_added_schema_key(token, override)]
                    )
            elif action is None:
                migrated.append(_set_added_schema_key(token, override))
            else:
                migrated.extend(self._rewrite(token, override, action))
                extra.extend(f"{k}={v}" for k, v in action.also_set if k not in user_keys)
        _refuse(refused, COMMAND_LINE)
        _refuse_unsupported(unsupported, [])
        self._warn_no_ops()
        return migrated + extra

    def _judge(
        self,
        key: str,
        v1_key: str,
        value: Any,
        row: VerdictRow,
        unsupported: list[RefusedKey],
        schema_default: Any = None,
    ) -> bool:
        """Apply a no-op or refused verdict: note it, or add the refusal to `unsupported`. True when
        the key stays in the config (a schema key keeps its place; others are dropped)."""
        deleted = value is _DELETED  # `~key` asks for nothing
        if (
            row.verdict is Verdict.REFUSED
            and not deleted
            and not verdicts.asks_for_nothing(
                _verdict_value(value), key, v1_key, schema_default=schema_default, off=row.off
            )
        ):
            unsupported.append(RefusedKey(key, row.reason, f"{key}={_shown(value)} ({row.reason})"))
            return False
        self.notes.append(NoOpNote(key, v1_key, row.reason, None if deleted else _shown(value)))
        return v1_key in _schema_keys()

    def _judge_group(self, group: str, choice: Optional[str], unsupported: list[RefusedKey]) -> None:
        """A config-group choice (None: the group deleted): the override is dropped (rlbridge's config
        has no groups); a choice of another training engine is one line, verl's own FSDP or base
        config a no-op, anything else (a plug-in's config) refused."""
        judged = verdicts.group_choice(group, choice) if choice is not None else None
        if judged is None or judged.verdict is Verdict.NO_OP:
            reason = judged.reason if judged else "rlbridge's config has no config groups to delete"
            self.notes.append(NoOpNote(group, None, reason, choice))
        elif judged.verdict is Verdict.REFUSED:
            unsupported.append(RefusedKey(group, judged.reason, f"{judged.text} ({judged.reason})"))
        else:
            note = MappedNote(group, choice, "FSDP2", judged.reason)
            self.notes.append(note)
            print(f"warning: {note.describe()}", file=sys.stderr)

    def _apply_engine_lr_schedule(self, cfg: DictConfig, group: str, choice: str) -> None:
        """The learning-rate schedule an engine's optimizer config brings (`model_engine=torchtitan`:
        linear decay to 0), set in the composed config for each section whose schedule the user left
        to it: one the command line, the preset or the user's YAML set (a value other than the
        schema's default) is the user's."""
        found = verdicts.engine_lr_schedule(group, choice)
        if found is None:
            return
        sections, schedule, reason = found
        chosen = self._command_line_keys | {
            key
            for key, _ in _leaves(cfg)
            if not _is_default(cfg, key) and key.rsplit(".", 1)[-1] in verdicts.LR_SCHEDULE_KEYS
        }
        for section in sections:
            if any(f"{section}.optim.{key}" in chosen for key in verdicts.LR_SCHEDULE_KEYS):
                continue
            note = MappedNote(
                f"{section}.optim.lr_scheduler_type",
                f"(from {group}={choice})",
                f"{schedule} with min_lr_ratio=0.0",
                reason,
            )
            self.notes.append(note)
            print(f"warning: {note.describe()}", file=sys.stderr)
            OmegaConf.update(cfg, f"{section}.optim.lr_scheduler_type", schedule, merge=True)
            OmegaConf.update(cfg, f"{section}.optim.min_lr_ratio", 0.0, merge=True)

    def _map(self, key: str, value: str, mapped: verdicts.ValueMap) -> None:
        note = MappedNote(key, value, mapped.new_value, mapped.reason)
        self.notes.append(note)
        print(f"warning: {note.describe()}", file=sys.stderr)

    def _quiet_manual(self, action: KeyAction, value: Any) -> bool:
        """A legacy key that needs a person, set to a value that asks for nothing (null, empty, or
        verl's default: a config copied whole from verl has them all): noted as a no-op."""
        if value is not _DELETED and not verdicts.asks_for_nothing(_verdict_value(value), action.old_key):
            return False
        self.notes.append(NoOpNote(action.old_key, None, action.message, None if value is _DELETED else _shown(value)))
        return True

    def _rewrite(self, token: str, override: Any, action: KeyAction, note: bool = True) -> list[str]:
        also = tuple((k, v) for k, v in action.also_set)
        values = None if action.new_value is None else (_shown(override.value()), action.new_value)
        if note:
            self._note(LegacyNote(action.old_key, action.new_key, action.action, action.message, also, values=values))
        if action.action is Action.DELETE:
            return []
        if action.new_key == action.old_key and values is None:
            return [token]
        prefix = "~" if override.is_delete() else _prefix_for(action.new_key, token)
        value_text = f"={action.new_value}" if values is not None else token[token.index("=") :] if "=" in token else ""
        return [f"{prefix}{action.new_key}{value_text}"]

    # ----------------------------------------------------------------------- composed config
    def migrate_config(self, cfg: DictConfig) -> DictConfig:
        """Move legacy keys found in the composed config (from YAML) to their V1 homes, in place."""
        if async_trainers.present(cfg):  # verl's experimental async trainers' own sections
            for moved in async_trainers.translate(cfg):
                note = LegacyNote(moved.old, moved.new, Action.CAVEAT, async_trainers.MESSAGE)
                self.notes.append(note)
                print(f"warning: {note.describe()}", file=sys.stderr)
        leaves = list(_leaves(cfg))
        if _follow_moves(cfg, self._moves(leaves), leaves):
            leaves = list(_leaves(cfg))
        handled = {key for note in self.notes for key in (note.old_key, getattr(note, "new_key", None)) if key}
        stale = _left_behind(self.notes)
        refused, unsupported = [], []
        for key, value in leaves:
            group = verdicts.group_of(key, None) if "." not in key and isinstance(value, str) else None
            if group is not None:  # `model_engine: megatron`, a group choice as a key (`++model_engine=` on V0)
                self._judge_group(group, value, unsupported)
                self._group_choices.append((group, value))
                with open_dict(cfg):
                    _remove(cfg, key)
                continue
            if key in handled:
                if key in stale:
                    with open_dict(cfg):
                        _remove(cfg, key)
                continue
            legacy = key.startswith(_legacy_prefixes()) and not _no_op_as_written(key)
            action = rename_table.resolve_config_key(key, _value_text(value)) if legacy else None
            if action is not None and action.action is Action.MANUAL:
                if not self._quiet_manual(action, value):
                    refused.append(action)
                with open_dict(cfg):
                    _remove(cfg, key)
                continue
            row = verdicts.row_for(_v1_key(key, action))
            mapped = verdicts.value_map_for(_v1_key(key, action), _verdict_value(value))
            if mapped is None and action is None and (row is None or _holds_schema_default(cfg, key)):
                # Most keys: nothing to do, or a schema key from YAML at its default (the schema's own
                # value: every composed config has it), which says nothing. Opening the config (each
                # time) is most of the work of this loop.
                continue
            with open_dict(cfg):  # Hydra closed the root; legacy sections live outside the schema
                if mapped is not None:
                    self._map(key, _shown(value), mapped)
                    if key != mapped.key:  # a legacy home of the key
                        _remove(cfg, key)
                    OmegaConf.update(cfg, mapped.key, mapped.new_value, force_add=True)
                elif row is not None:
                    self._judge_yaml(cfg, key, value, action, row, unsupported)
                elif action is not None and self._shadowed(cfg, key, value, action):
                    _remove(cfg, key)
                elif action is not None:
                    self._move(cfg, key, value, action)
        _refuse(refused, self._yaml_source)
        with open_dict(cfg):
            for group, choice in self._group_choices:
                self._apply_engine_lr_schedule(cfg, group, choice)
        named = verl_names_in_files(cfg) if self.judge_named_files else NamedFiles()
        _refuse_unsupported(unsupported, list(named.problems))
        self._warn_no_ops()
        if named.served:
            serve_verl_names(cfg, named)
        return cfg

    def _moves(self, leaves: list[tuple[str, Any]]) -> dict[str, str]:
        """Legacy key -> its new home, for every key the command line or the config (`leaves`) moves as it is."""
        moves = {
            note.old_key: note.new_key
            for note in self.notes
            if isinstance(note, LegacyNote) and note.new_key and note.values is None
        }
        for key, value in leaves:
            if not key.startswith(_legacy_prefixes()) or _no_op_as_written(key):
                continue
            action = rename_table.resolve_config_key(key, _value_text(value))
            if (
                action is not None
                and action.action is not Action.MANUAL
                and action.new_key not in (None, key)
                and action.new_value is None
            ):
                moves[key] = action.new_key
        return moves

    def _judge_yaml(
        self,
        cfg: DictConfig,
        key: str,
        value: Any,
        action: Optional[KeyAction],
        row: VerdictRow,
        unsupported: list[RefusedKey],
    ) -> None:
        """A no-op or refused key from YAML (not a schema key at its default, which says nothing:
        `migrate_config` leaves those out): its verdict."""
        v1_key = _v1_key(key, action)
        keep = self._judge(key, v1_key, value, row, unsupported, _schema_default(v1_key))
        if keep and action is None:
            return
        _remove(cfg, key)
        if keep:
            _place(cfg, v1_key, value)

    def _shadowed(self, cfg: DictConfig, key: str, value: Any, action: KeyAction) -> bool:
        """A legacy key at verl's default whose V1 home the config sets (a YAML written for V1 on
        top of verl's own `ppo_trainer`): the home keeps its value, the old key is a no-op."""
        if (
            action.new_key in (None, key)
            or _is_default(cfg, action.new_key)
            or not verdicts.asks_for_nothing(_verdict_value(value), key)
        ):
            return False
        self.notes.append(NoOpNote(key, action.new_key, _SHADOWED, _shown(value)))
        return True

    def _move(self, cfg: DictConfig, key: str, value: Any, action: KeyAction) -> None:
        applied = tuple((k, v) for k, v in action.also_set if _is_default(cfg, k))
        values = None if action.new_value is None else (_shown(value), action.new_value)
        self._note(LegacyNote(key, action.new_key, action.action, action.message, applied, self._yaml_source, values))
        for also_key, also_value in applied:
            OmegaConf.update(cfg, also_key, also_value, force_add=True)
        if values is not None:
            value = action.new_value
        elif action.new_key == key:
            return
        if action.new_key != key:
            _remove(cfg, key)
        if action.new_key is not None:
            _place(cfg, action.new_key, value)

    @property
    def _yaml_source(self) -> str:
        return self.config_dir or "<config.yaml>"

    def _warn_no_ops(self) -> None:
        """Print the no-op notes of this pass (after any refusal, which stops the run instead)."""
        pending = [n for n in self.notes[self._warned :] if isinstance(n, NoOpNote)]
        self._warned = len(self.notes)
        for line in no_op_warnings(pending):
            print(line, file=sys.stderr)

    def _note(self, note: LegacyNote) -> None:
        self.notes.append(note)
        print(note.warning(), file=sys.stderr)


def migrate_overrides(overrides: list[str]) -> list[str]:
    """Command-line tokens with legacy keys migrated (one stderr line per key); see the module doc."""
    return LegacyConfigShim().migrate_overrides(overrides)


# --------------------------------------------------------------------------- helpers


def _parse_override(token: str):
    """Hydra's parse of one token, or None when it is not an override Hydra can read (Hydra then
    reports it during composition, with its own message)."""
    try:
        return parse_override(token)
    except Exception:  # Hydra raises OverrideParseException and ValueError subclasses
        return None


def _last_of_each_key(parsed: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Drop a plain `key=value` that a later override of the same key replaces: Hydra keeps the
    last one, so only that one is judged (`x=True ... x=False` asks for nothing). Tokens with a
    prefix (`+`, `++`, `~`) stay: they add or delete, which the later ones rely on."""
    last = {override.key_or_group: index for index, (_, override) in enumerate(parsed) if override is not None}
    return [
        (token, override)
        for index, (token, override) in enumerate(parsed)
        if override is None or token.startswith(("+", "~")) or last[override.key_or_group] == index
    ]


def _resolve(override) -> KeyAction | None:
    value = None if override.is_delete() else _value_text(override.value())
    return rename_table.resolve_config_key(override.key_or_group, value)


def _value_text(value: Any) -> str | None:
    """A value as the rename table compares it; None for a subtree or an unresolved interpolation."""
    if isinstance(value, (dict, list, DictConfig, ListConfig)):
        return None
    if isinstance(value, str) and "${" in value:
        return None
    return rename_table.normalize_value(value)


@functools.lru_cache(maxsize=1)
def _legacy_prefixes() -> tuple[str, ...]:
    """Every row's literal key prefix: a key no prefix starts is not legacy (a cheap first test)."""
    return tuple({row.literal_prefix for row in rename_table.CONFIG_KEY_ROWS})


@functools.lru_cache(maxsize=1)
def _schema_keys() -> frozenset[str]:
    return frozenset(config_keys())


def _prefix_for(new_key: str, token: str) -> str:
    """A schema key is set plainly (Hydra refuses `+` for a key that exists); a key inside a
    free-form section (`reward.reward_kwargs.x`) is force-added so that it works either way."""
    if new_key in _schema_keys():
        return "++" if token.startswith("++") else ""
    return "++"


def _set_added_schema_key(token: str, override: Any) -> str:
    """`+key=value` for a key verl's config lacked but ours has: set it (Hydra refuses to add a key
    that exists, and the old script only meant to give it a value)."""
    if (
        override is not None
        and token.startswith("+")
        and not token.startswith("++")
        and override.key_or_group in _schema_keys()
    ):
        return token[1:]
    return token


_DELETED = object()  # the value of a `~key` override
_SHADOWED = (
    "verl's default, carried by a config composed from verl's own files, beside its V1 home set "
    "in the config, which wins"
)


def _shown(value: Any) -> str:
    """A value as the user wrote it, for a message."""
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    return rename_table.normalize_value(value) if isinstance(value, bool) or value is None else str(value)


def _place(cfg: DictConfig, new_key: str, value: Any) -> None:
    """Put a legacy key's YAML value at its new home. null is verl's "not set" in its legacy
    sections, and an interpolation that reads the new home is verl's alias of it
    (`data.tool_config_path: ${oc.select:actor_rollout_ref.rollout.multi_turn.tool_config_path,null}`):
    both leave the new home as it is."""
    if value is None or (isinstance(value, str) and "${" in value and new_key in value):
        return
    OmegaConf.update(cfg, new_key, value, merge=True, force_add=True)


def _left_behind(notes: list) -> set[str]:
    """Keys the command line moved away, mapped or dropped: a YAML composed from verl's own files still
    holds verl's copy of each, which the command line overrides (as Hydra would) and V1 never reads."""
    moved = {note.old_key for note in notes if isinstance(note, LegacyNote) and note.new_key != note.old_key}
    dropped = {note.old_key for note in notes if isinstance(note, (NoOpNote, MappedNote))}
    return (moved | dropped) - _schema_keys()


def _no_op_as_written(key: str) -> bool:
    """A key the key table declares no-op before any move (`**._target_`, `reward_model.profiler.**`)."""
    row = verdicts.row_for(key)
    return row is not None and row.verdict is Verdict.NO_OP


def _v1_key(key: str, action: Optional[KeyAction]) -> str:
    """Where `key` lands on V1: its new key when the rename table moves it, else itself."""
    return action.new_key if action is not None and action.new_key is not None else key


def _verdict_value(value: Any) -> Optional[str]:
    """A value as the verdict table compares it: normalised text; `{}`/`[]` for an empty section
    or list; None for a non-empty one (it asks for something)."""
    if isinstance(value, (dict, list, DictConfig, ListConfig)):
        return None if len(value) else ("{}" if isinstance(value, (dict, DictConfig)) else "[]")
    return rename_table.normalize_value(value)


def _boolean_as_number(key: Optional[str], value: Any) -> Optional[verdicts.ValueMap]:
    """true/false given to a key the schema types as a number: verl's configs are untyped, and Python
    compares a bool as 1 or 0 (`trainer.test_freq=False` never validates there), so it is that number."""
    default = _schema_default(key) if key is not None and isinstance(value, bool) else None
    if not isinstance(default, (int, float)) or isinstance(default, bool):
        return None
    number = type(default)(value)
    return verdicts.ValueMap(
        key,
        frozenset({_shown(value)}),
        str(number),
        "verl's configs are untyped and Python compares a boolean as 1 or 0; rlbridge's key takes a number",
    )


def _schema_default(key: str) -> Any:
    sentinel = object()
    default = OmegaConf.select(_defaults(), key, default=sentinel, throw_on_resolution_failure=False)
    return None if default is sentinel or isinstance(default, (DictConfig, ListConfig)) else default


def refuse_named_files(cfg: DictConfig) -> None:
    """The start-up check of the files a composed config names, for a shim that left it out
    (`judge_named_files=False`): the same `not supported on rlbridge:` line for verl names rlbridge
    lacks; verl names it has are served in this process (`shims.verl_imports`), with their lines."""
    named = verl_names_in_files(cfg)
    _refuse_unsupported([], list(named.problems))
    if named.served:
        serve_verl_names(None, named)


def serve_verl_names(cfg: Optional[DictConfig], named: NamedFiles) -> None:
    """verl names the named files use that rlbridge has: one line each (`named.served`), the import
    hook installed here, and its plug-in added to `cfg`'s `trainer.v1.plugins` so that every process
    that loads those files (agent-loop workers) installs it too."""
    for line in named.served:
        print(line, file=sys.stderr)
    verl_imports.install()
    if cfg is None:
        return
    plugins = OmegaConf.select(cfg, "trainer.v1.plugins", default=None, throw_on_resolution_failure=False)
    plugins = list(plugins or [])
    if verl_imports.PLUGIN not in plugins:
        with open_dict(cfg):
            OmegaConf.update(cfg, "trainer.v1.plugins", [*plugins, verl_imports.PLUGIN], force_add=True)


def _refuse_unsupported(keys: list[RefusedKey], file_problems: list[str]) -> None:
    if keys or file_problems:
        found = [key.text for key in keys] + file_problems
        raise RefusedKeysError(f"not supported on rlbridge: {'; '.join(found)}", keys)


def _refuse(actions: list[KeyAction], source: str) -> None:
    if not actions:
        return
    keys = [RefusedKey(a.old_key, a.message, f"{a.old_key}: {a.message}") for a in actions]
    raise RefusedKeysError(
        f"legacy key(s) with no automatic V1 equivalent: {'; '.join(k.text for k in keys)} "
        f"(python -m codemods.migrate {source} marks where to decide)",
        keys,
    )


def _leaves(cfg: DictConfig, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted key, raw value) for every leaf, in the config's order; an interpolation comes back as
    its `${...}` text. (Collected into one list: nested generators passed each leaf up every level.)"""
    found: list[tuple[str, Any]] = []
    _collect_leaves(cfg, prefix, found)
    return found


def _collect_leaves(cfg: DictConfig, prefix: str, found: list[tuple[str, Any]]) -> None:
    for key in list(cfg.keys()):
        node = cfg._get_node(key, validate_access=False)  # a key of its own: OmegaConf's access check passes
        full = f"{prefix}{key}"
        if (
            isinstance(node, DictConfig)
            and not node._is_none()
            and not node._is_missing()
            and not node._is_interpolation()
            and len(node) > 0
            and _dotted_paths_reach(node)
        ):
            _collect_leaves(node, full + ".", found)
        elif node._is_interpolation():
            found.append((full, node._value()))
        else:
            found.append(
                (
                    full,
                    OmegaConf.to_container(node, resolve=False)
                    if isinstance(node, (DictConfig, ListConfig))
                    else node._value(),
                )
            )


def _follow_moves(cfg: DictConfig, moves: dict[str, str], leaves: list[tuple[str, Any]]) -> bool:
    """An interpolation that reads a legacy key reads its new home instead, as the legacy key is gone
    once moved (verl 0.4's `ref.ulysses_sequence_parallel_size: ${actor_rollout_ref.actor.
    ulysses_sequence_parallel_size}`, composed from verl's own ppo_trainer.yaml). `leaves` are
    `cfg`'s; True when one was changed."""
    if not moves:
        return False
    reads = re.compile(r"\$\{(" + "|".join(re.escape(key) for key in sorted(moves, key=len, reverse=True)) + r")\}")
    changed = False
    with open_dict(cfg):
        for key, value in leaves:
            if isinstance(value, str) and "${" in value:
                followed = reads.sub(lambda match: "${" + moves[match.group(1)] + "}", value)
                if followed != value:
                    OmegaConf.update(cfg, key, followed, force_add=True)
                    changed = True
    return changed


def _dotted_paths_reach(section: DictConfig) -> bool:
    """Whether dotted keys can name the section's children: a mapping keyed by module names
    (`fsdp_plan.apply_modules={model.layers.{*}: {}}`) is one value, not a tree of keys."""
    return all(isinstance(key, str) and "." not in key for key in section.keys())


@functools.lru_cache(maxsize=1)
def _defaults() -> DictConfig:
    return OmegaConf.structured(PPOConfig)


def _is_default(cfg: DictConfig, key: str) -> bool:
    """True when `key` still holds its schema default (so the user did not set it)."""
    sentinel = object()
    current = OmegaConf.select(cfg, key, default=sentinel, throw_on_resolution_failure=False)
    return current == OmegaConf.select(_defaults(), key, default=sentinel, throw_on_resolution_failure=False)


def _holds_schema_default(cfg: DictConfig, key: str) -> bool:
    """True when `key` is a schema key (or inside a schema section) holding its default as written
    (an interpolation compares as its text)."""
    default = _schema_node(key)
    if default is None:
        return False
    ours = _raw_node(cfg, key)
    return ours is not None and ours._value() == default._value()


@functools.lru_cache(maxsize=4096)
def _schema_node(key: str):
    """The schema's node of `key` (None when the schema lacks it); the schema's defaults are never
    written, and every YAML leaf of every reading asks."""
    return _raw_node(_defaults(), key)


def _raw_node(cfg: DictConfig, key: str):
    parent_key, _, leaf = key.rpartition(".")
    parent = _plain_section(cfg, parent_key) if parent_key else cfg
    if parent is _NOT_PLAIN:
        parent = OmegaConf.select(cfg, parent_key, default=None, throw_on_resolution_failure=False)
    if not isinstance(parent, DictConfig) or leaf not in parent:
        return None
    return parent._get_node(leaf, validate_access=False)  # there: OmegaConf's access check passes


_NOT_PLAIN = object()


def _plain_section(cfg: DictConfig, dotted: str) -> Any:
    """What `OmegaConf.select(cfg, dotted, default=None)` finds where each step is a plain section (a
    mapping, no interpolation): the section there, or None where a step's key is absent; _NOT_PLAIN
    where select would read a step otherwise (an interpolation, a value, a `[index]`). Every YAML
    leaf of every reading is looked up, and select parses its key each time."""
    if "[" in dotted or "]" in dotted:
        return _NOT_PLAIN
    node: Any = cfg
    for part in dotted.split("."):
        if not part or not _is_plain_section(node):
            return _NOT_PLAIN
        node = node._get_node(part, validate_access=False)
        if node is None:
            return None
    return node if _is_plain_section(node) else _NOT_PLAIN


def _is_plain_section(node: Any) -> bool:
    return (
        isinstance(node, DictConfig) and not node._is_interpolation() and not node._is_none() and not node._is_missing()
    )


def _remove(cfg: DictConfig, key: str) -> None:
    """Delete a legacy key, or reset it to its default where the schema keeps the key; then drop
    parent sections the move left empty."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if key in _schema_keys():
        parent[leaf] = OmegaConf.select(_defaults(), key)
        return
    del parent[leaf]
    while parent_key and len(parent) == 0 and parent_key not in _schema_keys():
        parent_key, _, leaf = parent_key.rpartition(".")
        parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        del parent[leaf]
