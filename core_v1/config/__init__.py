"""Configuration: the typed schema (`schema.py`), Hydra composition and loading (`loader.py`)."""

from core_v1.config.loader import compose_config, config_keys, load_config, to_config
from core_v1.config.schema import ConfigError, PPOConfig, unsupported_features

__all__ = [
    "ConfigError",
    "PPOConfig",
    "compose_config",
    "config_keys",
    "load_config",
    "to_config",
    "unsupported_features",
]
