"""The client agent loops call: `await client.generate(request_id, prompt_ids, sampling_params)`.

Routing: a request id is bound to one replica the first time it is seen, and every later call
with that id (the next turn of a multi-turn session, a partial-rollout resume) goes to the same
replica, where its prefix is most likely still warm. New ids go to the replica with the fewest
requests in flight from this client. Control calls fan out to every replica.

Replicas may be local `LLMServer` objects or Ray actor handles of `RolloutReplica`; one adapter
hides the difference. Requests for a Ray replica made in the same event-loop turn share one
streaming actor call (`_batched_generate`).

A replica whose process dies loses the requests it held; they are sent again (same request, same
seed, so the same tokens where the weights are the same; in partial rollout the pieces already
returned are kept). Where they go depends on what Ray says of the replica:
- restarting (its actor was started with restarts, `RolloutReplicaGroup(max_restarts=...)`): the
  replica is set aside until it answers again, then taken back. Its requests go to the other live
  replicas meanwhile, or, with none, wait for it; a restarted replica holds them until the
  trainer's weights reach it (`core_v1.rollout.supervisor`). Control calls skip it meanwhile (the
  supervisor brings it to the trainer's state: weights, asleep, paused).
- dead: the replica is dropped, with one warning, and control calls skip it. A run goes on while
  one replica lives.
The broadcast weight-sync backends form a collective group with the replicas; a member's death
breaks it, so they wait for the restarting replicas (`wait_until_up`), regroup and send again.

`FullyAsyncLLMServerClient` adds partial rollout: a request that comes back "aborted" (because the
trainer called `abort_all` to update weights) is resubmitted as prompt + tokens so far with the
remaining budget, and the pieces are joined into one `TokenOutput`.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from typing import Any, Mapping, Sequence

from core_v1.rollout.server import LLMServer, WeightBuckets, iter_named_tensors
from core_v1.rollout.types import SamplingParams, TokenOutput
from core_v1.utils.aio import TurnBatcher, settle

logger = logging.getLogger(__name__)


class AllReplicasLostError(RuntimeError):
    """Every rollout replica died; nothing is left to generate with."""


class _ReplicaLost(Exception):
    """The replica's process is gone (raised by `_Replica.call`, handled by the client);
    `restarting` when Ray is starting it again."""

    def __init__(self, reason: str, restarting: bool = False):
        super().__init__(reason, restarting)  # the args rebuild it (`copy_of`, one per waiter)
        self.reason, self.restarting = reason, restarting

    def __str__(self) -> str:
        return self.reason


def _replica_lost(error: Exception) -> _ReplicaLost:
    from ray.exceptions import ActorUnavailableError

    reason = str(error).splitlines()[0] if str(error) else type(error).__name__
    return _ReplicaLost(reason, restarting=isinstance(error, ActorUnavailableError))


_RESTART_POLL_S = 0.2


class _Replica:
    """Calls one replica's methods the same way whether it is local or a Ray actor."""

    def __init__(self, target: Any):
        if isinstance(target, LLMServer):
            self._local = target
        elif _is_ray_actor(target):
            self._local = None
        else:
            raise TypeError(
                f"a replica must be an LLMServer or a Ray actor handle of RolloutReplica, got {type(target).__name__}"
            )
        self.target = target
        self.in_flight = 0
        self.alive = True
        self.restarting = False
        self._recovery: asyncio.Task | None = None
        self._batched = None if self._local is not None else _batched_generate(target)

    @property
    def is_local(self) -> bool:
        return self._local is not None

    async def call(self, method: str, *args: Any) -> Any:
        if self._local is not None:
            return await getattr(self._local, method)(*args)
        from ray.exceptions import RayActorError

        try:
            return await getattr(self.target, method).remote(*args)
        except RayActorError as error:
            raise _replica_lost(error) from error

    @property
    def up(self) -> bool:
        """Alive and answering (not being restarted)."""
        return self.alive and not self.restarting

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        params: SamplingParams,
        multi_modal_inputs: Mapping[str, Any] | None = None,
    ) -> TokenOutput:
        if self._local is not None:
            return await self._local.generate(request_id, prompt_ids, params, multi_modal_inputs)
        return await self._batched.submit((request_id, prompt_ids, params, multi_modal_inputs))

    async def probe(self) -> None:
        """Return once the replica answers; raise _ReplicaLost if its process is gone."""
        if self._local is None:
            await self.call("__ray_ready__")

    def recovery(self) -> asyncio.Task:
        """The task that waits for this restarting replica to answer again (one per event loop),
        then takes it back, or drops it if Ray gives up on it; it returns whether it came back."""
        loop = asyncio.get_running_loop()
        if self._recovery is None or self._recovery.done() or self._recovery.get_loop() is not loop:
            self._recovery = loop.create_task(self._wait_restarted())
        return self._recovery

    async def _wait_restarted(self) -> bool:
        while True:
            try:
                await self.probe()
            except _ReplicaLost as lost:
                if lost.restarting:
                    await asyncio.sleep(_RESTART_POLL_S)
                    continue
                self.alive = False
                logger.warning("rollout replica did not come back (%s); it is dropped", lost)
                return False
            self.restarting = False
            return True


