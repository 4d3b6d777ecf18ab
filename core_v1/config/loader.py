"""Compose a run's configuration with Hydra and turn it into the typed `PPOConfig` once.

The schema (`schema.PPOConfig`) is registered in Hydra's ConfigStore as `ppo_trainer`, so
`--config-name=ppo_trainer` is the full default config and YAML presets in this folder (or a
user's `--config-path`) start from it with `defaults: [ppo_trainer, _self_]`. Overrides are
Hydra's own grammar (`key=value`, `+key=value`, `++key=value`, `~key`).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from pathlib import Path
from typing import Iterable, Optional

from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from core_v1.config.schema import ConfigError, PPOConfig

CONFIG_DIR = Path(__file__).resolve().parent
SCHEMA_NAME = "ppo_trainer"

ConfigStore.instance().store(name=SCHEMA_NAME, node=PPOConfig)


def compose_config(config_name: str = SCHEMA_NAME, overrides: Iterable[str] = (),
                   config_dir: Optional[str | os.PathLike] = None) -> DictConfig:
    """Compose `config_name` from `config_dir` (default: ours) with command-line `overrides`."""
    directory = Path(config_dir).resolve() if config_dir else CONFIG_DIR
    if not directory.is_dir():
        raise ConfigError(f"config directory {str(directory)!r} does not exist; check --config-path")
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(config_dir=str(directory), version_base=None):
            return compose(config_name=config_name, overrides=list(overrides))
    except (HydraException, OmegaConfBaseException) as error:
        raise ConfigError(_explain(error)) from None
    finally:
        GlobalHydra.instance().clear()


def to_config(cfg: DictConfig) -> PPOConfig:
    """Resolve interpolations and build the typed config, running every section's checks."""
    try:
        return OmegaConf.to_object(cfg)
    except ConfigError:
        raise
    except (OmegaConfBaseException, ValueError, TypeError) as error:
        cause = error.__cause__ if isinstance(error.__cause__, ConfigError) else error
        raise ConfigError(_explain(cause)) from None


def load_config(overrides: Iterable[str] = (), config_name: str = SCHEMA_NAME,
                config_dir: Optional[str | os.PathLike] = None) -> PPOConfig:
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
    close = difflib.get_close_matches(key, config_keys(), n=1, cutoff=0.6)
    return f" Did you mean {close[0]!r}?" if close else ""


_UNKNOWN_KEY = re.compile(r"Key '([^']+)' (?:is )?not in (?:struct|'?\w+'?)")
_FULL_KEY = re.compile(r"full_key: ([\w.\[\]]+)")
_OVERRIDE = re.compile(r"Could not (?:override|append to config\. An item is already at) '([^']+)'")


def _explain(error: BaseException) -> str:
    """One line out of Hydra/OmegaConf's multi-line messages, with a key suggestion for typos."""
    if error.__cause__ is not None:  # Hydra wraps OmegaConf's precise message
        return _explain(error.__cause__)
    text = str(error)
    full = _FULL_KEY.search(text) or _OVERRIDE.search(text)
    if _UNKNOWN_KEY.search(text) and full:
        key = full.group(1)
        return f"unknown config key {key!r}.{suggest_key(key)} (add a '+' only for keys the schema lacks on purpose)"
    first = text.strip().splitlines()[0] if text.strip() else type(error).__name__
    where = f" (key {full.group(1)})" if full and full.group(1) not in first else ""
    return f"{first}{where}"
