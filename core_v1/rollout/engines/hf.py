"""The built-in `hf` engine: a batched decode loop over a transformers causal LM.

Why not transformers' own paths: one padded `generate` cannot admit requests mid-flight, drop
finished rows, abort, or seed per request, and every row runs to the longest. Its continuous-
batching manager schedules well but samples from one stateful generator (no per-request,
position-indexed seeds, so no exact partial-rollout resume) and offers no preempt-and-resume on
sleep. So this engine runs its own loop; benchmarks/rollout_engine.py compares all three.

    forever, on one worker thread:
        run queued commands (new requests, abort, sleep/wake, weight updates)   <- between windows
        admit waiting requests: prefill them together, sample their first token
        decode a window of steps for all running rows (as many as the smallest remaining budget,
            at most `sync_interval`), read the tokens back once, retire rows that finished

A row that meets a stop token or its budget inside a window decodes on to the window's end
(the batch costs the same per step either way); those extra tokens are dropped. How rows are stored and run is the runner's business (`runners.py`): fixed KV slots,
the model's layers run directly and CUDA-graph decode steps on CUDA (`kv_cache="slots"`), or
transformers' forward over a growing DynamicCache (`kv_cache="dynamic"`, the CPU default).

Everything that touches the model or the batch happens on that thread, so there are no locks
around the model; the asyncio side submits commands and awaits futures.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, GenerationConfig

from core_v1.rollout.engines.base import InferenceEngine, NamedTensors
from core_v1.rollout.engines.fused_decode import FUSED_DECODE_CHOICES, fused_unsupported_reason, triton_missing
from core_v1.rollout.engines.kv_batch import check_cache_layout
from core_v1.rollout.engines.registry import register_engine
from core_v1.rollout.engines.runners import DynamicRunner, SlotRunner, slot_capacity
from core_v1.rollout.engines.slot_decoder import unsupported_reason
from core_v1.rollout.types import RolloutError, SamplingParams, StopReason, TokenOutput
from core_v1.utils.vision import is_vision_config

KV_CACHE_CHOICES = ("auto", "slots", "dynamic")


class WeightUpdateError(RolloutError):
    """`update_weights` got a name or shape the model does not have."""


@dataclass(eq=False)  # a request is one live entity: compared by identity, never field by field
class _Request:
    """One request's state while it lives in the engine."""

    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    token_budget: int  # tokens it may still generate: min(max_tokens, context left)
    seed: int  # params.seed, or one drawn by the engine: every row samples by (seed, position)
    result: concurrent.futures.Future = field(default_factory=concurrent.futures.Future)
    token_ids: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    min_version: int | None = None
    max_version: int | None = None
    multi_modal_inputs: dict[str, torch.Tensor] | None = None  # the prompt's images (a vision-language model)

    @property
    def sequence(self) -> list[int]:
        """What a (re-)prefill feeds: the prompt and every token generated so far."""
        return self.prompt_ids + self.token_ids

    @property
    def next_position(self) -> int:
        """Response index of the next token, for position-seeded sampling."""
        return self.params.seed_offset + len(self.token_ids)


@dataclass
class EngineStats:
    """Counters of what the decode loop did (read from other threads as a snapshot)."""

    prefill_cohorts: int = 0
    """Prefill forwards; requests admitted together share one."""
    decode_steps: int = 0
    """Decode steps (each one forward of every running row)."""
    generated_tokens: int = 0
    peak_batch_size: int = 0
    """Most rows decoding at once."""
    prefill_seconds: float = 0.0
    """Wall time in prefill calls (each ends with the first tokens read back)."""
    decode_seconds: float = 0.0
    """Wall time in decode windows (graph captures included), each ending with its tokens read back."""


