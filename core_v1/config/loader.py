"""Compose a run's configuration with Hydra and turn it into the typed `PPOConfig` once.

The schema (`schema.PPOConfig`) is registered in Hydra's ConfigStore as `ppo_trainer`, so
`--config-name=ppo_trainer` is the full default config and YAML presets in this folder (or a
user's `--config-path`) start from it with `defaults: [ppo_trainer, _self_]`. Overrides are
Hydra's own grammar (`key=value`, `+key=value`, `++key=value`, `~key`).

Key checking is ours, not OmegaConf's: the schema is stored with its typed sections open, so that
a user's YAML with legacy sections (`reward_model:`) still composes and the legacy-key shim can
move those keys to their V1 homes (`compose_config(..., migrate=...)`). After that, every key must
be a schema key: a typo fails with "did you mean", in YAML and on the command line alike. A key
added with `+` that the schema lacks is refused when it reads like a typo of a key in its section
(V1 would silently ignore it), and otherwise kept for the user's own code with a warning.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import difflib
import functools
import hashlib
import os
import pickle
import re
import sys
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Optional

import yaml
from hydra import compose, initialize_config_dir
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.file_config_source import FileConfigSource
from hydra._internal.sources_registry import SourcesRegistry
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import Override
from hydra.core.plugins import Plugins
from hydra.errors import HydraException, OverrideParseException
from hydra.plugins.config_source import ConfigResult
from omegaconf import DictConfig, ListConfig, Node, OmegaConf, UnionNode, open_dict
from omegaconf.errors import OmegaConfBaseException, ValidationError

from core_v1.config.schema import ConfigError, PPOConfig

CONFIG_DIR = Path(__file__).resolve().parent
SCHEMA_NAME = "ppo_trainer"
# verl's own config names: a script that names one with verl's relative --config-path gets ours.
VERL_CONFIG_NAMES = ("ppo_trainer", "ppo_megatron_trainer")

# How close a key's last part must be to a schema key's last part to count as a typo of it
# (`total_epoch` -> `total_epochs` is 0.96; `_target_` -> `target_kl`, no typo, is 0.82).
_TYPO_CUTOFF = 0.85


def _open_schema() -> DictConfig:
    """The schema with every typed section open to unknown keys (checked after composition), and
    every key open to null (`_nulls_to_defaults` gives a null its key's default after composition)."""
    schema = OmegaConf.structured(PPOConfig)
    for node in _typed_sections(schema):
        node._set_flag("struct", False)
        for key in node.keys():
            node._get_node(key)._metadata.optional = True
    return schema


def _nulls_to_defaults(cfg: DictConfig, reference: Optional[DictConfig] = None) -> None:
    """A null on a key whose type takes none means that key's schema default (verl's, not a
    preset's). verl's configs are untyped: any key may be null there, and verl writes null for "not
    set" (verl 0.8's legacy sections are all nulls; its tests pass
    `reward.custom_reward_function.name=null` beside a null path)."""
    reference = _schema_reference() if reference is None else reference
    for entry in _entries_of(reference):
        if not _holds_value(cfg, entry.key):
            continue
        node = cfg._get_node(entry.key, validate_access=False)  # there: OmegaConf's access check passes
        if node._is_none() and not entry.takes_null:
            cfg[entry.key] = _default_of(entry.default)
        elif entry.typed_section and isinstance(node, DictConfig) and not node._is_none():
            _nulls_to_defaults(node, entry.default)


@dataclasses.dataclass(frozen=True)
class _SchemaEntry:
    """One key of a section of the schema's reference, with what the walks of a composed config ask
    of its default: `takes_null` (the default is null, or its type takes null), `typed_section`
    (a section a schema dataclass types)."""

    key: str
    default: Node
    takes_null: bool
    typed_section: bool


# id -> (section, its entries): a read-only section's entries are the same for the whole process
# (every composition walks the schema's reference twice, and OmegaConf's node access is slow).
_ENTRIES: dict[int, tuple[DictConfig, tuple[_SchemaEntry, ...]]] = {}


def _entries_of(reference: DictConfig) -> tuple[_SchemaEntry, ...]:
    found = _ENTRIES.get(id(reference))
    if found is not None and found[0] is reference:
        return found[1]
    entries = []
    for key in reference.keys():
        default = reference._get_node(key)
        entries.append(
            _SchemaEntry(
                str(key),
                default,
                default._is_none() or default._metadata.optional,
                isinstance(default, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(default)),
            )
        )
    if reference._get_flag("readonly"):
        _ENTRIES[id(reference)] = (reference, tuple(entries))
    return tuple(entries)


def _holds_value(cfg: DictConfig, key: str) -> bool:
    """`key in cfg`, without resolving the value: the key is there and not `???`. (`in` resolves an
    interpolation, which takes Hydra's grammar parser each time, and counts it as there whatever it
    resolves to: OmegaConf raises every failure of a resolution as an InterpolationResolutionError,
    which `in` takes for "there", and its nodes hold only interpolations that parse.) A union's
    value is left to `in`."""
    try:
        node = cfg._get_node(key, validate_access=False)
    except (KeyError, AttributeError):  # as `in`: a section that is itself an interpolation holds no key
        return False
    if node is None:
        return False
    if isinstance(node, UnionNode):
        return key in cfg
    return not node._is_missing()


def _default_of(node):
    if isinstance(node, DictConfig) and dataclasses.is_dataclass(OmegaConf.get_type(node)):
        return node  # assigned as a copy (a section's defaults may differ from its class's: critic.optim.lr)
    return OmegaConf.to_container(node) if isinstance(node, (DictConfig, ListConfig)) else node._value()


def _typed_sections(cfg: DictConfig) -> Iterator[DictConfig]:
    """`cfg` and every DictConfig below it that a schema dataclass types."""
    if dataclasses.is_dataclass(OmegaConf.get_type(cfg)):
        yield cfg
    for key in cfg.keys():
        child = cfg._get_node(key, validate_access=False)  # a key of its own: OmegaConf's access check passes
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            yield from _typed_sections(child)


ConfigStore.instance().store(name=SCHEMA_NAME, node=_open_schema())
# verl's other config names are presets (core_v1/config/verl/) that a user's YAML may start from
# (`defaults: [ppo_megatron_trainer, _self_]`); they live in the ConfigStore, not in CONFIG_DIR,
# where Hydra would refuse a file with a stored config's name.
# Each is stored composed (the schema, then the preset's keys), without the file's defaults list: a
# user's verl checkout on the search path (`hydra.searchpath: file://verl/trainer/config`, as verl's
# multi-turn examples set it) has a file of the same name, which Hydra then merges onto the stored
# config, as it does verl's ppo_trainer.yaml onto the schema; a stored defaults list makes Hydra stop.
for _name in VERL_CONFIG_NAMES[1:]:
    _preset = OmegaConf.load(CONFIG_DIR / "verl" / f"{_name}.yaml")
    _preset.pop("defaults")
    ConfigStore.instance().store(name=_name, node=OmegaConf.merge(_open_schema(), _preset))


def _share_the_store_when_copied(store: ConfigStore) -> None:
    """Hydra deep-copies its config repository at every compose, and the repository's structured
    source holds the process-wide ConfigStore, so each compose copied the schema and the presets
    above (a quarter of a compose's CPU). A compose never writes the store (`load` hands out
    copies; Hydra copies the repository so that a `hydra.searchpath` can replace its sources,
    and each new source takes `ConfigStore.instance()` itself): the copy may share it."""
    setattr(store, "__deepcopy__", lambda memo: store)  # copy.deepcopy looks the method up on the instance


_share_the_store_when_copied(ConfigStore.instance())


class _FileSourceParsingOnce(FileConfigSource):
    """Hydra's `file://` config source, parsing each YAML file once per process: every composition
    reads each file of its defaults list again (for its `# @package` header, then for its keys),
    and parsing is most of that (copying a parsed file takes a fifth of the time). A file whose
    bytes changed since is parsed again."""

    _parsed: dict[tuple, ConfigResult] = {}
    _KEPT = 1024

    def load_config(self, config_path: str) -> ConfigResult:
        file = os.path.realpath(os.path.join(self.path, self._normalize_file_name(config_path)))
        digest = _digest(file)
        if digest is None:
            return super().load_config(config_path)  # Hydra's own error for a missing file
        key = (file, digest, self.path, self.provider)
        parsed = self._parsed.get(key)
        if parsed is None:
            if len(self._parsed) >= self._KEPT:
                self._parsed.clear()
            parsed = self._parsed[key] = super().load_config(config_path)
        return dataclasses.replace(parsed, config=copy.deepcopy(parsed.config), header=dict(parsed.header))


def _parse_each_file_once() -> None:
    Plugins.instance()  # Hydra registers its own sources when first asked: ours replaces its file source after
    SourcesRegistry.instance().types[_FileSourceParsingOnce.scheme()] = _FileSourceParsingOnce


_parse_each_file_once()

MigrateHook = Callable[[DictConfig], DictConfig]


def parse_override(text: str) -> Override:
    """Hydra's parse of one override (its own exception when it does not parse), memoized per
    process: the ANTLR parse takes about a millisecond, and a launch's tokens are parsed by the
    shim, the V0/V1 choice and each composition, again for every reading of `--verify`."""
    return copy.copy(_parsed_override(text))  # Hydra sets fields of an Override it is given


@functools.lru_cache(maxsize=8192)
def _parsed_override(text: str) -> Override:
    return OverridesParser.create().parse_override(text)


def parse_overrides(overrides: list[str]) -> list[Override]:
    """Hydra's `parse_overrides`, each one memoized (`parse_override`); when one does not parse,
    Hydra's own error for the list."""
    try:
        return [parse_override(text) for text in overrides]
    except Exception:  # noqa: BLE001 - re-parsed below for Hydra's message
        return OverridesParser.create().parse_overrides(overrides=overrides)


def compose_config(
    config_name: str = SCHEMA_NAME,
    overrides: Iterable[str] = (),
    config_dir: Optional[str | os.PathLike] = None,
    migrate: Optional[MigrateHook] = None,
) -> DictConfig:
    """Compose `config_name` from `config_dir` (default: ours) with command-line `overrides`.

    `migrate`, when given, runs on the composed config before the key check (the legacy-key shim
    plugs in here; `core_v1` never imports it). Raises ConfigError for an unknown key, a deleted
    schema key, or anything Hydra/OmegaConf refuse; the returned config is closed (struct).
    """
    overrides = list(overrides)
    directory = Path(config_dir).expanduser().resolve() if config_dir else CONFIG_DIR
    if not directory.is_dir() and config_name.removesuffix(".yaml") in VERL_CONFIG_NAMES:
        _warn_once(
            f"warning: --config-path={config_dir} does not exist here; using rlbridge's built-in "
            f"{config_name} (core_v1/config)"
        )
        directory = CONFIG_DIR
    if not directory.is_dir():
        raise ConfigError(
            f"config directory {str(directory)!r} does not exist; check --config-path (a relative path "
            "is read from the current directory)"
        )
    try:
        cfg = _composed(directory, config_name, overrides)
        if migrate is not None:
            cfg = migrate(cfg)
        _nulls_to_defaults(cfg)
        check_keys(cfg, added_keys(overrides))
        _close(cfg)
        return cfg
    except OverrideParseException as error:
        raise ConfigError(_explain_parse_error(error)) from None
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_explain(error)) from None
    except yaml.MarkedYAMLError as error:  # a YAML file of the user's that does not parse
        raise ConfigError(_explain_yaml(error)) from None