def _batched_generate(target: Any) -> TurnBatcher:
    """Generate requests for one Ray replica made in the same event-loop turn (a step submits its
    sessions together) go as one streaming `generate_batch` call, and each comes back with the
    wave the engine finished it in. One actor call per request cost about 1 ms of CPU at each end
    (256 requests: 0.18-0.35 s against 0.01-0.02 s batched, measured on 2 cores), which was most of
    a small model's generation time. If the replica dies, every request of the call not yet
    answered raises `_ReplicaLost`, and the client sends it again elsewhere."""

    async def call(requests: list[tuple[str, list[int], SamplingParams]], futures: list[asyncio.Future]) -> None:
        from ray.exceptions import RayActorError

        try:
            stream = target.generate_batch.options(num_returns="streaming").remote(requests)
            async for wave in stream:
                for index, outcome in await wave:
                    settle(futures[index], outcome)
        except RayActorError as error:
            raise _replica_lost(error) from error

    return TurnBatcher(call)


def _is_ray_actor(obj: Any) -> bool:
    try:
        from ray.actor import ActorHandle
    except ImportError:  # Ray is a dependency, but a local-only client should not need it
        return False
    return isinstance(obj, ActorHandle)


class LLMServerClient:
    """Route generate requests over replicas: sticky per request id, else least loaded.

    `max_sticky_ids` bounds the id -> replica table (least recently used ids are forgotten).
    """

    def __init__(self, replicas: Sequence[Any], *, max_sticky_ids: int = 100_000):
        if not replicas:
            raise ValueError("LLMServerClient needs at least one replica")
        self._replicas = [_Replica(r) for r in replicas]
        self._sticky: collections.OrderedDict[str, _Replica] = collections.OrderedDict()
        self._max_sticky_ids = max_sticky_ids

    @property
    def num_replicas(self) -> int:
        """Live replicas."""
        return len(self._live())

    @property
    def restartable(self) -> bool:
        """Whether a replica may restart (a Ray actor may; a local server dies with this process)."""
        return not all(r.is_local for r in self._replicas)

    @property
    def lost_replicas(self) -> int:
        return sum(not r.alive for r in self._replicas)

    def replica(self, index: int) -> Any:
        """The replica given at position `index` (an `LLMServer` or a Ray actor handle), dead or alive."""
        return self._replicas[index].target

    def in_flight(self) -> list[int]:
        """Requests in flight from this client, per replica (in the order given; 0 for a lost one)."""
        return [r.in_flight for r in self._replicas]

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        multi_modal_inputs: Mapping[str, Any] | None = None,
    ) -> TokenOutput:
        """Generate on the replica bound to `request_id` (binding a new id to the least loaded);
        a request whose replica dies under it is sent again to a live one. `multi_modal_inputs`:
        the prompt's image inputs for a vision-language model (`core_v1.agent_loop.vision`)."""
        params = SamplingParams.from_dict(sampling_params)
        while True:
            replica = await self._pick(request_id)
            replica.in_flight += 1
            try:
                return await replica.generate(request_id, list(prompt_ids), params, multi_modal_inputs)
            except _ReplicaLost as lost:
                self._on_lost(replica, lost)
            finally:
                replica.in_flight -= 1

    def _live(self) -> list[_Replica]:
        return [r for r in self._replicas if r.alive]

    def _up(self) -> list[_Replica]:
        return [r for r in self._replicas if r.up]

    def _on_lost(self, replica: _Replica, lost: _ReplicaLost) -> None:
        """Set a restarting replica aside until it answers again; drop a dead one."""
        if not lost.restarting:
            self._lose(replica, lost)
            return
        if not replica.restarting:
            replica.restarting = True
            logger.warning(
                "rollout replica %d died (%s); Ray is restarting it, its requests wait for it or go to "
                "the %d other live replica(s)",
                self._replicas.index(replica),
                lost,
                len(self._up()),
            )
        replica.recovery()

    def _lose(self, replica: _Replica, reason: _ReplicaLost) -> None:
        if replica.alive:
            replica.alive = False
            logger.warning(
                "rollout replica %d died (%s); its requests move to the %d live replica(s)",
                self._replicas.index(replica),
                reason,
                len(self._live()),
            )
        if not self._live():
            raise AllReplicasLostError(f"every rollout replica died (last: {reason})") from reason

    async def _pick(self, request_id: str) -> _Replica:
        """The replica bound to `request_id` if it is up, else the least loaded one that is (binding
        the id to it); with none up, wait for a restarting one."""
        while True:
            replica = self._sticky.get(request_id)
            if replica is not None and replica.up:
                self._sticky.move_to_end(request_id)
                return replica
            up = self._up()
            if up:
                replica = min(up, key=lambda r: r.in_flight)  # ties: the first listed
                self._sticky[request_id] = replica
                if len(self._sticky) > self._max_sticky_ids:
                    self._sticky.popitem(last=False)
                return replica
            restarting = [r.recovery() for r in self._live()]
            if not restarting:
                raise AllReplicasLostError("every rollout replica died")
            await asyncio.wait(restarting, return_when=asyncio.FIRST_COMPLETED)

    async def abort_all(self) -> int:
        """Abort in-flight requests on every replica and hold new ones until `resume()`."""
        return sum(await self._fan_out("abort_all"))

    async def resume(self) -> None:
        await self._fan_out("resume")

    async def sleep(self) -> None:
        await self._fan_out("sleep")

    async def wake_up(self) -> None:
        await self._fan_out("wake_up")

    async def update_weights(self, buckets: WeightBuckets, version: int) -> Any:
        """Load the same weights into every replica (materialised once if given as a generator);
        returns what was sent, which `call_one(i, "update_weights", sent, version)` sends again."""
        named_tensors = self.weights_payload(buckets)
        await self._fan_out("update_weights", named_tensors, version)
        return named_tensors

    def weights_payload(self, buckets: WeightBuckets) -> Any:
        """The weights as every replica's `update_weights` takes them: a list of (name, tensor), or
        for Ray replicas one object-store copy of it shared by all, instead of one per call."""
        named_tensors = list(iter_named_tensors(buckets))
        if all(r.is_local for r in self._replicas):
            return named_tensors
        import ray

        return ray.put(named_tensors)

    async def call_all(self, method: str, *args: Any) -> list[Any]:
        """Call `method(*args)` on every replica that is up, at once (weight-sync backends use it to
        reach the replicas' `join_weight_group` / `receive_weights`); returns the results in replica
        order."""
        return await self._fan_out(method, *args)

    async def call_one(self, index: int, method: str, *args: Any) -> Any:
        """Call `method(*args)` on the replica given at position `index` (the supervisor brings a
        restarted replica to the trainer's state with it); raises if its process is gone again."""
        replica = self._replicas[index]
        result = await replica.call(method, *args)
        replica.restarting = False  # it answered: whatever this client saw of its restart is over
        return result

    async def wait_until_up(self) -> int:
        """Wait until every restarting replica answers again or is found gone; returns the live
        count. For a caller that needs every member, e.g. a collective group being formed."""
        up = self._up()
        probed = await asyncio.gather(*(r.probe() for r in up), return_exceptions=True)
        for replica, outcome in zip(up, probed):
            if isinstance(outcome, _ReplicaLost):
                self._on_lost(replica, outcome)
        restarting = [r.recovery() for r in self._live() if r.restarting]
        if restarting:
            await asyncio.gather(*restarting)
        if not self._live():
            raise AllReplicasLostError("every rollout replica died")
        return self.num_replicas

    async def _fan_out(self, method: str, *args: Any) -> list[Any]:
        """Results of the replicas that are up; one found dead or restarting is set aside, any other
        error raised."""
        up = self._up()
        outcomes = await asyncio.gather(*(r.call(method, *args) for r in up), return_exceptions=True)
        results = []
        for replica, outcome in zip(up, outcomes):
            if isinstance(outcome, _ReplicaLost):
                self._on_lost(replica, outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                results.append(outcome)
        return results


class FullyAsyncLLMServerClient(LLMServerClient):
    """`LLMServerClient` with partial rollout: aborted requests resume on the replicas' next weights.

    When a piece comes back "aborted", the client resubmits prompt + tokens so far with the
    remaining `max_tokens`, the same seed and `seed_offset` advanced by the tokens so far, under
    the same request id (so the same replica). The replica holds it until `resume()`, after the
    trainer's weight update. The result concatenates the pieces: per-token log-probs are those of
    the weights that sampled each token, and min/max weight versions span all pieces. With
    unchanged weights and a seed, the result equals an uninterrupted run's.
    """

    async def generate(
        self,
        request_id: str,
        prompt_ids: list[int],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        multi_modal_inputs: Mapping[str, Any] | None = None,
    ) -> TokenOutput:
        params = SamplingParams.from_dict(sampling_params)
        prompt = list(prompt_ids)
        result: TokenOutput | None = None
        while True:
            done = 0 if result is None else len(result.token_ids)
            piece_params = params.replace(
                max_tokens=None if params.max_tokens is None else params.max_tokens - done,
                seed_offset=params.seed_offset + done,
            )
            piece = await super().generate(
                request_id, prompt + ([] if result is None else result.token_ids), piece_params, multi_modal_inputs
            )
            result = piece if result is None else _concatenate(result, piece)
            if piece.stop_reason != "aborted":
                return result
            if params.max_tokens is not None and len(result.token_ids) >= params.max_tokens:
                result.stop_reason = "length"  # aborted just as the budget ran out
                return result


def _concatenate(first: TokenOutput, then: TokenOutput) -> TokenOutput:
    # A piece without tokens (aborted while queued) reports the version current at its end; it
    # produced nothing, so it only counts when no piece produced anything.
    producing = [p for p in (first, then) if p.token_ids] or [then]
    return TokenOutput(
        token_ids=first.token_ids + then.token_ids,
        log_probs=first.log_probs + then.log_probs,
        stop_reason=then.stop_reason,
        min_weight_version=min(p.min_weight_version for p in producing),
        max_weight_version=max(p.max_weight_version for p in producing),
    )


def client_for(replicas: Sequence[Any], *, partial_rollout: bool = False) -> LLMServerClient:
    """A client over `replicas` (Ray handles or in-process servers); `partial_rollout=True`
    resubmits aborted requests."""
    cls = FullyAsyncLLMServerClient if partial_rollout else LLMServerClient
    return cls(replicas)
