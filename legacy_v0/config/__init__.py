"""The V0 trainer's config: verl's V0 key layout, read the way verl's V0 trainer read it.

`compose_v0(config_name, config_dir, overrides)` composes with Hydra (the same grammar and
presets as V1, plus the V0 presets in this folder: verl's `ppo_megatron_trainer`) and then reads
the result in three parts, with no V1 key shim in between (so nothing V0 runs is refused, and
V0's own key names print no "legacy key" lines):

1. V0's own settings (`V0Settings`, typed and checked like any section): the reward manager
   `reward_model.reward_manager` with its `reward_model.reward_kwargs` and DAPO's
   `reward_model.overlong_buffer.*`, and a copy of the whole `reward_model` section for the
   served reward model's worker.
2. Settings of verl backends rlbridge does not have (Megatron, SGLang/TRT-LLM, NPU, Ulysses):
   decided per key in `legacy_v0.config.backends` (mapped with one warning when the training
   computed is the same, refused otherwise).
3. Everything else is shared with V1 (the prompt sampler `data.sampler.*` too). verl's keys whose
   home moved are read by the `legacy_keys` the caller passes (`LegacyKeys`): V0 does not know
   the rename table; the command line and `--verify` pass the shims' reader
   (`shims.v0_keys.KeyTableOnV0`: moved keys move quietly, as on V0 they are the native names;
   V0 features that V0 lacks too are refused with the table's reason). Then a top-level key that
   neither V0 nor V1 has is refused, and V1's key check runs on the result.

The returned `V0Config` holds the V1-layout `DictConfig` the shared trainer core reads, the V0
settings, and the notes for the dry-run plan.
"""

from __future__ import annotations

import dataclasses
import pickle
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Protocol

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import OmegaConfBaseException

from core_v1.config import ConfigError, PPOConfig, compose_config, to_config
from core_v1.config import loader as core_v1_loader
from core_v1.config.loader import SCHEMA_NAME, added_keys

V0_CONFIG_DIR = Path(__file__).resolve().parent
# verl's own config names; a script that names one with verl's relative --config-path gets ours.
VERL_CONFIG_NAMES = ("ppo_trainer", "ppo_megatron_trainer")


def _register_v0_presets() -> None:
    """V0's presets (this folder's YAML files) join Hydra's ConfigStore, so that a user's own YAML
    can start from them (`defaults: [ppo_megatron_trainer, _self_]`, as verl's recipes do)."""
    for preset in V0_CONFIG_DIR.glob("*.yaml"):
        if preset.stem in core_v1_loader.VERL_CONFIG_NAMES:
            continue  # core_v1's loader stored this verl name already, composed (the same keys); replacing it
            # with a defaults-list form would stop a verl checkout's file of that name from composing on V1
        ConfigStore.instance().store(name=preset.stem, node=OmegaConf.to_container(OmegaConf.load(preset)))


_register_v0_presets()


# ------------------------------------------------------------------------- V0's own settings
@dataclass
class OverlongBufferConfig:
    """DAPO's soft overlong punishment (verl's `reward_model.overlong_buffer`): a response longer
    than `max_response_length - len` loses up to `penalty_factor`, linearly over the last `len` tokens."""

    enable: bool = False
    len: int = 0
    penalty_factor: float = 1.0
    log: bool = False

    def __post_init__(self):
        if self.enable and self.len <= 0:
            raise ConfigError(
                "reward_model.overlong_buffer.len must be > 0 when reward_model.overlong_buffer.enable=true"
            )


@dataclass
class V0Settings:
    """What only the V0 trainer reads, under verl's V0 key names (see the module docstring)."""

    reward_manager: str = "naive"
    reward_kwargs: dict = field(default_factory=dict)
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    launch_reward_fn_async: bool = False
    # verl's whole `reward_model` section as written (the served reward model's worker reads it).
    reward_model: dict = field(default_factory=dict)


# V0 key -> V0Settings field; each is removed from the shared config once read.
_V0_KEYS = {
    "reward_model.reward_manager": "reward_manager",
    "reward_model.reward_kwargs": "reward_kwargs",
    "reward_model.overlong_buffer": "overlong_buffer",
    "reward_model.launch_reward_fn_async": "launch_reward_fn_async",
}