# Hydra's compositions of this process, newest last: `--verify` and the entrypoint read the same
# arguments more than once (V0 and V1, again without refused keys, as written and as compared), and
# a composition is most of a reading's time. Each kept one holds about half a megabyte.
_COMPOSED: collections.OrderedDict[tuple, _Composition] = collections.OrderedDict()
_COMPOSED_KEPT = 64


def _composed(directory: Path, config_name: str, overrides: list[str]) -> DictConfig:
    """Hydra's composition of `config_name` from `directory` with `overrides`, as a config the caller
    may change: the one composed now, or a copy of the one kept."""
    composition, composed_now = _composition(directory, config_name, overrides)
    return composition.copy() if composed_now is None else composed_now


@dataclasses.dataclass(frozen=True)
class _Composition:
    """One composition, kept: `cfg` without Hydra's node, as its pickle (the config itself goes to
    the caller that composed it); the folders of its `hydra.searchpath` and their YAML files'
    state; the config sources Hydra read (they tell which keys are config groups); the ConfigStore's
    nodes at the time (kept so that their ids in the memo's key stay theirs); `reads_hydra`: it
    holds `${hydra:...}`, which reads Hydra's node of this very composition, so it is composed each
    time. Copies are handed out by unpickling the pickle, taken once: a sixth of `copy.deepcopy`'s
    time on verl's trainer config. A composition of value overrides onto a base (`_onto_base`) keeps
    no pickle but the base and the overrides (`onto`): its copy is the base's with them applied
    again, which costs about what its pickle would, and few such compositions are asked for twice."""

    cfg: dataclasses.InitVar[Optional[DictConfig]]
    searchpath: tuple[str, ...]
    folders: tuple[Path, ...]
    folders_state: tuple
    sources: tuple
    stored: tuple
    reads_hydra: bool
    onto: Optional[tuple[_Composition, tuple[str, ...]]] = None
    pickled: Optional[bytes] = dataclasses.field(init=False, repr=False)

    def __post_init__(self, cfg: Optional[DictConfig]) -> None:
        object.__setattr__(self, "pickled", None if self.onto is not None else pickle.dumps(cfg))

    def copy(self) -> DictConfig:
        if self.onto is None:
            return pickle.loads(self.pickled)
        base, overrides = self.onto
        cfg = base.copy()
        ConfigLoaderImpl._apply_overrides_to_config(parse_overrides(list(overrides)), cfg)
        return cfg