@register_engine("hf")
class HFEngine(InferenceEngine):
    """transformers `AutoModelForCausalLM` behind a batched, abortable decode loop.

    model_path: a local directory (or hub id) for `from_pretrained`. device: "cpu", "cuda", ...
    (default: cuda if available). dtype: passed to `from_pretrained` ("auto" keeps the saved one).
    max_num_seqs: most rows decoding at once; more requests wait. max_model_len: context limit
    (default: the config's max_position_embeddings). seed: draws the seeds of requests without
    their own. kv_cache: "slots" (fixed KV slots, the layers run directly, CUDA graphs; Llama-family
    models and the Qwen2-VL, Qwen2.5-VL and Qwen3-VL families, whose prompts are prefilled by the
    model's own forward), "dynamic" (transformers' forward over a DynamicCache) or "auto" (slots on CUDA when the
    model allows, else dynamic). gpu_memory_utilization: fraction of the device's memory (host RAM
    on CPU) the slots may fill with the weights; it caps the slots below max_num_seqs when short.
    enforce_eager: no CUDA graphs. max_num_batched_tokens: padded tokens per prefill forward (slots;
    the dynamic runner prefills each admitted cohort in one forward).
    sync_interval: most decode steps between two reads of the sampled tokens by the host.
    offload_on_sleep: move the weights to the CPU during `sleep` (accelerators only).
    fused_decode: the slots runner's decode forward: "off" (plain PyTorch kernels), "compile"
    (`torch.compile` of the step, CPU or CUDA) or "triton" (hand-written Triton kernels, CUDA);
    see `fused_decode.py`. On, it picks the slots runner under kv_cache="auto" on any device.
    From a trainer config: actor_rollout_ref.rollout.engine_kwargs.fused_decode=compile.
    """

    def __init__(
        self,
        model_path: str,
        *,
        device: str | None = None,
        dtype: str | torch.dtype = "auto",
        max_num_seqs: int = 256,
        max_model_len: int | None = None,
        attn_implementation: str | None = None,
        seed: int = 0,
        kv_cache: str = "auto",
        gpu_memory_utilization: float = 0.5,
        enforce_eager: bool = False,
        max_num_batched_tokens: int = 8192,
        sync_interval: int = 16,
        offload_on_sleep: bool = True,
        fused_decode: str = "off",
    ):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if kv_cache not in KV_CACHE_CHOICES:
            raise RolloutError(f"kv_cache must be one of {', '.join(KV_CACHE_CHOICES)}, got {kv_cache!r}")
        if max_num_seqs < 1 or sync_interval < 1:
            raise RolloutError(f"max_num_seqs and sync_interval must be >= 1, got {max_num_seqs}, {sync_interval}")
        _check_fused_decode(fused_decode, kv_cache, self.device)
        load_kwargs: dict[str, Any] = {"dtype": dtype}
        if attn_implementation is not None:
            load_kwargs["attn_implementation"] = attn_implementation
        self.model = _auto_class(model_path).from_pretrained(model_path, **load_kwargs).to(self.device).eval()
        self.takes_images = is_vision_config(self.model.config)
        self.eos_token_ids = _eos_token_ids(self.model, model_path)
        self.max_model_len = max_model_len or self.model.config.get_text_config().max_position_embeddings
        self.sync_interval = sync_interval
        self.offload_on_sleep = offload_on_sleep
        self.runner = self._make_runner(
            kv_cache, max_num_seqs, gpu_memory_utilization, enforce_eager, max_num_batched_tokens, fused_decode
        )
        self.max_num_seqs = self.runner.capacity
        self._seeds = random.Random(seed)
        self.stats = EngineStats()
        self._version = 0
        self._asleep = False
        self._waiting: collections.deque[_Request] = collections.deque()
        self._running: list[_Request] = []
        self._commands: collections.deque[tuple[Callable[[], Any], concurrent.futures.Future]] = collections.deque()
        self._wakeup = threading.Condition()
        self._stopped = False
        self._thread = threading.Thread(target=self._worker_loop, name="hf-engine", daemon=True)
        self._thread.start()

    def _make_runner(
        self,
        kv_cache: str,
        max_num_seqs: int,
        memory_fraction: float,
        enforce_eager: bool,
        max_num_batched_tokens: int,
        fused_decode: str,
    ) -> DynamicRunner | SlotRunner:
        reason = unsupported_reason(self.model)
        if fused_decode != "off":
            reason = reason or fused_unsupported_reason(self.model, fused_decode)
            if reason:
                raise RolloutError(
                    f"fused_decode={fused_decode!r} cannot run this model: {reason}; use fused_decode='off'"
                )
        if kv_cache == "slots" and reason:
            raise RolloutError(f"kv_cache='slots' cannot run this model: {reason}; use kv_cache='dynamic'")
        slots_by_default = self.device.type == "cuda" or fused_decode != "off"
        if kv_cache == "dynamic" or (kv_cache == "auto" and (reason or not slots_by_default)):
            check_cache_layout(self.model)
            return DynamicRunner(self.model, self.device, max_num_seqs)
        slot_length = self.max_model_len + self.sync_interval  # room for a window past the context limit
        slots = slot_capacity(
            self.model,
            self.device,
            max_num_seqs=max_num_seqs,
            slot_length=slot_length,
            memory_fraction=memory_fraction,
            max_num_batched_tokens=max_num_batched_tokens,
        )
        return SlotRunner(
            self.model,
            self.device,
            num_slots=slots,
            slot_length=slot_length,
            max_num_batched_tokens=max_num_batched_tokens,
            cuda_graphs=not enforce_eager,
            fused_decode=fused_decode,
        )

    def kv_cache_bytes(self) -> int:
        """Bytes of K/V storage held now (0 while asleep or idle with the dynamic runner)."""
        return self.runner.kv_bytes()

    # ---- asyncio side ------------------------------------------------------------------------

    @property
    def weight_version(self) -> int:
        return self._version

    def num_requests(self) -> int:
        """Requests waiting or decoding (read from another thread: a snapshot)."""
        return len(self._waiting) + len(self._running)

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        multi_modal_inputs: Optional[Mapping[str, torch.Tensor]] = None,
    ) -> TokenOutput:
        if multi_modal_inputs and not self.takes_images:
            raise RolloutError(
                f"request {request_id!r} carries images, but {type(self.model).__name__} has no "
                "vision tower; use a vision-language model or drop data.image_key"
            )
        if not prompt_ids:
            raise RolloutError(f"request {request_id!r} has an empty prompt; give at least one token id")
        if len(prompt_ids) >= self.max_model_len:
            raise RolloutError(
                f"request {request_id!r}: prompt of {len(prompt_ids)} tokens leaves no room in the "
                f"context of {self.max_model_len}; shorten it or raise max_model_len"
            )
        room = self.max_model_len - len(prompt_ids)
        stop_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        request = _Request(
            request_id,
            list(prompt_ids),
            params,
            stop_ids,
            token_budget=room if params.max_tokens is None else min(room, params.max_tokens),
            seed=params.seed if params.seed is not None else self._seeds.getrandbits(63),
            multi_modal_inputs=_on_device(multi_modal_inputs, self.device),
        )
        try:
            await self._call(lambda: self._enqueue(request))
            return await asyncio.wrap_future(request.result)
        except asyncio.CancelledError:
            self._submit(lambda: self._abort([request]))  # the caller gave up: free its row
            raise

    async def abort_all(self) -> int:
        return await self._call(lambda: self._abort(list(self._running) + list(self._waiting)))

    async def sleep(self) -> None:
        await self._call(self._sleep)

    async def wake_up(self) -> None:
        await self._call(self._wake_up)

    async def update_weights(self, named_tensors: NamedTensors, version: int) -> None:
        await self._call(lambda: self._load_weights(named_tensors, version))

    def shutdown(self) -> None:
        if self._stopped:
            return

        def stop() -> None:
            self._abort(list(self._running) + list(self._waiting))
            self._stopped = True

        self._submit(stop)
        self._thread.join(timeout=30)

    async def _call(self, fn: Callable[[], Any]) -> Any:
        return await asyncio.wrap_future(self._submit(fn))

    def _submit(self, fn: Callable[[], Any]) -> concurrent.futures.Future:
        """Queue `fn` to run on the worker thread between steps; returns its future."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._wakeup:
            if self._stopped:
                raise RolloutError("the hf engine was shut down")
            self._commands.append((fn, future))
            self._wakeup.notify()
        return future

    # ---- worker thread -----------------------------------------------------------------------

    @torch.inference_mode()  # commands too: they move K/V rows, which are inference tensors
    def _worker_loop(self) -> None:
        while not self._stopped:
            self._run_commands()
            if self._has_work():
                try:
                    self._step()
                except Exception as err:  # a broken step must fail its requests, not hang them
                    self._fail(list(self._running) + list(self._waiting), err)

    def _has_work(self) -> bool:
        return not self._asleep and bool(self._waiting or self._running)

    def _run_commands(self) -> None:
        with self._wakeup:
            while not self._commands and not self._has_work() and not self._stopped:
                self._wakeup.wait()
            commands = list(self._commands)
            self._commands.clear()
        for fn, future in commands:
            if not future.set_running_or_notify_cancel():
                continue  # its caller was cancelled before the command ran
            try:
                future.set_result(fn())
            except Exception as err:
                future.set_exception(err)

    def _enqueue(self, request: _Request) -> None:
        # Marking the result future running makes it uncancellable from the event loop, so only
        # this thread ever completes it; a cancelled caller's row is dropped by its abort command.
        if request.result.set_running_or_notify_cancel():
            self._waiting.append(request)

    def _step(self) -> None:
        if self._waiting and len(self._running) < self.max_num_seqs:
            self._admit_waiting()
        if self._running:
            self._decode()

    def _admit_waiting(self) -> None:
        admit = min(len(self._waiting), self.max_num_seqs - len(self._running))
        cohort = [self._waiting.popleft() for _ in range(admit)]
        ready = []
        for request in cohort:
            if request.token_budget > len(request.token_ids):
                ready.append(request)
            else:  # max_tokens=0, or a preempted request that had just run out
                self._finish(request, "length")
        if not ready:
            return
        started = time.perf_counter()
        try:
            tokens, log_probs = self.runner.prefill(ready)
        except Exception as err:  # the cohort left the queue: failing only the queue would hang it
            self._fail(ready, err)
            raise
        self.stats.prefill_seconds += time.perf_counter() - started
        self._running.extend(ready)
        self.stats.prefill_cohorts += 1
        self.stats.peak_batch_size = max(self.stats.peak_batch_size, len(self._running))
        finished = {
            row
            for row, (request, token, log_prob) in enumerate(
                zip(ready, tokens, log_probs), start=len(self._running) - len(ready)
            )
            if self._record(request, token, log_prob)
        }
        self._retire(finished)

    def _decode(self) -> None:
        """One window of `sync_interval` steps (fewer once every row needs fewer), read back once;
        each row's tokens are recorded up to where it stopped, the rest of its window dropped."""
        steps = min(self.sync_interval, max(r.token_budget - len(r.token_ids) for r in self._running))
        started = time.perf_counter()
        tokens, log_probs = self.runner.decode(self._running, steps)
        self.stats.decode_seconds += time.perf_counter() - started
        self.stats.decode_steps += steps
        finished = set()
        for row, request in enumerate(self._running):
            for step in range(steps):
                if self._record(request, tokens[step][row], log_probs[step][row]):
                    finished.add(row)
                    break
        self._retire(finished)

    def _record(self, request: _Request, token: int, log_prob: float) -> StopReason | None:
        """Append one sampled token (its log-prob and weight version); returns why the request
        ends with it, or None."""
        request.token_ids.append(token)
        if request.params.logprobs:
            request.log_probs.append(log_prob)
        request.min_version = self._version if request.min_version is None else request.min_version
        request.max_version = self._version
        self.stats.generated_tokens += 1
        if token in request.stop_ids:
            return "stop"
        if len(request.token_ids) >= request.token_budget:
            return "length"
        return None

    def _retire(self, finished: set[int]) -> None:
        """Finish the rows at indices `finished` (by their last token) and drop them from the batch."""
        if not finished:
            return
        for row in finished:
            request = self._running[row]
            self._finish(request, "stop" if request.token_ids[-1] in request.stop_ids else "length")
        self._drop_rows([row for row in range(len(self._running)) if row not in finished])

    def _drop_rows(self, keep: list[int]) -> None:
        order = self.runner.retain(keep)
        self._running = [self._running[row] for row in order]

    def _abort(self, requests: list[_Request]) -> int:
        aborted = [r for r in requests if not r.result.done()]
        for request in aborted:
            self._finish(request, "aborted")
        self._forget(aborted)
        return len(aborted)

    def _fail(self, requests: list[_Request], err: Exception) -> None:
        for request in requests:
            if not request.result.done():
                request.result.set_exception(err)
        self._forget(requests)

    def _forget(self, requests: list[_Request]) -> None:
        gone = {id(r) for r in requests}
        self._waiting = collections.deque(r for r in self._waiting if id(r) not in gone)
        keep = [row for row, r in enumerate(self._running) if id(r) not in gone]
        if len(keep) != len(self._running):
            self._drop_rows(keep)

    def _finish(self, request: _Request, reason: StopReason) -> None:
        version = self._version
        request.result.set_result(
            TokenOutput(
                token_ids=list(request.token_ids),
                log_probs=list(request.log_probs),
                stop_reason=reason,
                min_weight_version=version if request.min_version is None else request.min_version,
                max_weight_version=version if request.max_version is None else request.max_version,
            )
        )

    def _sleep(self) -> None:
        # Running rows go back to the front of the queue with their tokens so far; after wake_up
        # they are re-prefilled and continue exactly (position-seeded sampling).
        self._waiting.extendleft(reversed(self._running))
        self._running = []
        self.runner.release()
        self._asleep = True
        if self.offload_on_sleep and self.device.type != "cpu":
            self.model.to("cpu")
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _wake_up(self) -> None:
        if self._asleep and self.offload_on_sleep and self.device.type != "cpu":
            self.model.to(self.device)
        self._asleep = False

    def _load_weights(self, named_tensors: NamedTensors, version: int) -> None:
        """Check every (name, tensor) first, then copy: a bad update leaves the weights untouched."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise WeightUpdateError(f"weight version must be an int, got {version!r}")
        targets = dict(
            itertools.chain(
                self.model.named_parameters(remove_duplicate=False), self.model.named_buffers(remove_duplicate=False)
            )
        )
        updates = list(named_tensors)
        for name, tensor in updates:
            target = targets.get(name)
            if target is None:
                raise WeightUpdateError(
                    f"update_weights: the model has no parameter {name!r} "
                    f"(e.g. {', '.join(list(targets)[:3])}); send names from the same architecture"
                )
            if tuple(target.shape) != tuple(tensor.shape):
                raise WeightUpdateError(
                    f"update_weights: {name!r} has shape {tuple(tensor.shape)}, the model expects {tuple(target.shape)}"
                )
        with torch.no_grad():
            for name, tensor in updates:
                targets[name].copy_(tensor, non_blocking=True)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self._version = version


def _check_fused_decode(mode: str, kv_cache: str, device: torch.device) -> None:
    if mode not in FUSED_DECODE_CHOICES:
        raise RolloutError(f"fused_decode must be one of {', '.join(FUSED_DECODE_CHOICES)}, got {mode!r}")
    if mode != "off" and kv_cache == "dynamic":
        raise RolloutError(
            f"fused_decode={mode!r} runs on the slots runner; set kv_cache='slots' or 'auto', or fused_decode='off'"
        )
    if mode == "triton" and (device.type != "cuda" or triton_missing()):
        missing = triton_missing() or f"the device is {device.type}, not cuda"
        raise RolloutError(
            f"fused_decode='triton' needs a CUDA device with Triton ({missing}); use fused_decode='compile'"
        )


def _auto_class(model_path: str) -> type:
    """transformers' auto class for the checkpoint: vision-language models load with their LM head
    through `AutoModelForImageTextToText`, which `AutoModelForCausalLM` does not map."""
    try:
        config = AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError):
        return AutoModelForCausalLM  # let from_pretrained report what is wrong with the path
    return AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM


def _on_device(inputs: Optional[Mapping[str, torch.Tensor]], device: torch.device) -> dict | None:
    return None if not inputs else {key: torch.as_tensor(value).to(device) for key, value in inputs.items()}


def _eos_token_ids(model: Any, model_path: str) -> frozenset[int]:
    """EOS ids from the model config and, where saved, generation_config.json (which may list several)."""
    ids: set[int] = set()
    configs = [model.config, getattr(model, "generation_config", None)]
    try:
        configs.append(GenerationConfig.from_pretrained(model_path))
    except OSError:
        pass  # no generation_config.json saved
    for config in configs:
        eos = getattr(config, "eos_token_id", None)
        if eos is not None:
            ids.update([eos] if isinstance(eos, int) else eos)
    return frozenset(ids)
