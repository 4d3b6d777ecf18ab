"""The optional `vllm` engine: vLLM's `AsyncLLM` behind the `InferenceEngine` interface.

Importing this module needs the vllm package (GPU machines: `pip install 'rlbridge[vllm]'`);
without it the import fails with a message naming the install command and the `hf` fallback, and
a run that asks for this engine stops before Ray starts (`registry.engine_problems`).
Written against vLLM 0.33's v1 API (`AsyncLLM.from_engine_args`, `generate` with a
`TokensPrompt`, `abort`, `sleep(level, mode)`/`wake_up(tags)`, `collective_rpc` through a worker
extension); tests/core_v1/rollout/test_vllm_api.py checks every call and keyword here against
vLLM's source (installed, or a downloaded wheel), since vLLM cannot run on our machines.

Sleep is level 1 with mode "keep": weights go to host memory, the KV cache is dropped, and
running requests are frozen (vLLM's default mode would abort them) and continue after `wake_up`.
A weight update while asleep first wakes the weights alone (`wake_up(tags=["weights"])`): at level
1 the GPU weights are unmapped, and the copy vLLM restores at wake-up would overwrite the update.

Differences from the `hf` engine, by vLLM's design:
- a request's `seed` seeds a per-request stream, so a partial-rollout resume is not bit-identical
  to an uninterrupted run (it is with `hf`, which seeds by (seed, position));
- `seed_offset` is not passed on (vLLM has no such notion);
- log-probs are vLLM's `processed_logprobs` (after temperature, and after top-k/top-p when set).

A request with images (a Qwen2-VL-family model) goes to vLLM as `TokensPrompt(prompt_token_ids,
multi_modal_data={"image": [...]})`: the images rebuilt from the request's processed inputs, one
placeholder id per image (`core_v1.rollout.engines.vllm_images` says why); a request with a video is
refused. This path is written from vLLM's documented API and source; neither machine the project is
developed on can install vLLM, so no engine has generated from it. test_vllm_images.py tests the
conversion; test_vllm_api.py checks the `TokensPrompt` keywords against vLLM's source and, where vllm
imports, runs vLLM's own (CPU-side) Qwen2-VL multimodal processor on the prompt this engine builds.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

try:
    import vllm
    from vllm.v1.engine.async_llm import AsyncLLM
except ImportError as err:  # pragma: no cover - depends on the machine
    raise ImportError(
        "the 'vllm' rollout engine needs the vllm package: pip install 'rlbridge[vllm]' "
        "(GPU only); or use the built-in engine, actor_rollout_ref.rollout.name=hf"
    ) from err

from core_v1.rollout.engines.base import InferenceEngine, NamedTensors
from core_v1.rollout.engines.registry import register_engine
from core_v1.rollout.engines.vllm_images import ImagePatchLayout, load_image_layout, vllm_prompt
from core_v1.rollout.types import RolloutError, SamplingParams, StopReason, TokenOutput

_FINISH_REASONS: dict[str | None, StopReason] = {"stop": "stop", "length": "length", "abort": "aborted"}


class WeightLoadingExtension:
    """Mixed into each vLLM worker (engine arg `worker_extension_cls`): loads (name, tensor) pairs
    into the worker's model through the model's own `load_weights`, which knows its fused layouts."""

    def rlbridge_load_weights(self, named_tensors: list[tuple[str, Any]]) -> None:
        self.model_runner.model.load_weights(weights=named_tensors)


@register_engine("vllm")
class VLLMEngine(InferenceEngine):
    """vLLM `AsyncLLM` for one replica; `engine_kwargs` go to `vllm.AsyncEngineArgs`, except
    `device`: vLLM picks its platform itself (it has no such argument), so only "cuda" is accepted."""

    def __init__(self, model_path: str, device: str | None = None, **engine_kwargs: Any):
        if device not in (None, "cuda") and not str(device).startswith("cuda:"):
            raise RolloutError(
                f"the vllm engine runs on CUDA GPUs only, not device={device!r}; use actor_rollout_ref.rollout.name=hf"
            )
        engine_kwargs.setdefault("enable_sleep_mode", True)
        engine_kwargs.setdefault("logprobs_mode", "processed_logprobs")
        engine_kwargs["worker_extension_cls"] = f"{__name__}.{WeightLoadingExtension.__qualname__}"
        self._model_path, self._trust_remote_code = model_path, bool(engine_kwargs.get("trust_remote_code"))
        self._engine = AsyncLLM.from_engine_args(vllm.AsyncEngineArgs(model=model_path, **engine_kwargs))
        self._version = 0
        self._in_flight: set[str] = set()
        self._asleep = False
        self._weights_awake = True

    @property
    def weight_version(self) -> int:
        return self._version

    async def generate(
        self, request_id: str, prompt_ids: list[int], params: SamplingParams, multi_modal_inputs: Any = None
    ) -> TokenOutput:
        prompt = self._prompt(prompt_ids, multi_modal_inputs)
        first_version = self._version
        final = None
        self._in_flight.add(request_id)
        try:
            async for output in self._engine.generate(prompt, _to_vllm_params(params), request_id):
                final = output.outputs[0]
        finally:
            self._in_flight.discard(request_id)
        token_ids = list(final.token_ids) if final is not None else []
        log_probs = []
        if params.logprobs and final is not None and final.logprobs:
            log_probs = [step[token].logprob for step, token in zip(final.logprobs, token_ids)]
        reason = _FINISH_REASONS.get(final.finish_reason if final is not None else "abort", "aborted")
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason=reason,
            min_weight_version=first_version,
            max_weight_version=self._version,
        )

    def _prompt(self, prompt_ids: list[int], multi_modal_inputs: Mapping[str, Any] | None) -> "vllm.TokensPrompt":
        if not multi_modal_inputs:
            return vllm.TokensPrompt(prompt_token_ids=list(prompt_ids))
        # On the event loop, not in a thread: LLMServer needs no await between its gate and the
        # engine's queue (an abort_all after the gate must find the request). A 1000x1000 image took
        # 46 ms to rebuild here, where transformers' processor took 138 ms to make its patches.
        fields = vllm_prompt(prompt_ids, multi_modal_inputs, self._image_layout)
        return vllm.TokensPrompt(
            prompt_token_ids=fields["prompt_token_ids"], multi_modal_data=fields["multi_modal_data"]
        )

    @functools.cached_property
    def _image_layout(self) -> ImagePatchLayout | None:
        # Read on the first request with images, so that a text run never loads an image processor.
        return load_image_layout(self._model_path, self._trust_remote_code)

    async def abort_all(self) -> int:
        request_ids = list(self._in_flight)
        if request_ids:
            await self._engine.abort(request_ids)
        return len(request_ids)

    async def sleep(self) -> None:
        # Level >= 1 clears vLLM's prefix cache itself (cached prefixes would be stale after an update).
        await self._engine.sleep(level=1, mode="keep")
        self._asleep, self._weights_awake = True, False

    async def wake_up(self) -> None:
        if self._asleep:
            await self._engine.wake_up(tags=None if not self._weights_awake else ["kv_cache"])
        self._asleep, self._weights_awake = False, True

    async def update_weights(self, named_tensors: NamedTensors, version: int) -> None:
        if not self._weights_awake:
            await self._engine.wake_up(tags=["weights"])
            self._weights_awake = True
        await self._engine.collective_rpc("rlbridge_load_weights", args=(list(named_tensors),))
        if not self._asleep:  # asleep, the cache is empty already
            await self._engine.reset_prefix_cache()
        self._version = version

    def shutdown(self) -> None:
        self._engine.shutdown()


def _to_vllm_params(params: SamplingParams) -> "vllm.SamplingParams":
    return vllm.SamplingParams(
        temperature=params.temperature,
        top_p=params.top_p,
        top_k=params.top_k,
        max_tokens=params.max_tokens,
        stop_token_ids=list(params.stop_token_ids),
        seed=params.seed,
        ignore_eos=params.ignore_eos,
        logprobs=0 if params.logprobs else None,
    )
