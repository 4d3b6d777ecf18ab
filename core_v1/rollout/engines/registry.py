"""Rollout engines by name (`actor_rollout_ref.rollout.name`).

`hf` is built in. `vllm` is registered when its module is imported, which needs the optional
vllm package; `get_engine_cls("vllm")` imports it on demand and says how to install it if absent.
"""

from __future__ import annotations

import importlib
import importlib.util

from core_v1.rollout.engines.base import InferenceEngine
from core_v1.utils.registry import Registry

ENGINES: Registry[type[InferenceEngine]] = Registry(
    "rollout engine", base=InferenceEngine, config_key="actor_rollout_ref.rollout.name"
)

# Engines whose module imports an optional dependency: imported only when asked for by name.
_OPTIONAL_ENGINE_MODULES = {"vllm": "core_v1.rollout.engines.vllm"}


def register_engine(name: str):
    """Class decorator: `@register_engine("name")` on an `InferenceEngine` subclass."""
    return ENGINES.register(name)


def engine_problems(name: str, device: str) -> list[str]:
    """What this machine lacks to start engine `name` on `device`, found without importing it (so a
    run can stop with one line before Ray starts instead of in a dead replica actor)."""
    if name == "vllm":
        if device == "auto":
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        if importlib.util.find_spec("vllm") is None:
            return [
                "actor_rollout_ref.rollout.name=vllm needs the vllm package, which is not installed here: "
                "pip install 'rlbridge[vllm]' on a CUDA machine, or use actor_rollout_ref.rollout.name=hf"
            ]
        if not device.startswith("cuda"):
            return [
                f"actor_rollout_ref.rollout.name=vllm runs on CUDA GPUs only, and this run uses device "
                f"{device!r}; use actor_rollout_ref.rollout.name=hf"
            ]
    return []


def get_engine_cls(name: str) -> type[InferenceEngine]:
    """The engine class registered as `name`, importing an optional engine's module on demand."""
    if name not in ENGINES and name in _OPTIONAL_ENGINE_MODULES:
        importlib.import_module(_OPTIONAL_ENGINE_MODULES[name])
    if name not in ENGINES:
        importlib.import_module("core_v1.rollout.engines.hf")  # registers the built-in engine
    return ENGINES.get(name)
