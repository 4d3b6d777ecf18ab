"""Build a run's components from its typed config: Ray, replicas, store, agent loops, engines.

`build_components(config)` is the one place that decides placement; a trainer only uses what it
is given. On the CPU machine: one Ray node, `rollout.num_replicas` replica actors with
`rollout.num_cpus_per_replica` CPUs each, `rollout.agent.num_workers` agent-loop actors, a
store actor, and the training worker group (`core_v1.workers.group`): one rank in the driver
process, or `trainer.nnodes x trainer.n_gpus_per_node` rank actors in a placement group. With
`trainer.v1.placement=local` the replicas, the agent loops and the store are in the driver too,
and Ray is not started.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS
from core_v1.checkpoint_engine.manager import CheckpointManager
from core_v1.config.schema import ConfigError, PPOConfig
from core_v1.data import PromptDataset, PromptSampler, build_dataset
from core_v1.data.samplers import build_custom_sampler_feed
from core_v1.device import resolve_device
from core_v1.reward.reward_model import build_reward_model
from core_v1.trainer.components import TrainerComponents, shut_down
from core_v1.trainer.generation import GenerationPipeline
from core_v1.trainer.prompt_feed import PromptFeed
from core_v1.trainer.replay_buffer import ReplayBuffer
from core_v1.utils.aio import BackgroundLoop
from core_v1.utils.tracking import Tracking

if TYPE_CHECKING:
    from core_v1.rollout.in_process import InProcessReplicaGroup
    from core_v1.rollout.replica import RolloutReplicaGroup


def rollout_engine_kwargs(rollout) -> dict:
    """The rollout keys both engines take (vLLM's names; the hf engine sizes its KV slots by them)."""
    kwargs = {
        key: getattr(rollout, key)
        for key in ("gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "enforce_eager")
    }
    if rollout.max_model_len is not None:
        kwargs["max_model_len"] = rollout.max_model_len
    return kwargs


def init_ray(config: PPOConfig) -> None:
    import ray

    if ray.is_initialized():
        return
    init_kwargs = ray_init_kwargs(config)
    if "address" in init_kwargs or os.environ.get("RAY_ADDRESS"):
        ray.init(**init_kwargs)
        return
    # A private cluster started and stopped by this run: say so in Ray's own setting (Ray's default
    # when unset, plus a security warning a user cannot act on). RAY_AUTH_MODE=token turns tokens on.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    with _environ(_inheritable_env_vars(init_kwargs)):
        ray.init(**init_kwargs)


def _inheritable_env_vars(init_kwargs: dict) -> dict[str, str]:
    """The runtime environment's variables, taken out of `init_kwargs` when they are all it holds.
    The processes of a cluster this run starts inherit the environment `ray.init` starts them in, so
    every worker gets the variables that way. As a job runtime_env they would make Ray start each
    actor's process through a setup process, leaving its already started workers unused (~3 s more
    per replica, store and agent-loop actor on 2 cores)."""
    runtime_env = init_kwargs.get("runtime_env") or {}
    if set(runtime_env) != {"env_vars"}:
        return {}
    del init_kwargs["runtime_env"]
    return {key: str(value) for key, value in runtime_env["env_vars"].items()}


@contextlib.contextmanager
def _environ(env_vars: dict[str, str]):
    """`os.environ` with `env_vars` set inside the block, as it was after it."""
    before = {key: os.environ.get(key) for key in env_vars}
    os.environ.update(env_vars)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def ray_init_kwargs(config: PPOConfig) -> dict:
    """`ray.init`'s arguments: `ray_kwargs.ray_init` (unset values dropped) over rlbridge's defaults.
    A `runtime_env` is merged with ours, as verl merges it, the user's `env_vars` winning: workers
    must still import the user files (agent loops, reward functions) the driver can."""
    init_kwargs = {k: v for k, v in dict(config.ray_kwargs.ray_init).items() if v is not None}
    init_kwargs.setdefault("num_cpus", max(2, os.cpu_count() or 2, _cpus_asked(config)))
    init_kwargs.setdefault("include_dashboard", False)
    init_kwargs.setdefault("log_to_driver", True)
    paths = [p for p in sys.path if p and Path(p).is_dir() and "site-packages" not in p]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths + [os.environ.get("PYTHONPATH", "")]))}
    # Workers load weights while the driver's training bar is drawn: their own bars would cut through it.
    quiet = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    runtime_env = dict(init_kwargs.get("runtime_env") or {})
    runtime_env["env_vars"] = {**env, **quiet, **dict(runtime_env.get("env_vars") or {})}
    init_kwargs["runtime_env"] = runtime_env
    return init_kwargs


