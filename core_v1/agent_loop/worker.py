"""Where agent loops run: one asyncio task per trajectory, fire-and-forget, each writing its row(s)
to the transfer store the moment it finishes.

An `AgentLoopWorker` owns an event loop (a Ray actor's, or a background thread's in-process),
a tokenizer, a rollout client and a reward scorer. For each session it builds the chosen agent
loop, runs it, scores every output with the configured reward function (a `batch` reward manager
scores the outputs of the sessions finishing together in one call), and puts one row per output
under `{uid}_{session_id}_{index}`. A loop or reward function that raises produces a row
with status `failed` (and the error), so the trainer counts it instead of waiting for it forever.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from typing import Any, Optional

import torch

from core_v1.agent_loop import AGENT_LOOPS, AgentLoopBase, AgentLoopOutput, load_agent_loop_config
from core_v1.agent_loop.tools.sandbox import SandboxLimits, sandbox_for
from core_v1.agent_loop.vision import load_policy_processor
from core_v1.batch.meta import is_handle_value
from core_v1.reward.loop import RewardScorer
from core_v1.transfer_store import RowStatus, trajectory_key
from core_v1.utils.plugins import import_plugins
from core_v1.utils.seeding import derive_seed

# Columns an agent loop receives but the training rows do not need to carry twice.
_NOT_STORED = {"raw_prompt_ids"}


class RecordingClient:
    """The rollout client as one trajectory sees it: gives each call its own seed (mixing in the
    call number, so turn 2 is not a replay of turn 1's randomness) and remembers the weight
    versions that produced the trajectory."""

    def __init__(self, client: Any, base_seed: Optional[int]):
        self._client = client
        self._base_seed = base_seed
        self.calls = 0
        self.generated: list[tuple[list[int], list[float]]] = []  # (tokens, log-probs) of every call
        self.min_version: Optional[int] = None
        self.max_version: Optional[int] = None

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict | Any, **kwargs: Any):
        params = dict(sampling_params) if isinstance(sampling_params, dict) else sampling_params
        if isinstance(params, dict) and self._base_seed is not None and params.get("seed") is None:
            params["seed"] = derive_seed(self._base_seed, self.calls)
        self.calls += 1
        output = await self._client.generate(
            request_id=request_id, prompt_ids=prompt_ids, sampling_params=params, **kwargs
        )
        self.generated.append((list(output.token_ids), list(getattr(output, "log_probs", None) or [])))
        low, high = getattr(output, "min_weight_version", None), getattr(output, "max_weight_version", None)
        if low is not None:
            self.min_version = low if self.min_version is None else min(self.min_version, low)
            self.max_version = high if self.max_version is None else max(self.max_version, high)
        return output

    def logprobs_for(self, output: AgentLoopOutput) -> Optional[list[float]]:
        """The sampling log-probs of a loop's output that did not carry them: recoverable when its
        model tokens (mask 1), in order, are exactly the tokens this session generated; tool and
        observation tokens (mask 0) get 0.0. None when the two do not line up (e.g. a loop that
        edited or dropped generated tokens, or one output of several)."""
        tokens = [t for pair in self.generated for t in pair[0]]
        log_probs = [p for pair in self.generated for p in pair[1]]
        model_tokens = [t for t, m in zip(output.response_ids, output.response_mask) if m]
        if model_tokens != tokens or len(log_probs) != len(tokens):
            return None
        remaining = iter(log_probs)
        return [next(remaining) if m else 0.0 for m in output.response_mask]

    def __getattr__(self, name: str) -> Any:  # anything else a custom loop calls on the client
        return getattr(self._client, name)


class AgentLoopWorker:
    """Runs agent-loop sessions concurrently and writes their trajectories to the store."""

    def __init__(self, config: Any, client: Any, store: Any, tokenizer: Any):
        import_plugins(config.trainer.v1.plugins)  # scorers and loops registered by user plug-ins
        # The run's sandbox limits, for a tool that runs code in any loop (not only the tool loop, which sets them too)
        sandbox_for(SandboxLimits.from_config(config.actor_rollout_ref.rollout.multi_turn.tool_sandbox))
        self.config = config
        self.client = client
        self.store = store
        self.tokenizer = tokenizer
        self.processor = load_policy_processor(config)  # None for a text model
        self.reward = RewardScorer(
            config.reward,
            config.data.max_response_length,
            config.trainer.experiment_name,
            source_key=config.data.reward_fn_key,
        )
        self.response_length = config.actor_rollout_ref.rollout.response_length
        agent_cfg = config.actor_rollout_ref.rollout.agent
        if agent_cfg.agent_loop_config_path:
            load_agent_loop_config(agent_cfg.agent_loop_config_path)
        self.default_agent = agent_cfg.default_agent_loop
        self._tasks: set[asyncio.Task] = set()
        self._puts = _CoalescedPuts(self)

    def submit(self, partition: str, sessions: list[dict]) -> int:
        """Start one task per session and return at once. Each session is a dict with the row's
        columns plus `uid`, `session_id`, `sampling_params`, `seed`, `global_steps`."""
        for session in sessions:
            task = asyncio.get_running_loop().create_task(self._run_session(partition, session))
            self._tasks.add(task)  # keep a reference: the loop holds tasks only weakly
            task.add_done_callback(self._tasks.discard)
        return len(sessions)

    def num_running(self) -> int:
        return len(self._tasks)

    async def drain(self) -> None:
        """Wait for every started session (tests and shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _run_session(self, partition: str, session: dict) -> None:
        uid, session_id = session["uid"], session["session_id"]
        started = time.perf_counter()
        recorder = RecordingClient(self.client, session.get("seed"))
        try:
            loop_name, outputs = await self._run_agent_loop(session, recorder)
            # Scored together: a batch reward manager then gets all of a session's outputs in one call.
            built = await asyncio.gather(
                *(
                    self._trajectory_row(session, output, index, len(outputs), recorder, loop_name)
                    for index, output in enumerate(outputs)
                )
            )
            rows, tags = {}, {}
            for index, (row, row_tags) in enumerate(built):
                key = trajectory_key(uid, session_id, index)
                rows[key], tags[key] = row, row_tags
                tags[key]["gen_seconds"] = time.perf_counter() - started
        except Exception as error:  # a user's loop or reward function failed: count it, keep going
            rows, tags = self._failed(session, error)
        await self._puts.put(partition, session, rows, tags)

    async def _run_agent_loop(self, session: dict, recorder: RecordingClient) -> tuple[str, list[AgentLoopOutput]]:
        return await run_agent_loop(
            self.config, self.tokenizer, session, recorder, self.default_agent, processor=self.processor
        )

    async def _trajectory_row(
        self,
        session: dict,
        output: AgentLoopOutput,
        index: int,
        num_outputs: int,
        recorder: RecordingClient,
        loop_name: str,
    ) -> tuple[dict, dict]:
        limit = self.response_length
        response_ids = list(output.response_ids)[:limit]
        truncated = len(output.response_ids) > limit
        scored = loop_score(output)
        if scored is None:
            text = self.tokenizer.decode(response_ids, skip_special_tokens=True)
            scored = await self.reward.score(session, text, len(response_ids), num_turns=output.num_turns)
        score, reward_extra = scored
        row = {
            "prompt_ids": torch.tensor(output.prompt_ids, dtype=torch.long),
            "response_ids": torch.tensor(response_ids, dtype=torch.long),
            "response_mask": torch.tensor(list(output.response_mask)[:limit], dtype=torch.long),
            "reward_score": score,
            "reward_extra": reward_extra,
            "output_index": index,  # orders a multi-output session's rows; its last carries the session's advantage
        }
        log_probs = output.response_logprobs
        if log_probs is None and num_outputs == 1:
            log_probs = recorder.logprobs_for(output)
        if log_probs is not None:
            row["response_logprobs"] = torch.tensor(list(log_probs)[:limit], dtype=torch.float32)
        if output.multi_modal_inputs is not None:  # every forward of the row takes its images
            row["multi_modal_inputs"] = {k: torch.as_tensor(v) for k, v in output.multi_modal_inputs.items()}
        row.update(self._passthrough_columns(session))
        row.update(trajectory_columns(output, loop_name))  # the loop's, over a dataset column of the same name
        current = session["global_steps"]
        tags = {
            "status": RowStatus.FINISHED.value,
            "prompt_len": len(output.prompt_ids),
            "response_len": len(response_ids),
            "truncated": truncated,
            "global_steps": current,
            "min_global_steps": recorder.min_version if recorder.min_version is not None else current,
            "max_global_steps": recorder.max_version if recorder.max_version is not None else current,
            "num_outputs": num_outputs,
            "has_logprobs": log_probs is not None,
            **object_tags(row),
        }
        return row, tags

    def _passthrough_columns(self, session: dict) -> dict:
        # The raw images stay out: the row's multi_modal_inputs hold what training reads of them.
        skip = _NOT_STORED | {"sampling_params", "seed", self.config.data.image_key, self.config.data.video_key}
        return {k: v for k, v in session.items() if k not in skip}

    def _failed(self, session: dict, error: BaseException) -> tuple[dict, dict]:
        """The one row that stands for a session that failed, so the trainer counts it, not waits for it."""
        key = trajectory_key(session["uid"], session["session_id"], 0)
        tags = {
            "status": RowStatus.FAILED.value,
            "error": failure_message(error),
            "global_steps": session["global_steps"],
            "num_outputs": 1,
        }
        return {key: self._passthrough_columns(session)}, {key: tags}


async def run_agent_loop(
    config: Any, tokenizer: Any, session: dict, client: RecordingClient, default_agent: str, processor: Any = None
) -> tuple[str, list[AgentLoopOutput]]:
    """Build the loop a session asks for (its `agent_name`, else `default_agent`) on `client` and run
    it; returns the registered name of the loop that ran and its outputs. The one place a session
    becomes trajectories: V1's workers call it, and so does V0's rollout (`legacy_v0.workers`).
    `processor`: a vision-language model's HF processor, handed to the loop (`AgentLoopBase.processor`)."""
    name = session.get("agent_name") or default_agent
    loop_cls: type[AgentLoopBase] = AGENT_LOOPS.get(name)
    agent = loop_cls(config, client, tokenizer, **({"processor": processor} if processor is not None else {}))
    columns = {k: v for k, v in session.items() if k not in ("sampling_params", "seed", "global_steps")}
    result = await agent.run(dict(session["sampling_params"]), **columns)
    outputs = result if isinstance(result, list) else [result]
    if not outputs or not all(isinstance(o, AgentLoopOutput) for o in outputs):
        raise TypeError(
            f"agent loop {name!r} must return an AgentLoopOutput or a non-empty list of them, "
            f"got {type(result).__name__}"
        )
    return _registered_name(type(agent)), outputs


def loop_score(output: AgentLoopOutput) -> Optional[tuple[float, dict]]:
    """(score, reward extras) of a trajectory whose loop scored it (`reward_score`, e.g. a tool's or an
    interaction's reward): that score stands and no reward function is called for the trajectory.
    None: the run's reward function scores the decoded response. V1's workers and V0's reward
    stage (`legacy_v0.reward.score_generated`) both decide here."""
    return None if output.reward_score is None else (float(output.reward_score), {})


def trajectory_columns(output: AgentLoopOutput, loop_name: str) -> dict[str, Any]:
    """The per-trajectory columns a training row takes from its loop, on V1 and V0 alike: `num_turns`,
    `agent_name` (the registered loop that made it; reported as `rollout/agent_loop/<name>/share`),
    `agent_metrics` (the loop's `metrics`, averaged into `agent/<key>/mean` by
    `core_v1.trainer.metrics.compute_data_metrics`) and `extra_fields`."""
    return {
        "num_turns": output.num_turns,
        "agent_name": loop_name,
        "agent_metrics": dict(output.metrics),
        "extra_fields": dict(output.extra_fields),
    }


def object_tags(row: dict) -> dict[str, tuple[str, ...]]:
    """The tags naming a row's objects, and those the trainer's handle carries in the driver (scalars,
    the reward's extras: `is_handle_value`); a stage reads the others by name when it needs them."""
    return {
        "object_fields": tuple(name for name, value in row.items() if is_object(value)),
        "handle_fields": tuple(name for name, value in row.items() if is_handle_value(name, value)),
    }


def is_object(value: Any) -> bool:
    """Whether a row field is a Python object, not a tensor nor a mapping of them (a multimodal input)."""
    if isinstance(value, torch.Tensor):
        return False
    return not (isinstance(value, dict) and any(isinstance(v, torch.Tensor) for v in value.values()))


def failure_message(error: BaseException) -> str:
    """How a failed session is reported: the error and where it was raised (the innermost frame,
    usually the user's loop, tool or reward function)."""
    where = traceback.extract_tb(error.__traceback__)[-1] if error.__traceback__ else None
    origin = f" ({where.filename}:{where.lineno})" if where else ""
    return f"{type(error).__name__}: {error}{origin}"


def _registered_name(loop_cls: type) -> str:
    return next((name for name in AGENT_LOOPS if AGENT_LOOPS.get(name) is loop_cls), loop_cls.__qualname__)


class _CoalescedPuts:
    """Sessions finishing close together share one store put instead of one round trip each (a put's
    fixed cost, not its bytes, is what one small trajectory pays): those finishing in the same
    event-loop turn (an engine step returns many at once), and those finishing while the previous
    put of the partition is still in flight, which go together in the next one; one put per
    partition is in flight at a time, so under load puts grow instead of queueing. A put that fails
    (e.g. a field that cannot be pickled) is retried per session, and a session whose own rows
    cannot be stored is stored as failed, so no session is ever lost."""

    def __init__(self, worker: "AgentLoopWorker"):
        self.worker = worker
        self._pending: dict[str, _PendingPut] = {}  # partition -> the sessions of its next put
        self._flushers: dict[str, asyncio.Task] = {}

    async def put(self, partition: str, session: dict, rows: dict, tags: dict) -> None:
        pending = self._pending.get(partition)
        if pending is None:
            pending = self._pending[partition] = _PendingPut(asyncio.get_running_loop().create_future())
        pending.entries.append((session, rows, tags))
        if partition not in self._flushers:
            self._flushers[partition] = asyncio.get_running_loop().create_task(self._flush_while_pending(partition))
        await asyncio.shield(pending.stored)

    async def _flush_while_pending(self, partition: str) -> None:
        try:
            while partition in self._pending:
                await asyncio.sleep(0)  # let the other sessions finishing in this turn join the put
                pending = self._pending.pop(partition)
                try:
                    await self._flush(partition, pending.entries)
                except asyncio.CancelledError:
                    pending.stored.cancel()
                    raise
                except Exception as error:  # the store is gone: every waiting session hears it
                    pending.stored.set_exception(error)
                else:
                    pending.stored.set_result(None)
        finally:
            del self._flushers[partition]
            if asyncio.current_task().cancelling() and partition in self._pending:
                self._pending.pop(partition).stored.cancel()  # the loop is shutting down

    async def _flush(self, partition: str, entries: list[tuple[dict, dict, dict]]) -> None:
        rows = {k: v for _, r, _ in entries for k, v in r.items()}
        tags = {k: v for _, _, t in entries for k, v in t.items()}
        try:
            await self.worker.store.aput(partition, rows, tags)
        except Exception as error:
            if len(entries) > 1:  # find the session at fault; the others are stored as they are
                for entry in entries:
                    await self._flush(partition, [entry])
                return
            failed_rows, failed_tags = self.worker._failed(entries[0][0], error)
            await self.worker.store.aput(partition, {key: {} for key in failed_rows}, failed_tags)


class _PendingPut:
    """Sessions waiting for the next put of a partition; `stored` resolves once their rows are in."""

    def __init__(self, stored: asyncio.Future):
        self.stored = stored
        self.entries: list[tuple[dict, dict, dict]] = []