def _composition(directory: Path, config_name: str, overrides: list[str]) -> tuple[_Composition, Optional[DictConfig]]:
    """The composition, and its config when composed now (no one else holds that object: a caller
    may change it), else None. A repeat reuses the earlier composition while every input is the
    same: the arguments, the current directory (a relative `hydra.searchpath` is read from it), the
    configs in Hydra's ConfigStore and the YAML files of `directory` and of the search path's
    folders (their bytes)."""
    stored = _stored_nodes(ConfigStore.instance().repo)
    files = _yaml_files_state(directory)
    if files is None:  # a folder too large to watch: composed each time, as Hydra alone would
        return _hydra_compose(directory, config_name, overrides, stored)
    key = (
        str(directory),
        files,
        tuple(map(id, stored)),
        os.getcwd(),
        config_name,
        tuple(overrides),
    )
    found = _COMPOSED.get(key)
    if found is not None and found.folders_state == _searchpath_state(found.folders):
        _COMPOSED.move_to_end(key)
        return found, None
    composition, cfg = (overrides and _onto_base(directory, config_name, overrides)) or _hydra_compose(
        directory, config_name, overrides, stored
    )
    if not composition.reads_hydra:
        _COMPOSED[key] = composition
        while len(_COMPOSED) > _COMPOSED_KEPT:
            _COMPOSED.popitem(last=False)
    return composition, cfg