def _cpus_asked(config: PPOConfig) -> int:
    """Logical CPUs the layout asks for: the replicas' and, on CPU, one per training rank (Ray's
    CPU counts are for scheduling; a small machine runs them oversubscribed, as in one process)."""
    from core_v1.workers.group import world_size_of

    rollout = config.actor_rollout_ref.rollout
    ranks = world_size_of(config) if resolve_device(config) == "cpu" else 0
    return int(rollout.num_replicas * rollout.num_cpus_per_replica + 0.999) + ranks


def load_custom_sampler(config: PPOConfig) -> type[ReplayBuffer] | None:
    """The sampler `trainer.v1.sampler.custom_sampler` names: `path` (a file or module, through the one
    loader) holding class `name`, registered under that name; or, without a path, a sampler a
    plug-in registered with `@register_sampler(name)`."""
    from core_v1.trainer.registry import SAMPLERS
    from core_v1.utils.loading import load_object

    custom = config.trainer.v1.sampler.custom_sampler
    if custom.path:
        if not custom.name:
            raise ConfigError("trainer.v1.sampler.custom_sampler.path is set but .name is not; name the class")
        cls = load_object(f"{custom.path}:{custom.name}", key="trainer.v1.sampler.custom_sampler", error=ConfigError)
        if not (isinstance(cls, type) and issubclass(cls, ReplayBuffer)):
            raise ConfigError(
                f"{custom.path}: {custom.name!r} is not a ReplayBuffer subclass "
                "(trainer.v1.sampler.custom_sampler.name)"
            )
        SAMPLERS.register(custom.name, cls, override=True)  # the configured file is authoritative
    return SAMPLERS.get(custom.name) if custom.name else None


def replay_buffer_class(config: PPOConfig, mode_default: type[ReplayBuffer] | None) -> type[ReplayBuffer]:
    """A custom sampler if configured, else the mode's buffer; DAPO dynamic sampling
    (`algorithm.filter_groups`) needs a buffer that evicts and refills groups, i.e. the async one."""
    from core_v1.trainer.replay_buffer_async import ReplayBufferAsync

    filtering = config.algorithm.filter_groups.enable
    cls = load_custom_sampler(config) or mode_default or (ReplayBufferAsync if filtering else ReplayBuffer)
    if filtering and not issubclass(cls, ReplayBufferAsync):
        raise ConfigError(
            f"algorithm.filter_groups.enable=true needs a replay buffer that refills filtered groups; "
            f"{cls.__name__} does not: subclass core_v1.trainer.replay_buffer_async.ReplayBufferAsync"
        )
    return cls


def train_prompt_sampler(config: PPOConfig, dataset: PromptDataset) -> Any:
    """What orders the training prompts: the user's sampler (`data.sampler`, built as verl builds
    it), else the epoch-shuffled `PromptSampler` seeded by `data.seed` (or `trainer.seed`)."""
    data = config.data
    custom = build_custom_sampler_feed(
        data.sampler.class_path, data.sampler.class_name, dataset, data, data.train_batch_size
    )
    if custom is not None:
        return custom
    return PromptSampler(
        dataset, data.train_batch_size, data.shuffle, data.seed if data.seed is not None else config.trainer.seed
    )


def total_steps(config: PPOConfig, sampler: PromptSampler) -> int:
    if config.trainer.total_training_steps:
        return int(config.trainer.total_training_steps)
    return sampler.batches_per_epoch * config.trainer.total_epochs


def build_components(
    config: PPOConfig, *, replay_buffer_cls: type[ReplayBuffer] | None = None, partial_rollout: bool = False
) -> TrainerComponents:
    """Every part of a run, started in order. When a step raises, what the steps before it started is
    shut down (newest first) before the error goes on: a failed start-up on a shared Ray cluster
    leaves no replica, agent-loop or training-rank actor behind."""
    closers: list[Callable[[], None]] = []
    try:
        return _build_components(config, replay_buffer_cls, partial_rollout, closers)
    except BaseException:
        shut_down(closers)
        raise