@dataclass
class V0Config:
    """A composed V0 run: the shared config (V1 layout), V0's own settings, and plan notes."""

    raw: DictConfig
    settings: V0Settings
    notes: list[str] = field(default_factory=list)
    # The composed config before V0 read it: verl's keys where the script (or its YAML) wrote them.
    # `codemods.verify` reads verl's older homes of moved keys here, independently of the rename table.
    as_written: Optional[DictConfig] = None

    def ppo_config(self) -> PPOConfig:
        return to_config(self.raw)

    def describe(self) -> list[str]:
        """The V0 lines of the dry-run plan."""
        s = self.settings
        manager = s.reward_manager
        if s.overlong_buffer.enable:
            buffer = s.overlong_buffer
            manager += f" (overlong buffer {buffer.len} tokens, penalty factor {buffer.penalty_factor})"
        lines = [f"  V0 reward:   reward manager {manager}"]
        lines += [f"  V0 note:     {note}" for note in self.notes]
        return lines


class LegacyKeys(Protocol):
    """How a V0 launch's verl keys that are neither V0's own settings nor a backend's are read:
    in place, in the composed config (sections open), before V0 refuses unknown sections and V1
    checks the keys. Returns the dry-run plan's notes; a key V0 cannot run raises ConfigError.
    `shims.v0_keys.KeyTableOnV0` reads them through the rename table."""

    def __call__(self, cfg: DictConfig) -> list[str]: ...


# ------------------------------------------------------------------------------ composing
def resolve_config_dir(config_name: str, config_dir: Optional[str]) -> tuple[Optional[str], Optional[str]]:
    """`(directory to compose from, note)` for `--config-name` / `--config-path`.

    Without `--config-path` the built-in presets are used (V1's folder, and V0's presets through
    Hydra's ConfigStore). verl's scripts pass `--config-path=config`, relative to verl's own
    package, which a user's checkout does not have: for verl's own config names that falls back
    to the built-in preset, with a note.
    """
    if config_dir is None or Path(config_dir).expanduser().is_dir():
        return config_dir, None
    if config_name.removesuffix(".yaml") in VERL_CONFIG_NAMES:
        return None, (
            f"--config-path={config_dir} does not exist here; using rlbridge's built-in "
            f"{config_name.removesuffix('.yaml')!r} (verl's own config of that name)"
        )
    return config_dir, None  # composition reports the missing folder


def compose_v0(
    config_name: str = SCHEMA_NAME,
    config_dir: Optional[str] = None,
    overrides: Iterable[str] = (),
    *,
    legacy_keys: LegacyKeys,
) -> V0Config:
    """Compose a V0 run (see the module docstring), reading verl's moved keys with `legacy_keys`
    (required: without the rename table verl's own presets do not compose); a user mistake
    raises ConfigError."""
    overrides = list(overrides)
    reader = _V0Reader(added_keys(overrides), legacy_keys)
    overrides = [_as_force_add(token) for token in overrides]
    config_name = config_name.removesuffix(".yaml")  # verl's scripts may name the file
    config_dir, note = resolve_config_dir(config_name, config_dir)
    if note:
        reader.notes.append(note)
        print(f"note: {note}", file=sys.stderr)
    raw = compose_config(config_name, overrides, config_dir, migrate=reader.read)
    with open_dict(raw):
        raw.trainer.use_v1 = False
    return V0Config(raw, reader.settings, reader.notes, reader.as_written)


def _as_force_add(token: str) -> str:
    """Override tokens as V0 means them. verl's scripts add keys their verl lacked with
    `+key=value`; rlbridge may have the key, and Hydra refuses to `+`-add an existing one: `++`
    sets it either way, which is what was meant. V0's own top-level sections (`reward_model`,
    `custom_reward_function`, ...) are not in the V1 schema that composition starts from, so
    their keys are set with `++` too (the reader then takes them out, and refuses what is left)."""
    if "=" not in token or token.startswith(("++", "~")):
        return token
    if token.startswith("+"):
        return "+" + token
    if token.split(".", 1)[0].split("=", 1)[0] not in _schema_roots():
        return "++" + token
    return token


def _schema_roots() -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(PPOConfig))


