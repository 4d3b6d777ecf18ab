"""LLM server replicas and the client agent loops call (docs/design.md).

    server = LLMServer.from_model(model_path)                       # in-process, hf engine
    group = RolloutReplicaGroup(model_path, num_replicas=2)         # Ray actors
    client = FullyAsyncLLMServerClient(group.replicas)              # or LLMServerClient
    out = await client.generate(request_id, prompt_ids, {"temperature": 1.0, "max_tokens": 64})
    out.token_ids, out.log_probs, out.stop_reason, out.min_weight_version, out.max_weight_version

`RolloutReplica`/`RolloutReplicaGroup` live in `core_v1.rollout.replica` (imports Ray).
"""

from core_v1.rollout.client import FullyAsyncLLMServerClient, LLMServerClient
from core_v1.rollout.engines import ENGINES, InferenceEngine, get_engine_cls, register_engine
from core_v1.rollout.server import LLMServer
from core_v1.rollout.types import RolloutError, SamplingParams, SamplingParamsError, StopReason, TokenOutput

__all__ = [
    "ENGINES",
    "FullyAsyncLLMServerClient",
    "InferenceEngine",
    "LLMServer",
    "LLMServerClient",
    "RolloutError",
    "SamplingParams",
    "SamplingParamsError",
    "StopReason",
    "TokenOutput",
    "get_engine_cls",
    "register_engine",
]
