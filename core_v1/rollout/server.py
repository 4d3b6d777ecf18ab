"""`LLMServer`: one model replica serving generate requests, with the controls a trainer needs.

Admission lifecycle (what happens to a request that arrives in each state):

    serving  --abort_all()-->  paused    --resume()-->   serving
    serving  --sleep()----->   asleep    --wake_up()-->  serving

- serving: the request goes to the engine at once and is batched with the others.
- paused (after `abort_all`): every in-flight request has returned with stop_reason "aborted";
  new requests wait until `resume()`. This is what partial rollout relies on: a client that
  resubmits an aborted request right away gets it run on the weights loaded before `resume()`.
- asleep: the KV cache is freed (weights offloaded on an accelerator); new requests wait until
  `wake_up()`, requests already running are held by the engine and continue after it.
- awaiting weights (after `hold_until_weights`, what a restarted replica does): it loaded the
  model from disk, not the policy being trained; new requests wait until `update_weights` (or
  `receive_weights`) brings the trainer's weights, or `confirm_weights(version)` says the ones
  from disk are current.

Every gate must be open for a request to run. Every output records the weight versions that
produced its tokens; `update_weights(buckets, version)` sets the version for every later token.
"""

from __future__ import annotations

import asyncio
import pickle
from typing import Any, AsyncIterator, Iterable, Iterator, Mapping

import torch

from core_v1.rollout.engines import InferenceEngine, get_engine_cls
from core_v1.rollout.types import RolloutError, SamplingParams, TokenOutput

WeightBuckets = Iterable[Iterable[tuple[str, torch.Tensor]]] | Iterable[tuple[str, torch.Tensor]]