class _V0Reader:
    """The `migrate` hook of `compose_config` for V0 (runs before V1's key check)."""

    def __init__(self, added: set[str], legacy_keys: LegacyKeys):
        self.added = added  # keys the user added with `+` (kept for their own code, as on V1)
        self.legacy_keys = legacy_keys
        self.settings = V0Settings()
        self.notes: list[str] = []
        self.as_written: Optional[DictConfig] = None

    def read(self, cfg: DictConfig) -> DictConfig:
        from legacy_v0.config.backends import apply_backend_verdicts

        self.as_written = _copy_of(cfg)
        with open_dict(cfg):
            self.settings = self._take_v0_settings(cfg)
            self.notes += self._say_what_v0_settings_do_not_change()
            self.notes += apply_backend_verdicts(cfg)
            self.notes += self.legacy_keys(cfg)
        self._refuse_unknown_sections(cfg)
        return cfg

    def _say_what_v0_settings_do_not_change(self) -> list[str]:
        if not self.settings.launch_reward_fn_async:
            return []
        # verl's switch only moved the reward computation beside the old log-probs: the same rewards, sooner.
        note = (
            "reward_model.launch_reward_fn_async=true has no effect here: V0 computes the rewards in its "
            "reward stage, before the old log-probs (the same rewards; verl's switch only overlapped the two)"
        )
        print(f"warning: {note}", file=sys.stderr)
        return [note]

    def _refuse_unknown_sections(self, cfg: DictConfig) -> None:
        """A top-level key that neither V0 nor V1 has is a typo (V1's check would take a key set
        with `++` for one the user added on purpose)."""
        from core_v1.config.loader import suggest_key

        for key, _ in config_leaves(cfg):
            root = key.split(".", 1)[0]
            if root in _schema_roots() or any(a == key or key.startswith(a + ".") for a in self.added):
                continue
            raise ConfigError(
                f"unknown config key {key!r}.{suggest_key(key)} (add a '+' only for keys the schema lacks on purpose)"
            )

    def _take_v0_settings(self, cfg: DictConfig) -> V0Settings:
        section = cfg.get("reward_model")
        whole_section = _plain(section) if isinstance(section, DictConfig) else {}
        values: dict[str, Any] = {}
        for key, name in _V0_KEYS.items():
            node = OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)
            if node is None:
                continue
            values[name] = OmegaConf.to_container(node, resolve=True) if isinstance(node, DictConfig) else node
            delete_key(cfg, key)
        try:
            settings = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(V0Settings), values))
        except OmegaConfBaseException as error:
            raise ConfigError(_v0_key_error(error)) from None
        settings.reward_model = whole_section
        return settings


# ------------------------------------------------------------------------------- helpers
def config_leaves(cfg: DictConfig, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """`(dotted key, node)` for each leaf of `cfg` (an empty, None or interpolated section is a leaf)."""
    for key in list(cfg.keys()):
        node = cfg._get_node(key)
        # A mapping keyed by dotted names (module paths) is one value: dotted keys cannot name its children.
        if (
            isinstance(node, DictConfig)
            and not node._is_none()
            and not node._is_interpolation()
            and len(node)
            and all(isinstance(name, str) and "." not in name for name in node.keys())
        ):
            yield from config_leaves(node, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", node


def _copy_of(cfg: DictConfig) -> DictConfig:
    """`cfg.copy()` through its pickle, a third of `copy.deepcopy`'s time on verl's trainer config
    (as `core_v1.config.loader` hands out its compositions); deep-copied when a value does not pickle."""
    try:
        return pickle.loads(pickle.dumps(cfg))
    except Exception:  # noqa: BLE001 - a value pickle cannot take: the copy OmegaConf makes
        return cfg.copy()


def _plain(section: DictConfig) -> dict:
    """A section as plain data, its interpolations resolved against the whole config where they can be."""
    try:
        return OmegaConf.to_container(section, resolve=True)
    except OmegaConfBaseException:
        return OmegaConf.to_container(section, resolve=False)


def delete_key(cfg: DictConfig, key: str) -> None:
    """Remove `key`, then the sections it leaves empty (unless the V1 schema has them)."""
    from core_v1.config import config_keys

    schema_keys = set(config_keys())
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key) if parent_key else cfg
    if not isinstance(parent, DictConfig) or parent._get_node(leaf) is None:  # (`in` is False for `???`)
        return
    if key in schema_keys:  # a key V1 has too: back to its default
        return
    del parent[leaf]
    while parent_key and len(parent) == 0 and parent_key not in schema_keys:
        parent_key, _, leaf = parent_key.rpartition(".")
        grand = OmegaConf.select(cfg, parent_key) if parent_key else cfg
        del grand[leaf]
        parent = grand


def _v0_key_error(error: OmegaConfBaseException) -> str:
    """One line for a bad V0 setting, with verl's key name."""
    names = {field_name: key for key, field_name in _V0_KEYS.items()}
    text = str(error).strip().splitlines()[0]
    full_key = getattr(error, "full_key", None) or ""
    head, _, rest = str(full_key).partition(".")
    where = names.get(head, head)
    where = f"{where}.{rest}" if rest else where
    if "not in" in text and "Key" in text:
        return f"unknown config key {where!r} (V0's {where.rsplit('.', 1)[0]} section has no such key)"
    return f"{text} (key {where})" if where else text


def settings_fields() -> list[str]:
    return [f.name for f in dataclasses.fields(V0Settings)]


__all__ = [
    "V0Config",
    "V0Settings",
    "OverlongBufferConfig",
    "LegacyKeys",
    "compose_v0",
    "config_leaves",
    "delete_key",
    "resolve_config_dir",
    "VERL_CONFIG_NAMES",
    "V0_CONFIG_DIR",
]