def _hydra_compose(
    directory: Path, config_name: str, overrides: list[str], stored: tuple
) -> tuple[_Composition, DictConfig]:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            read_from = _repository_of_next_compose(GlobalHydra.instance().config_loader())
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
            sources = tuple(read_from[0].get_sources())
    finally:
        GlobalHydra.instance().clear()
    searchpath = tuple(str(entry) for entry in cfg.hydra.searchpath or ())
    with open_dict(cfg):  # as Hydra's compose leaves it without return_hydra_config
        del cfg["hydra"]
    folders = _searchpath_folders(searchpath)
    reads_hydra = "${hydra:" in str(OmegaConf.to_container(cfg, resolve=False))
    return _Composition(cfg, searchpath, folders, _searchpath_state(folders), sources, stored, reads_hydra), cfg


def _repository_of_next_compose(loader: Any) -> list:
    """A list that gets the config repository `loader`'s next composition reads from. Its sources
    are those of the search path that composition used, the primary config's `hydra.searchpath`
    folders included (`loader.get_sources()` lists only the folders known before that config was
    read), so that they tell every config group the composition could see."""
    found = [loader.repository]  # a composition that fails before creating its repository
    create = loader._parse_overrides_and_create_caching_repo

    def create_and_keep(*args, **kwargs):
        parsed, repository = create(*args, **kwargs)
        found[0] = repository
        return parsed, repository

    setattr(loader, "_parse_overrides_and_create_caching_repo", create_and_keep)
    return found


