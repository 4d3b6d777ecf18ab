"""Rollout engines by name (`actor_rollout_ref.rollout.name`).

`hf` is built in. `vllm` is registered when its module is imported, which needs the optional
vllm package; `get_engine_cls("vllm")` imports it on demand and says how to install it if absent.
"""

from __future__ import annotations

import importlib

from core_v1.rollout.engines.base import InferenceEngine
from core_v1.utils.registry import Registry

ENGINES: Registry[type[InferenceEngine]] = Registry(
    "rollout engine", base=InferenceEngine, config_key="actor_rollout_ref.rollout.name")

# Engines whose module imports an optional dependency: imported only when asked for by name.
_OPTIONAL_ENGINE_MODULES = {"vllm": "core_v1.rollout.engines.vllm"}


def register_engine(name: str):
    """Class decorator: `@register_engine("name")` on an `InferenceEngine` subclass."""
    return ENGINES.register(name)


def get_engine_cls(name: str) -> type[InferenceEngine]:
    """The engine class registered as `name`, importing an optional engine's module on demand."""
    if name not in ENGINES and name in _OPTIONAL_ENGINE_MODULES:
        importlib.import_module(_OPTIONAL_ENGINE_MODULES[name])
    if name not in ENGINES:
        importlib.import_module("core_v1.rollout.engines.hf")  # registers the built-in engine
    return ENGINES.get(name)
