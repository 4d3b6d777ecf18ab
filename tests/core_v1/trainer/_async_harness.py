"""A real async pipeline without the training engines, for the async-mode unit tests.

Everything on the generation side is real: the hf engine behind an in-process `LLMServer`, the
partial-rollout client, agent-loop workers on a background loop, the transfer store, the
`CheckpointManager` with the naive backend, and the async trainer mode's own hooks, admission
and replay buffer. Only the training stages are skipped: the weights the replicas receive at
`on_step_end` are the model's own (`FrozenPolicy`), the "weights do not change" case.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from core_v1.agent_loop import AGENT_LOOPS, AgentLoopBase, AgentLoopOutput, register
from core_v1.agent_loop.manager import AgentLoopManager
from core_v1.checkpoint_engine import NaiveCheckpointEngine
from core_v1.checkpoint_engine.manager import CheckpointManager
from core_v1.config import load_config
from core_v1.rollout import FullyAsyncLLMServerClient
from core_v1.rollout.server import LLMServer
from core_v1.trainer.components import TrainerComponents
from core_v1.trainer.generation import GenerationPipeline
from core_v1.trainer.prompt_feed import PromptFeed
from core_v1.transfer_store import make_transfer_store
from core_v1.utils.aio import BackgroundLoop
from core_v1.utils.seeding import derive_seed
from core_v1.data import PromptDataset, PromptSampler
from tests.conftest import quickstart_overrides

LONG_TAIL_LOOP = "test_long_tail"


def long_tail_length(rng: random.Random) -> int:
    """Mostly 2-5 tokens, one in six 40-60: p99/p50 well above 8, like agentic workloads."""
    return rng.randint(40, 60) if rng.random() < 1 / 6 else rng.randint(2, 5)


class LongTailAgentLoop(AgentLoopBase):
    """Single turn with a long-tailed token budget (ignore_eos), and a configurable failure rate;
    both drawn from the session's seed, so a run is reproducible."""

    failure_rate = 0.0

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        rng = random.Random(derive_seed(kwargs["uid"], kwargs["session_id"]))
        if rng.random() < self.failure_rate:
            raise RuntimeError("injected agent-loop failure")
        prompt_ids = await self.apply_chat_template(list(kwargs["raw_prompt"]))
        params = {**sampling_params, "max_tokens": long_tail_length(rng), "ignore_eos": True}
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=params
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=list(output.token_ids),
            response_mask=[1] * len(output.token_ids),
            response_logprobs=list(output.log_probs),
        )


if LONG_TAIL_LOOP not in AGENT_LOOPS:
    register(LONG_TAIL_LOOP)(LongTailAgentLoop)


class FrozenPolicy:
    """The weight source a CheckpointManager syncs from: a model whose weights never change."""

    def __init__(self, model: Any):
        self.model = model

    def named_parameters_for_sync(self):
        for name, tensor in self.model.state_dict().items():
            yield name, tensor.detach()


@dataclass
class PipelineRecord:
    """What a harness run observed, step by step."""

    submitted: list[str] = field(default_factory=list)
    trained: list[list[str]] = field(default_factory=list)  # uids per step
    metrics: list[dict] = field(default_factory=list)


def pipeline_config(assets: dict, out_dir: Any, *extra: str):
    return load_config(
        quickstart_overrides(
            assets,
            out_dir,
            1,
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "data.max_response_length=64",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={LONG_TAIL_LOOP}",
            "actor_rollout_ref.rollout.agent.num_workers=1",
            "trainer.logger=[]",
            *extra,
        ),
        config_name="quickstart",
    )


def build_pipeline(trainer_cls: type, config: Any, model_path: str) -> tuple[Any, PipelineRecord]:
    """A `trainer_cls` (an async mode) wired to real generation components; call `close(trainer)`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    server = LLMServer.from_model(model_path, "hf", device="cpu")
    client = FullyAsyncLLMServerClient([server])
    store = make_transfer_store("local")
    loop = BackgroundLoop("test-control")
    manager = AgentLoopManager(config, store, client=client, tokenizer=tokenizer, backend="local")
    checkpoint_manager = CheckpointManager(
        FrozenPolicy(server.engine.model),
        client,
        NaiveCheckpointEngine(config.actor_rollout_ref.rollout.checkpoint_engine),
        loop,
    )
    dataset = PromptDataset(
        config.data.train_files, config.data.prompt_key, config.data.max_prompt_length, tokenizer, False
    )
    record = PipelineRecord()

    class RecordingPipeline(GenerationPipeline):
        def submit(self, num_groups, global_steps):
            uids = super().submit(num_groups, global_steps)
            record.submitted.extend(uids)
            return uids

    pipeline = RecordingPipeline(
        manager, PromptFeed(PromptSampler(dataset, config.data.train_batch_size, True, 0)), store
    )
    buffer_cls = trainer_cls.replay_buffer_cls
    components = TrainerComponents(
        tokenizer=tokenizer,
        store=store,
        agent_loop_manager=manager,
        checkpoint_manager=checkpoint_manager,
        pipeline=pipeline,
        replay_buffer=buffer_cls(
            store, config, pad_token_id=tokenizer.pad_token_id, wait_timeout=120, pipeline=pipeline
        ),
        actor=None,
        train_sampler=pipeline.prompts.sampler,
        tracking=None,
        total_training_steps=0,
        rollout_client=client,
        closers=[server.shutdown, loop.close, manager.loop.close],
    )
    trainer = trainer_cls(config, components)
    trainer.server = server  # for tests that watch the engine
    return trainer, record


def run_steps(trainer: Any, record: PipelineRecord, steps: int) -> None:
    """`steps` iterations of the trainer's step with the training stages left out."""
    if trainer.global_steps == 0:
        trainer.on_train_begin()
    for _ in range(steps):
        trainer.global_steps += 1
        metrics: dict = {}
        trainer.on_step_begin()
        trainer._add_batch_to_generate(metrics)
        trainer.on_sample_begin()
        batch, sample_metrics = trainer.replay_buffer.sample(trainer.global_steps, "train", trainer.train_batch_size)
        metrics.update(sample_metrics)
        metrics["harness/requests_in_flight_at_sample_end"] = sum(trainer.components.rollout_client.in_flight())
        trainer.on_sample_end()
        metrics.update(trainer.on_step_end() or {})
        trainer.replay_buffer.release(batch)
        record.trained.append(list(dict.fromkeys(batch.column("uid"))))
        record.metrics.append(metrics)


def close(trainer: Any) -> None:
    """Let what is still generating finish (replicas awake and admitting), then shut down."""
    trainer.checkpoint_manager.resume_generation_replicas()
    trainer.agent_loop_manager.drain()
    trainer.components.close()