def _onto_base(directory: Path, config_name: str, overrides: list[str]) -> Optional[tuple[_Composition, DictConfig]]:
    """The composition with `overrides` when none of them can change what Hydra composes (no config
    group of any folder it searched, its `hydra.searchpath` ones too; no Hydra key, no sweep): a
    copy of the composition without overrides, with Hydra's own step that applies overrides to a
    composed config (the step a full composition ends with). None when that does not hold: Hydra
    composes it in full."""
    if any("hydra" in token for token in overrides):  # hydra.* keys, `${hydra:...}` values
        return None
    try:
        base, base_composed_now = _composition(directory, config_name, [])
    except Exception:  # noqa: BLE001 - Hydra's full composition reports what is wrong
        return None
    if base.reads_hydra:
        return None
    parsed = parse_overrides(overrides)  # Hydra's first step, its errors
    if any(_may_change_the_defaults(override, base.sources) for override in parsed):
        return None
    cfg = base.copy() if base_composed_now is None else base_composed_now
    ConfigLoaderImpl._apply_overrides_to_config(parsed, cfg)
    return dataclasses.replace(base, cfg=None, onto=(base, tuple(overrides))), cfg


def _may_change_the_defaults(override: Override, sources: tuple) -> bool:
    """Whether Hydra might read `override` as a defaults-list override rather than a config value."""
    if override.is_sweep_override() or override.package is not None:
        return True
    return any(source.is_group(override.key_or_group) for source in sources)


def _stored_nodes(repo: dict) -> tuple:
    """Every config in Hydra's ConfigStore (a `store` replaces a name's node with a new one)."""
    nodes: list = []
    for name in sorted(repo):
        entry = repo[name]
        nodes += _stored_nodes(entry) if isinstance(entry, dict) else [entry]
    return tuple(nodes)


def _searchpath_folders(searchpath) -> tuple[Path, ...]:
    """The folders of the `hydra.searchpath` Hydra composed with (`file://` or no scheme; a
    `pkg://` entry is an installed package's, which a process does not see change)."""
    folders = []
    for entry in searchpath or ():
        scheme, _, rest = str(entry).rpartition("://")
        if scheme in ("", "file"):
            folders.append(Path(rest).expanduser().resolve())
    return tuple(folders)


def _searchpath_state(folders: tuple[Path, ...]) -> tuple:
    """The state of each folder; a folder too large to watch gets a fresh object, equal to no other."""
    return tuple(object() if state is None else state for state in map(_yaml_files_state, folders))


# A config folder is watched only while it holds at most this many files: `--config-path=.` in a
# project with a data or outputs tree would otherwise be walked and hashed on every composition.
_WATCHED_FILES_MAX = 5000


def _yaml_files_state(directory: Path) -> Optional[tuple[tuple[str, Optional[bytes]], ...]]:
    """(path, digest of its bytes) of every YAML file under `directory`: what Hydra may read there.
    The bytes, not the modification time: an edit of the same size within a clock tick counts.
    None for a folder of more than `_WATCHED_FILES_MAX` files."""
    paths, seen = [], 0
    for root, _, names in os.walk(directory):
        seen += len(names)
        if seen > _WATCHED_FILES_MAX:
            return None
        paths += [os.path.join(root, name) for name in names if name.endswith((".yaml", ".yml"))]
    return tuple(sorted((path, _digest(path)) for path in paths))


def _digest(path: str) -> Optional[bytes]:
    """A digest of the file's bytes; None when it cannot be read."""
    try:
        with open(path, "rb") as file:
            return hashlib.blake2b(file.read(), digest_size=16).digest()
    except OSError:
        return None


def _explain_yaml(error: yaml.MarkedYAMLError) -> str:
    mark = error.problem_mark or error.context_mark
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
    problem = " ".join(part for part in (error.context, error.problem) if part)
    return (
        f"{where} is not valid YAML: {problem}; fix that line (a value holding '{{', '}}', ': ' or '#', "
        "such as an interpolation inside {...}, needs quotes)"
    )


@functools.lru_cache(maxsize=None)
def _warn_once(line: str) -> None:
    """Print a start-up warning once (the entrypoint may compose twice: once to see trainer.use_v1)."""
    print(line, file=sys.stderr)