def _build_components(
    config: PPOConfig,
    replay_buffer_cls: type[ReplayBuffer] | None,
    partial_rollout: bool,
    closers: list[Callable[[], None]],
) -> TrainerComponents:
    from core_v1.agent_loop.base import load_policy_tokenizer
    from core_v1.agent_loop.vision import load_policy_processor
    from core_v1.agent_loop.manager import AgentLoopManager, check_agent_loops
    from core_v1.agent_loop.tools.sandbox import SandboxLimits, check_isolation
    from core_v1.transfer_store.ray_store import RayTransferStore
    from core_v1.transfer_store.store import TransferStore
    from core_v1.workers.group import ActorHandle, CriticHandle, ReferenceHandle, TeacherHandle, WorkerGroup
    from core_v1.workers.lora import starts_from_adapter

    aro = config.actor_rollout_ref
    device = resolve_device(config)
    model_path = str(Path(aro.model.path).expanduser())
    tokenizer_path = aro.model.tokenizer_path or config.data.tokenizer or model_path
    tokenizer = load_policy_tokenizer(config, tokenizer_path)
    processor = load_policy_processor(config)  # a vision-language model's; its prompts' lengths count images

    train_data = build_dataset(config.data, config.data.train_files, tokenizer, processor=processor)
    val_data = (
        build_dataset(config.data, config.data.val_files, tokenizer, train=False, processor=processor)
        if config.data.val_files
        else None
    )
    sampler = train_prompt_sampler(config, train_data)
    steps = total_steps(config, sampler)
    check_agent_loops(config, [d for d in (train_data, val_data) if d is not None])
    check_isolation(SandboxLimits.from_config(aro.rollout.multi_turn.tool_sandbox))
    buffer_cls = replay_buffer_class(config, replay_buffer_cls)  # a bad sampler fails before anything starts

    local = config.trainer.v1.placement == "local"
    if local:
        store: TransferStore | RayTransferStore = TransferStore()
    else:
        init_ray(config)
        store = RayTransferStore.create()
        closers.append(store.shutdown)
    replicas = start_replicas(config, model_path, device, local)
    closers.append(replicas.shutdown)
    client = replicas.client(partial_rollout=partial_rollout)
    loop = BackgroundLoop("rollout-control")
    closers.append(loop.close)
    manager = AgentLoopManager(
        config,
        store,
        replicas=replicas.replicas,
        client=client if local else None,
        # Its own copy: a fast tokenizer used from two threads at once can fail ("Already borrowed").
        tokenizer=load_policy_tokenizer(config, tokenizer_path) if local else None,
        tokenizer_path=tokenizer_path,
        backend="local" if local else "ray",
        partial_rollout=partial_rollout,
    )
    closers.append(manager.shutdown)

    workers = WorkerGroup(config, store, device, pad_token_id=_pad_id(tokenizer))
    closers.append(workers.shutdown)
    actor = ActorHandle(workers)
    actor.set_total_training_steps(steps)
    ref = ReferenceHandle(workers) if "ref" in workers.roles else None
    teacher = TeacherHandle(workers) if config.distillation.enabled else None
    critic = None
    if "critic" in workers.roles:
        critic = CriticHandle(workers)
        critic.set_total_training_steps(steps)

    replicas.wait_ready()  # they loaded while the agent-loop workers and training ranks started
    engine = CHECKPOINT_BACKENDS.get(aro.rollout.checkpoint_engine.backend)(aro.rollout.checkpoint_engine)
    checkpoint_manager = CheckpointManager(actor, client, engine, loop)
    closers.append(checkpoint_manager.close)
    if replicas.max_restarts:  # in-process replicas have none: their failure is the driver's
        checkpoint_manager.supervise(replicas)
    if starts_from_adapter(aro.model):  # the replicas loaded the base model; the policy starts with the adapter
        checkpoint_manager.update_weights(0)
    pipeline = GenerationPipeline(manager, PromptFeed(sampler), store)
    replay_buffer = build_replay_buffer(
        config,
        buffer_cls,
        store,
        _pad_id(tokenizer),
        health_check=_health_check(manager, checkpoint_manager),
        pipeline=pipeline,
    )
    tracking = build_tracking(config, steps)
    closers.append(tracking.close)
    reward_model = build_reward_model(config.reward.reward_model, tokenizer, device)
    return TrainerComponents(
        tokenizer=tokenizer,
        store=store,
        agent_loop_manager=manager,
        checkpoint_manager=checkpoint_manager,
        pipeline=pipeline,
        replay_buffer=replay_buffer,
        actor=actor,
        ref=ref,
        critic=critic,
        teacher=teacher,
        train_sampler=sampler,
        val_dataset=val_data,
        tracking=tracking,
        total_training_steps=steps,
        rollout_client=client,
        data_parallel_size=workers.world_size,
        workers=workers,
        progress=_progress_factory(config),
        reward_model=reward_model,
        closers=closers,
    )