class LLMServer:
    """Serve one `InferenceEngine`; all methods are coroutines except `num_running`."""

    def __init__(self, engine: InferenceEngine):
        self.engine = engine
        self._paused = False
        self._asleep = False
        self._awaiting_weights = False
        # Futures of requests held at the gate. Not an asyncio.Event: that binds to the first loop
        # that waits on it, and an in-process server may outlive several asyncio.run() calls.
        self._gate_waiters: list[asyncio.Future] = []
        self._in_flight = 0
        self._weight_receiver: Any = None  # set by join_weight_group (broadcast weight sync)

    @classmethod
    def from_model(cls, model_path: str, engine: str = "hf", **engine_kwargs: Any) -> "LLMServer":
        """Load `model_path` into the engine registered as `engine` (e.g. "hf", "vllm")."""
        return cls(get_engine_cls(engine)(model_path, **engine_kwargs))

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    def num_running(self) -> int:
        """Requests accepted and not yet returned (waiting at a gate or generating)."""
        return self._in_flight

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        multi_modal_inputs: Mapping[str, Any] | None = None,
    ) -> TokenOutput:
        """Generate a continuation of `prompt_ids` (with the prompt's images, for a vision-language
        model); waits while the server is paused or asleep."""
        params = SamplingParams.from_dict(sampling_params)
        prompt = _as_token_ids(request_id, prompt_ids)
        self._in_flight += 1
        try:
            while self._gate_closed():
                waiter = asyncio.get_running_loop().create_future()
                self._gate_waiters.append(waiter)
                await waiter
            # No await between the gate and the engine's queue: an abort_all() issued after this
            # point is queued behind the request and therefore aborts it.
            if multi_modal_inputs:
                return await self.engine.generate(request_id, prompt, params, multi_modal_inputs=multi_modal_inputs)
            return await self.engine.generate(request_id, prompt, params)
        finally:
            self._in_flight -= 1

    async def generate_batch(
        self, requests: list[tuple[str, list[int], Any]]
    ) -> AsyncIterator[list[tuple[int, TokenOutput | BaseException]]]:
        """`generate` for many requests (request_id, prompt_ids, sampling_params[, multi_modal_inputs]) at once, yielding
        the finished ones in the waves they finish: lists of (position in `requests`, output, or
        the error that request raised). What a Ray client calls with the requests of one event-loop
        turn, as one streaming call instead of one actor call per request."""
        pending = {asyncio.ensure_future(self.generate(*request)): index for index, request in enumerate(requests)}
        while pending:
            done, _ = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            yield [(pending.pop(task), _outcome(task)) for task in done]

    async def abort_all(self) -> int:
        """Return every in-flight request now with stop_reason "aborted" and hold new ones until
        `resume()`. Returns how many requests were aborted."""
        self._paused = True
        self._update_gate()
        return await self.engine.abort_all()

    async def resume(self) -> None:
        """Admit requests again after `abort_all()`."""
        self._paused = False
        self._update_gate()

    async def sleep(self) -> None:
        """Free the KV cache (and offload weights on an accelerator); hold new requests."""
        self._asleep = True
        self._update_gate()
        await self.engine.sleep()

    async def wake_up(self) -> None:
        """Reload what `sleep()` released and admit requests again."""
        await self.engine.wake_up()
        self._asleep = False
        self._update_gate()

    async def update_weights(self, buckets: WeightBuckets, version: int) -> None:
        """Load weights given as (name, tensor) pairs, flat or grouped in buckets (lists of pairs);
        every token sampled afterwards is tagged with `version`."""
        await self.engine.update_weights(iter_named_tensors(buckets), version)
        self._open_weights_gate()

    def hold_until_weights(self) -> None:
        """Hold new requests until the trainer's weights arrive (see the module docstring)."""
        self._awaiting_weights = True

    async def awaiting_weights(self) -> bool:
        return self._awaiting_weights

    async def confirm_weights(self, version: int) -> None:
        """Admit requests on the weights loaded from disk: the trainer has synced nothing since
        (`version` must be the one they carry)."""
        if version != self.weight_version:
            raise RolloutError(
                f"confirm_weights({version}): this replica holds weight version "
                f"{self.weight_version}; send the weights with update_weights instead"
            )
        self._open_weights_gate()

    def _open_weights_gate(self) -> None:
        if self._awaiting_weights:
            self._awaiting_weights = False
            self._update_gate()

    async def join_weight_group(self, group: Any) -> int:
        """Join the trainer's weight-broadcast group (`core_v1.checkpoint_engine.broadcast`, the
        `gloo`/`nccl` backends; `group` is its `WeightGroupSpec`); returns this replica's rank."""
        from core_v1.checkpoint_engine.broadcast import WeightReceiver  # only broadcast backends need it

        # The rendezvous blocks until every member joins: keep the event loop serving meanwhile.
        self._weight_receiver = await asyncio.to_thread(WeightReceiver, group)
        return self._weight_receiver.rank

    async def receive_weights(self, plan: Any, version: int) -> None:
        """Receive one broadcast of the weights (bucket layouts `plan`) and load them as `version`."""
        if self._weight_receiver is None:
            raise RolloutError("receive_weights called before join_weight_group")
        named_tensors = await asyncio.to_thread(self._weight_receiver.receive, plan)
        await self.update_weights(named_tensors, version)

    def shutdown(self) -> None:
        if self._weight_receiver is not None:
            self._weight_receiver.close()
        self.engine.shutdown()

    def _gate_closed(self) -> bool:
        return self._paused or self._asleep or self._awaiting_weights

    def _update_gate(self) -> None:
        if self._gate_closed():
            return
        waiters, self._gate_waiters = self._gate_waiters, []
        for waiter in waiters:
            waiter.get_loop().call_soon_threadsafe(_release, waiter)


def _outcome(task: asyncio.Task) -> TokenOutput | BaseException:
    """A finished request's output, or its error in a form that crosses a process boundary."""
    error = task.exception()
    if error is None:
        return task.result()
    try:
        pickle.dumps(error)
    except Exception:  # noqa: BLE001 - an error that cannot be sent: send what it said
        return RolloutError(f"{type(error).__name__}: {error}")
    return error


def _release(waiter: asyncio.Future) -> None:
    if not waiter.done():  # its request may have been cancelled meanwhile
        waiter.set_result(None)


def iter_named_tensors(buckets: WeightBuckets) -> Iterator[tuple[str, torch.Tensor]]:
    """Flatten buckets of (name, tensor) pairs; a flat sequence of pairs passes through."""
    for item in buckets:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            yield item
            continue
        for pair in item:
            if not (
                isinstance(pair, tuple)
                and len(pair) == 2
                and isinstance(pair[0], str)
                and isinstance(pair[1], torch.Tensor)
            ):
                raise RolloutError(f"update_weights expects buckets of (name, tensor) pairs, got an item {pair!r:.80}")
            yield pair


def _as_token_ids(request_id: str, prompt_ids: Any) -> list[int]:
    if isinstance(prompt_ids, torch.Tensor):
        prompt_ids = prompt_ids.tolist()
    try:
        return [int(t) for t in prompt_ids]
    except (TypeError, ValueError):
        raise RolloutError(
            f"request {request_id!r}: prompt_ids must be a list of token ids, "
            f"got {type(prompt_ids).__name__}; tokenize the prompt first"
        ) from None
