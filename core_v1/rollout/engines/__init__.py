"""Generation engines behind `LLMServer`: `hf` (built in) and `vllm` (optional)."""

from core_v1.rollout.engines.base import InferenceEngine
from core_v1.rollout.engines.registry import ENGINES, get_engine_cls, register_engine

__all__ = ["ENGINES", "InferenceEngine", "get_engine_cls", "register_engine"]
