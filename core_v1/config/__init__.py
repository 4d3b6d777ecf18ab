"""Configuration: the typed schema (`schema.py`), Hydra composition and loading (`loader.py`).

The loader's names are imported on first use: importing it registers the schema with Hydra and
imports Hydra (~0.7 s), which the worker processes that only read the typed schema (agent-loop
workers, training ranks) never need.
"""

from typing import TYPE_CHECKING, Any

from core_v1.config.schema import ConfigError, PPOConfig, unsupported_features

if TYPE_CHECKING:
    from core_v1.config.loader import compose_config, config_keys, load_config, to_config

_LOADER_NAMES = ("compose_config", "config_keys", "load_config", "to_config")

__all__ = [
    "ConfigError",
    "PPOConfig",
    "compose_config",
    "config_keys",
    "load_config",
    "to_config",
    "unsupported_features",
]


def __getattr__(name: str) -> Any:
    if name in _LOADER_NAMES:
        from core_v1.config import loader

        return getattr(loader, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