def added_keys(overrides: Iterable[str]) -> set[str]:
    """The keys of `+key=value` / `++key=value` overrides (Hydra's way to add a key)."""
    return {o.lstrip("+").split("=", 1)[0] for o in overrides if o.startswith("+") and "=" in o}


def check_keys(cfg: DictConfig, added: set[str] = frozenset()) -> None:
    """Refuse keys the schema lacks (with a suggestion) and schema keys that were deleted.

    A `+`-added key the schema lacks is kept, with a warning on stderr, unless it reads like a typo
    of a key in its section: the typed config never reads it, so only the user's own code can.
    """
    if not dataclasses.is_dataclass(OmegaConf.get_type(cfg)):  # a YAML of its own, not built on the schema
        raise ConfigError(
            "the config does not start from rlbridge's schema: put `defaults: [ppo_trainer, _self_]` "
            "at the top of the YAML that --config-name names"
        )
    for section, path in _typed_pairs(cfg, _schema_reference(), ""):
        fields = {f.name for f in dataclasses.fields(OmegaConf.get_type(section))}
        for key in section.keys():
            key = str(key)
            if key in fields:
                continue
            full = f"{path}{key}"
            was_added = any(k == full or k.startswith(full + ".") for k in added)
            typo = difflib.get_close_matches(key, sorted(fields), n=1, cutoff=_TYPO_CUTOFF)
            if was_added and not typo:
                print(
                    f"warning: {full} (added with '+') is not an rlbridge config key; rlbridge does not read it, "
                    "only your own code can",
                    file=sys.stderr,
                )
                continue
            hint = f" Did you mean {path + typo[0]!r}?" if typo else suggest_key(full)
            how = "added with '+'" if was_added else "add a '+' only for keys the schema lacks on purpose"
            raise ConfigError(f"unknown config key {full!r}.{hint} ({how})")
        missing = sorted(fields - {str(k) for k in section.keys()})
        if missing:
            raise ConfigError(
                f"config key {path + missing[0]!r} was deleted; the schema needs it, so set a value "
                "instead of deleting it"
            )


@functools.lru_cache(maxsize=1)
def _schema_reference() -> DictConfig:
    """The schema's defaults, built once (building it costs a third of a second); read only."""
    reference = OmegaConf.structured(PPOConfig)
    OmegaConf.set_readonly(reference, True)
    return reference


def _typed_pairs(cfg: DictConfig, reference: DictConfig, path: str) -> Iterator[tuple[DictConfig, str]]:
    """(section, dotted path prefix) for every schema-typed section of `cfg`, walking the schema."""
    yield cfg, path
    for entry in _entries_of(reference):
        if not entry.typed_section or not _holds_value(cfg, entry.key):
            continue
        child = cfg._get_node(entry.key, validate_access=False)  # there: OmegaConf's access check passes
        if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
            yield from _typed_pairs(child, entry.default, f"{path}{entry.key}.")


def _close(cfg: DictConfig) -> None:
    """Close the composed config again: a later write or read of an unknown key fails."""
    for node in _typed_sections(cfg):
        node._set_flag("struct", None)
    OmegaConf.set_struct(cfg, True)


def to_config(cfg: DictConfig) -> PPOConfig:
    """Resolve interpolations and build the typed config, running every section's checks."""
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except (OmegaConfBaseException, ValueError, TypeError) as error:
        cause = error.__cause__ if isinstance(error.__cause__, ConfigError) else error
        raise ConfigError(_explain(cause)) from None


def load_config(
    overrides: Iterable[str] = (), config_name: str = SCHEMA_NAME, config_dir: Optional[str | os.PathLike] = None
) -> PPOConfig:
    return to_config(compose_config(config_name, overrides, config_dir))


def config_keys() -> list[str]:
    """Every dotted key of the schema (leaves and sections), for suggestions and the shims."""
    keys: list[str] = []

    def walk(cls, prefix: str) -> None:
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            keys.append(key)
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            if dataclasses.is_dataclass(default):
                walk(type(default), key + ".")

    walk(PPOConfig, "")
    return keys


def suggest_key(key: str) -> str:
    """A near miss only: a schema key whose last part is a close spelling of `key`'s last part (a
    long shared prefix alone, `fsdp_config.dtype` -> `fsdp_config.model_dtype`, is no near miss)."""
    candidates = [k for k in config_keys() if _near_miss(key, k)]
    close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