def placement_problems(config: PPOConfig) -> list[str]:
    """Why `trainer.v1.placement=local` cannot hold this run (empty: it can, or placement is ray)."""
    from core_v1.workers.group import world_size_of

    if config.trainer.v1.placement != "local":
        return []
    rollout, problems = config.actor_rollout_ref.rollout, []
    if world_size_of(config) != 1:
        problems.append(
            f"trainer.v1.placement=local runs one training rank, in the driver; this layout has "
            f"{world_size_of(config)} (trainer.nnodes x trainer.n_gpus_per_node): set trainer.v1.placement=ray"
        )
    if rollout.checkpoint_engine.backend != "naive":
        problems.append(
            f"actor_rollout_ref.rollout.checkpoint_engine.backend={rollout.checkpoint_engine.backend} syncs weights "
            "between processes; trainer.v1.placement=local copies them in place: set backend=naive or placement=ray"
        )
    return problems


def start_replicas(
    config: PPOConfig, model_path: str, device: str, local: bool
) -> RolloutReplicaGroup | InProcessReplicaGroup:
    """The rollout replicas, loading: Ray actors (`wait_ready()` waits for them), or, with
    `trainer.v1.placement=local`, servers in this process, loaded on return."""
    from core_v1.rollout.in_process import InProcessReplicaGroup
    from core_v1.rollout.replica import RolloutReplicaGroup

    rollout = config.actor_rollout_ref.rollout
    engine_kwargs = {"device": device, **rollout_engine_kwargs(rollout), **dict(rollout.engine_kwargs)}
    if local:
        return InProcessReplicaGroup(model_path, rollout.num_replicas, engine=rollout.name, engine_kwargs=engine_kwargs)
    return RolloutReplicaGroup(
        model_path,
        rollout.num_replicas,
        engine=rollout.name,
        engine_kwargs=engine_kwargs,
        num_cpus=rollout.num_cpus_per_replica,
        num_gpus=1 if device == "cuda" and rollout.nnodes > 0 else 0,
        wait=False,
        max_restarts=rollout.max_restarts,
        restart_window_s=rollout.restart_window_s,
    )


def build_replay_buffer(
    config: PPOConfig, buffer_cls: type[ReplayBuffer], store: Any, pad_token_id: int, **parts: Any
) -> ReplayBuffer:
    """The run's replay buffer: `buffer_cls` (a custom sampler's class takes `trainer.v1.sampler.sampler_kwargs`)."""
    return buffer_cls(
        store, config, pad_token_id=pad_token_id, **parts, **dict(config.trainer.v1.sampler.sampler_kwargs)
    )


def build_tracking(config: PPOConfig, total_training_steps: int) -> Tracking:
    """The run's metrics sinks (`trainer.logger`), each told `trainer.project_name` and `experiment_name`."""
    return Tracking(
        config.trainer.logger,
        config.trainer.default_local_dir,
        config.trainer.project_name,
        config.trainer.experiment_name,
        config=dataclasses.asdict(config),
        total_steps=total_training_steps,
    )


def _health_check(agent_loops: Any, checkpoint_manager: CheckpointManager):
    """What a trainer waiting for generation checks: an agent-loop worker failed, or a replica
    was given up on (it would wait for that replica forever)."""

    def check() -> None:
        agent_loops.raise_if_failed()
        checkpoint_manager.raise_if_replica_failed()

    return check


def _pad_id(tokenizer: Any) -> int:
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id or 0)


def _progress_factory(config: PPOConfig):
    from tqdm.auto import tqdm

    def progress(total: int, initial: int = 0):
        return tqdm(
            total=total,
            initial=initial,
            desc="training",
            unit="step",
            dynamic_ncols=True,
            disable=not config.trainer.progress_bar,
            file=sys.stderr,
        )

    return progress
