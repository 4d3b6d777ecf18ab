"""`AgentLoopManager`: hands prompt groups to agent-loop workers and returns at once.

For each prompt it mints a reproducible uid (from the run seed and a submission counter), puts
the group row `{uid}` (tags `status=running`, `n`, `global_steps`, `order`) into the store, and
sends `n` sessions to one worker (sessions of a group share a worker, so sticky routing keeps a
group's prefix on one replica). Each session's sampling seed is derived from
(run seed, uid, session), so what a sample draws never depends on scheduling.

Workers are Ray actors (`backend="ray"`, the default: they run concurrently with the trainer
and with each other) or live on a background event loop in this process (`backend="local"`,
for tests and debugging).
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.agent_loop.worker import AgentLoopWorker
from core_v1.transfer_store import RowStatus, group_key
from core_v1.utils.aio import BackgroundLoop
from core_v1.utils.seeding import derive_seed, derive_uid


def sampling_params_for(config: Any, validate: bool) -> dict:
    rollout = config.actor_rollout_ref.rollout
    if validate:
        val = rollout.val_kwargs
        temperature = val.temperature if val.do_sample else 0.0
        return {
            "temperature": temperature,
            "top_p": val.top_p,
            "top_k": val.top_k,
            "max_tokens": rollout.response_length,
        }
    return {
        "temperature": rollout.temperature if rollout.do_sample else 0.0,
        "top_p": rollout.top_p,
        "top_k": rollout.top_k,
        "max_tokens": rollout.response_length,
        "ignore_eos": rollout.ignore_eos,
    }


def check_agent_loops(config: Any, datasets: list) -> None:
    """Fail before anything starts if the default loop or a row's `agent_name` is not registered
    (otherwise every sample would fail one by one inside the workers), a tool or interaction file
    is bad, or interactions are configured but no loop of the run plays them."""
    from core_v1.agent_loop import AGENT_LOOPS, AgentLoopConfigError, load_agent_loop_config

    agent_cfg = config.actor_rollout_ref.rollout.agent
    if agent_cfg.agent_loop_config_path:
        load_agent_loop_config(agent_cfg.agent_loop_config_path)
    multi_turn = config.actor_rollout_ref.rollout.multi_turn
    if multi_turn.tool_config_path:
        from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config

        initialize_tools_from_config(multi_turn.tool_config_path)  # a bad tool file fails now, not per sample
    names = {agent_cfg.default_agent_loop}
    for dataset in datasets:
        names |= {row.get("agent_name") for row in dataset.rows} - {None, ""}
    loops = [AGENT_LOOPS.get(name) for name in sorted(names)]
    if multi_turn.interaction_config_path:
        from core_v1.agent_loop.interaction import load_interactions, pick_interaction, row_interaction_kwargs
        from core_v1.agent_loop.tool_agent import ToolAgentLoop

        interactions = load_interactions(multi_turn.interaction_config_path)  # likewise a bad interaction file
        for dataset in datasets:
            for row in dataset.rows:
                pick_interaction(interactions, row_interaction_kwargs(row))
        if not any(issubclass(loop, ToolAgentLoop) for loop in loops):
            raise AgentLoopConfigError(
                "actor_rollout_ref.rollout.multi_turn.interaction_config_path is played by the "
                f"tool_agent loop, but this run uses {', '.join(sorted(names))}: set "
                "actor_rollout_ref.rollout.agent.default_agent_loop=tool_agent"
            )


class _RayAgentLoopWorker:
    """The worker inside a Ray actor: builds its own tokenizer and rollout client there."""

    def __init__(self, config: Any, replicas: list, store: Any, tokenizer_path: str, partial_rollout: bool):
        import torch

        from core_v1.agent_loop.base import load_policy_tokenizer
        from core_v1.rollout import FullyAsyncLLMServerClient, LLMServerClient

        torch.set_num_threads(1)
        client_cls = FullyAsyncLLMServerClient if partial_rollout else LLMServerClient
        tokenizer = load_policy_tokenizer(config, tokenizer_path)
        self.worker = AgentLoopWorker(config, client_cls(replicas), store, tokenizer)

    async def submit(self, partition: str, sessions: list[dict]) -> int:
        return self.worker.submit(partition, sessions)

    async def num_running(self) -> int:
        return self.worker.num_running()

    async def drain(self) -> None:
        await self.worker.drain()


class AgentLoopManager:
    def __init__(
        self,
        config: Any,
        store: Any,
        *,
        replicas: Optional[list] = None,
        client: Any = None,
        tokenizer: Any = None,
        tokenizer_path: Optional[str] = None,
        backend: str = "ray",
        partial_rollout: bool = False,
        loop: Optional[BackgroundLoop] = None,
    ):
        self.config = config
        self.store = store
        self.backend = backend
        self.submitted = 0  # prompt groups submitted so far; uids and seeds derive from it
        self._seed = config.trainer.seed
        self._submissions: list = []
        num_workers = max(1, config.actor_rollout_ref.rollout.agent.num_workers)
        if backend == "ray":
            import ray

            actor_cls = ray.remote(num_cpus=0)(_RayAgentLoopWorker)
            self.workers = [
                actor_cls.remote(config, replicas, store, tokenizer_path, partial_rollout) for _ in range(num_workers)
            ]
        elif backend == "local":
            self._owns_loop = loop is None
            self.loop = loop or BackgroundLoop("agent-loops")
            self.workers = [AgentLoopWorker(config, client, store, tokenizer) for _ in range(num_workers)]
        else:
            raise ValueError(f"agent-loop backend {backend!r} is not one of ray, local")

    def submit(self, partition: str, rows: list[dict], global_steps: int, validate: bool = False) -> list[str]:
        """Start generation for `rows` (one prompt group each) and return their uids without waiting."""
        rollout = self.config.actor_rollout_ref.rollout
        n = rollout.val_kwargs.n if validate else rollout.n
        params = sampling_params_for(self.config, validate)
        per_worker: list[list[dict]] = [[] for _ in self.workers]
        group_rows, group_tags, uids = {}, {}, []
        for row in rows:
            order = self.submitted
            self.submitted += 1
            uid = derive_uid(self._seed, partition, order)
            uids.append(uid)
            group_rows[group_key(uid)] = {"row": dict(row)}
            group_tags[group_key(uid)] = {
                "status": RowStatus.RUNNING.value,
                "n": n,
                "global_steps": global_steps,
                "order": order,
            }
            per_worker[order % len(self.workers)].extend(self._sessions(row, uid, range(n), params, global_steps))
        self.store.put(partition, group_rows, group_tags)
        self._dispatch(partition, per_worker)
        return uids

    def reissue(self, partition: str, groups: list[tuple[str, dict, dict, list[int]]]) -> int:
        """Run again sessions of groups already in the store (`(uid, row, group_tags, session_ids)`
        each): a run resumed from a checkpoint re-runs the sessions that had not reported. Same uid,
        seeds, submit step and worker as at submission, so each draws what it would have drawn; no
        group row is put and nothing counts as submitted. Returns the number of sessions."""
        params = sampling_params_for(self.config, validate=False)
        per_worker: list[list[dict]] = [[] for _ in self.workers]
        for uid, row, tags, session_ids in groups:
            sessions = self._sessions(row, uid, session_ids, params, tags["global_steps"])
            per_worker[tags["order"] % len(self.workers)].extend(sessions)
        self._dispatch(partition, per_worker)
        return sum(map(len, per_worker))

    def _sessions(self, row: dict, uid: str, session_ids, params: dict, global_steps: int) -> list[dict]:
        return [
            {
                **row,
                "uid": uid,
                "session_id": s,
                "sampling_params": params,
                "seed": derive_seed(self._seed, uid, s),
                "global_steps": global_steps,
            }
            for s in session_ids
        ]

    def _dispatch(self, partition: str, per_worker: list[list[dict]]) -> None:
        for worker, sessions in zip(self.workers, per_worker):
            if not sessions:
                continue
            if self.backend == "ray":
                # Fire-and-forget: results arrive in the store; the ref is kept only to notice a dead worker.
                self._submissions.append(worker.submit.remote(partition, sessions))
            else:
                self.loop.run(self._submit_local(worker, partition, sessions))

    @staticmethod
    async def _submit_local(worker: AgentLoopWorker, partition: str, sessions: list[dict]) -> int:
        return worker.submit(partition, sessions)

    def raise_if_failed(self) -> None:
        """Raise the error of a submission that failed in its worker (e.g. the worker process died);
        without this, a trainer waiting for that batch would wait forever."""
        if self.backend != "ray" or not self._submissions:
            return
        import ray

        done, self._submissions = ray.wait(self._submissions, num_returns=len(self._submissions), timeout=0)
        ray.get(done)

    def drain(self) -> None:
        """Wait until every started session has written its rows."""
        if self.backend == "ray":
            import ray

            ray.get([w.drain.remote() for w in self.workers])
        else:
            for worker in self.workers:
                self.loop.run(worker.drain())

    def shutdown(self) -> None:
        if self.backend == "ray":
            import ray

            for worker in self.workers:
                ray.kill(worker)
        elif self._owns_loop:
            self.loop.close()
        self.workers = []