def _near_miss(key: str, known: str) -> bool:
    """The same section with a close spelling, or the same name one section up or down
    (`actor.ulysses_sequence_parallel_size` -> `actor.fsdp_config.ulysses_sequence_parallel_size`)."""
    section, _, leaf = key.rpartition(".")
    known_section, _, known_leaf = known.rpartition(".")
    if section == known_section:
        return difflib.SequenceMatcher(None, leaf, known_leaf).ratio() >= _TYPO_CUTOFF
    nested = (
        known_section.startswith(section + ".")
        or section.startswith(known_section + ".")
        or not section
        or not known_section
    )
    return leaf == known_leaf and nested


_UNKNOWN_KEY = re.compile(r"Key '([^']+)' (?:is )?not in (?:struct|'?\w+'?)")
_FULL_KEY = re.compile(r"full_key: ([\w.\[\]]+)")
_OVERRIDE = re.compile(r"Could not (?:override|append to config\. An item is already at) '([^']+)'")


def _explain_parse_error(error: OverrideParseException) -> str:
    """Hydra's grammar error for one override, as one line that names the override and the fix."""
    lines = [
        line.strip()
        for line in error.message.splitlines()
        if line.strip() and not line.startswith("See https") and set(line.strip()) != {"^"}
    ]
    detail = next((line for line in lines if not line.startswith("Error parsing override")), "")
    detail = detail.replace(error.override, "").split(" expecting ")[0].strip(" :")
    why = f" ({detail})" if detail else ""
    return (
        f"cannot read the override {error.override!r}{why}: quote a value that holds spaces, brackets, "
        "<, > or other special characters as key='value' (from bash: \"key='value'\"), and check that "
        "each bracket closes"
    )


def _explain(error: BaseException) -> str:
    """One line out of Hydra/OmegaConf's multi-line messages, with a key suggestion for typos."""
    if error.__cause__ is not None:  # Hydra wraps OmegaConf's precise message
        return _explain(error.__cause__)
    if isinstance(error, ValidationError) and str(error.full_key) in _field_types():
        return _wrong_type(str(error.full_key), error.value)
    text = str(error)
    full = _FULL_KEY.search(text) or _OVERRIDE.search(text)
    if _UNKNOWN_KEY.search(text) and full:
        key = full.group(1)
        return f"unknown config key {key!r}.{suggest_key(key)} (add a '+' only for keys the schema lacks on purpose)"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    where = f" (key {full.group(1)})" if full and full.group(1) not in first else ""
    if first.startswith("Value '' "):  # `key=$VAR` in a launch script whose VAR is unset expands to `key=`
        where += ": the value is empty; is a shell variable of the launch script unset? Set it"
    return f"{first}{where}"


_KINDS = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list ([a,b])",
    dict: "a mapping ({k: v})",
}


def _wrong_type(key: str, value) -> str:
    """`key=value` for a value of the wrong type: the values the key takes, and its default."""
    hint = _field_types()[key]
    optional = typing.get_origin(hint) is typing.Union and type(None) in typing.get_args(hint)
    if optional:
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if dataclasses.is_dataclass(hint):
        kind = f"a section ({', '.join(f.name for f in dataclasses.fields(hint))})"
    else:
        kind = _KINDS.get(typing.get_origin(hint) or hint, getattr(hint, "__name__", str(hint)))
    default = OmegaConf.select(_schema_reference(), key, throw_on_resolution_failure=False)
    shown = "" if OmegaConf.is_config(default) else f"; default {_as_written(default)}"
    unset = " (the value is empty: is a shell variable of the launch script unset? Set it)" if value == "" else ""
    return f"{key}={value!r} is not a value it takes: {kind}{' or null' if optional else ''}{shown}{unset}"


def _as_written(value) -> str:
    """A default as a config writes it (`true`, `null`, `'text'`, `1e-06`)."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    return repr(value)


@functools.lru_cache(maxsize=1)
def _field_types() -> dict[str, object]:
    """The type of every schema key, by dotted key."""
    found: dict[str, object] = {}

    def walk(cls, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            found[prefix + f.name] = hints[f.name]
            if dataclasses.is_dataclass(hints[f.name]):
                walk(hints[f.name], f"{prefix}{f.name}.")

    walk(PPOConfig, "")
    return found
