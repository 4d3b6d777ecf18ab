"""The configuration schema: typed dataclasses per section, with every default in one place.

Key names follow verl's (`data.*`, `actor_rollout_ref.*`, `critic.*`, `reward.*`,
`algorithm.*`, `trainer.*`), so an old script's overrides mean the same thing here. Hydra
composes a `DictConfig` from this schema (registered as `ppo_trainer`), presets such as
`quickstart.yaml` and the command line; `load_config` turns it into these dataclasses once,
running each `__post_init__` check. Nothing reads the raw `DictConfig` after that.

Values rlbridge does not run (a `megatron` strategy, an `sglang` rollout) are accepted by the
schema so that old configs compose; `unsupported_features()` names them, and the dry run and a
real run report them instead of failing deep inside a worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import II

from core_v1.errors import UserError


class ConfigError(UserError, ValueError):
    """A configuration a user wrote is invalid; the message names the key and the fix."""


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def _one_of(key: str, value: Any, allowed: tuple) -> None:
    _require(value in allowed, f"{key}={value!r} is not one of {', '.join(map(str, allowed))}")


# --------------------------------------------------------------------------------------- data
@dataclass
class SamplerClassConfig:
    """verl's `data.sampler`: a `torch.utils.data.Sampler` of dataset indices that orders the
    training prompts (`core_v1.data.samplers`; a curriculum sampler is told each step's batch).
    `class_path` is a `.py` file (`file://` allowed) or a module (`pkg://a.b` or `a.b`)."""

    class_path: Optional[str] = None
    class_name: Optional[str] = None

    def __post_init__(self):
        _require(
            bool(self.class_path) == bool(self.class_name),
            "data.sampler needs both class_path (a module or .py file) and class_name, or neither",
        )


@dataclass
class DataConfig:
    tokenizer: Optional[str] = None
    # A path or a list of parquet paths. verl's default, so that a verl script that sets none means
    # what it meant there (a run without that file stops with one line naming the key).
    train_files: Any = "~/data/rlhf/gsm8k/train.parquet"
    # Unset: no validation. verl's default was ~/data/rlhf/gsm8k/test.parquet; rlbridge does not
    # validate on a file nobody named (docs/migration.md says so).
    val_files: Any = None
    prompt_key: str = "prompt"
    # verl's multimodal columns: a list of images per row (one per `<image>` in the prompt text),
    # read when the model is a vision-language model (core_v1.agent_loop.vision).
    image_key: str = "images"
    video_key: str = "videos"
    reward_fn_key: str = "data_source"
    max_prompt_length: int = 512
    max_response_length: int = 512
    train_batch_size: int = 1024
    gen_batch_size: Optional[int] = None
    val_batch_size: Optional[int] = None
    return_raw_input_ids: bool = False
    return_raw_chat: bool = True
    return_full_prompt: bool = False
    shuffle: bool = True
    seed: Optional[int] = None
    # > 0: read only this many rows of the train / validation files, as verl does: the first ones,
    # or with `shuffle` a random subset drawn with `seed` (0 when unset, so that a run and its resume
    # read the same rows; verl draws from fresh entropy then). -1: every row.
    train_max_samples: int = -1
    val_max_samples: int = -1
    filter_overlong_prompts: bool = False
    filter_overlong_prompts_workers: int = 1
    truncation: str = "error"
    dataloader_num_workers: int = 0
    validation_shuffle: bool = False
    trust_remote_code: bool = False
    custom_cls: dict = field(default_factory=lambda: {"path": None, "name": None})
    apply_chat_template_kwargs: dict = field(default_factory=dict)
    sampler: SamplerClassConfig = field(default_factory=SamplerClassConfig)

    def __post_init__(self):
        _require(self.train_batch_size > 0, "data.train_batch_size must be positive")
        _require(self.max_response_length > 0, "data.max_response_length must be positive")
        _one_of("data.truncation", self.truncation, ("error", "left", "right", "middle"))


# ------------------------------------------------------------------------ actor / rollout / ref
@dataclass
class ModelConfig:
    # verl's default (every release's trainer config), so a verl script that sets no model path
    # composes as it did there; a run then stops with one line naming this key if it is absent.
    path: str = "~/models/deepseek-llm-7b-chat"
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False
    use_fused_kernels: bool = False
    use_shm: bool = False
    external_lib: Optional[str] = None
    override_config: dict = field(default_factory=dict)
    custom_chat_template: Optional[str] = None
    # LoRA (core_v1/workers/lora.py): on when lora_rank > 0 or an adapter is given.
    lora_rank: int = 0
    lora_alpha: int = 16
    target_modules: Any = "all-linear"  # "all-linear" or a list of module names
    exclude_modules: Any = None
    lora_adapter_path: Optional[str] = None
    lora: dict = field(default_factory=dict)  # verl's Megatron-Bridge LoRA section, read as peft LoRA (lora.py)


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: list = field(default_factory=lambda: [0.9, 0.999])
    lr_warmup_steps: int = -1
    lr_warmup_steps_ratio: float = 0.0
    warmup_style: Optional[str] = None  # verl's older name for lr_scheduler_type
    lr_scheduler_type: str = "constant"
    min_lr_ratio: Optional[float] = 0.0  # null (verl 0.7's default) is valid for the constant schedule
    num_cycles: float = 0.5
    total_training_steps: int = -1
    clip_grad: Optional[float] = None

    def __post_init__(self):
        _require(self.lr > 0, "optim.lr must be positive")
        scheduler = self.warmup_style or self.lr_scheduler_type
        _one_of("optim.lr_scheduler_type", scheduler, ("constant", "cosine", "linear"))


@dataclass
class FSDPConfig:
    param_offload: bool = False
    optimizer_offload: bool = False
    offload_policy: bool = False
    reshard_after_forward: bool = True
    fsdp_size: int = -1
    forward_prefetch: bool = False
    model_dtype: str = "fp32"
    ulysses_sequence_parallel_size: int = 1
    use_torch_compile: bool = False
    wrap_policy: dict = field(default_factory=dict)
    mixed_precision: dict = field(default_factory=dict)
    strategy: str = "fsdp"


@dataclass
class PolicyLossConfig:
    loss_mode: str = "vanilla"
    # clip_cov and kl_cov (core_v1/algorithms/entropy_cov.py), verl's defaults: the share of valid tokens
    # each acts on, clip_cov's covariance window, and kl_cov's coefficient on |log r|.
    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0
    kl_cov_ratio: float = 0.0002
    ppo_kl_coef: float = 0.1


@dataclass
class CheckpointContentsConfig:
    save_contents: list = field(default_factory=lambda: ["model", "optimizer", "extra"])
    load_contents: list = II(".save_contents")  # verl's default (since 0.4.1): load what was saved
    async_save: bool = False


@dataclass
class MoELossConfig:
    """A mixture-of-experts actor's router losses, added per MoE layer as Megatron-core adds them
    (core_v1.algorithms.moe); verl sets them as `megatron.override_transformer_config.moe_*_coeff`."""

    aux_loss_coeff: float = 0.0  # the load-balancing loss's weight
    z_loss_coeff: float = 0.0  # the router z-loss's weight
    # Megatron's moe_router_load_balancing_type: `none` adds no load-balancing loss whatever its weight.
    load_balancing_type: str = "aux_loss"

    def __post_init__(self):
        _require(
            self.aux_loss_coeff >= 0 and self.z_loss_coeff >= 0,
            "actor_rollout_ref.actor.moe.aux_loss_coeff "
            f"and z_loss_coeff must be >= 0, got {self.aux_loss_coeff} and {self.z_loss_coeff}",
        )
        _one_of("actor_rollout_ref.actor.moe.load_balancing_type", self.load_balancing_type, ("aux_loss", "none"))


@dataclass
class ActorConfig:
    strategy: str = "fsdp"
    ppo_mini_batch_size: int = 256
    ppo_micro_batch_size: Optional[int] = None
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 16384
    grad_clip: float = 1.0
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = None
    clip_ratio_high: Optional[float] = None
    clip_ratio_c: float = 3.0
    # SAPO's gate temperatures (policy_loss.loss_mode=sapo): for tokens with A > 0, and for the rest.
    tau_pos: float = 1.0
    tau_neg: float = 1.05
    loss_agg_mode: str = "token-mean"
    entropy_coeff: float = 0.0
    entropy_from_logits_with_chunking: bool = False
    entropy_checkpointing: bool = False
    # sum_v pi(v)^2 per response token from the old-log-prob pass (`sum_pi_squared` on the batch),
    # which the optimal-token-baseline estimators need (core_v1.algorithms.advantages.otb) and
    # from which every step logs `variance_proxy/*` (core_v1.algorithms.variance_proxy).
    calculate_sum_pi_squared: bool = False
    # A vision-language model's vision encoder keeps its weights (verl's key; no effect on a text model).
    freeze_vision_tower: bool = False
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    ppo_epochs: int = 1
    shuffle: bool = False
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    moe: MoELossConfig = field(default_factory=MoELossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    megatron: dict = field(default_factory=dict)  # verl's Megatron settings: compose; no effect (shims/verl_keys)
    # Decoupled PPO (AReaL): clip around a proximal policy recomputed once per batch.
    use_decoupled_loss: bool = False
    behav_imp_weight_cap: Optional[float] = None

    def __post_init__(self):
        _require(self.ppo_mini_batch_size > 0, "actor_rollout_ref.actor.ppo_mini_batch_size must be positive")
        _require(self.ppo_epochs >= 1, "actor_rollout_ref.actor.ppo_epochs must be >= 1")
        _require(self.clip_ratio_c > 1.0, "actor_rollout_ref.actor.clip_ratio_c (dual clip) must be > 1.0")
        _require(
            self.tau_pos > 0 and self.tau_neg > 0,
            "actor_rollout_ref.actor.tau_pos and tau_neg (SAPO's "
            f"temperatures) must be positive, got {self.tau_pos} and {self.tau_neg}",
        )
        _one_of(
            "actor_rollout_ref.actor.loss_agg_mode",
            self.loss_agg_mode,
            ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"),
        )

    @property
    def micro_batch_size(self) -> Optional[int]:
        return self.ppo_micro_batch_size_per_gpu or self.ppo_micro_batch_size


@dataclass
class RefConfig:
    strategy: str = "fsdp"
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    megatron: dict = field(default_factory=dict)  # verl's Megatron settings: compose; no effect (shims/verl_keys)


@dataclass
class SamplingOverridesConfig:
    """Sampling for validation (verl's `rollout.val_kwargs`)."""

    temperature: float = 0.0
    top_k: int = -1
    top_p: float = 1.0
    n: int = 1
    do_sample: bool = False


@dataclass
class AgentConfig:
    num_workers: int = 2
    agent_loop_config_path: Optional[str] = None
    default_agent_loop: str = "single_turn_agent"
    custom_async_server: dict = field(default_factory=lambda: {"path": None, "name": None})


ISOLATION_MODES = ("auto", "namespaces", "seccomp", "audit-hook")  # core_v1/utils/isolation.py's, strongest first


@dataclass
class ToolSandboxConfig:
    """Code we did not write runs in killable, isolated worker processes (core_v1/agent_loop/tools/sandbox.py)."""

    enable: bool = True
    workers: int = 2  # worker processes per tool
    memory_mb: int = 1024  # address space each process of a call may add; also the size of its temp dir
    cpu_s: float = 30.0  # CPU seconds per call (soft = hard, locked)
    network: bool = False  # false: no network (socket() refused; a network namespace where the kernel allows it)
    max_processes: int = 64  # processes one call may run at once (RLIMIT_NPROC; where it applies: isolation.py)
    # auto: the strongest mode the kernel allows; a mode named here that the kernel refuses stops the run at
    # start-up with one line (the start-up line says which mode runs and what it does not cover)
    isolation: str = "auto"

    def __post_init__(self):
        key = "actor_rollout_ref.rollout.multi_turn.tool_sandbox"
        for name in ("workers", "memory_mb", "max_processes"):
            _require(getattr(self, name) >= 1, f"{key}.{name}={getattr(self, name)!r} must be >= 1")
        _require(self.cpu_s > 0, f"{key}.cpu_s={self.cpu_s!r} must be > 0 (CPU seconds per call)")
        _one_of(f"{key}.isolation", self.isolation, ISOLATION_MODES)


@dataclass
class MultiTurnConfig:
    enable: bool = False
    max_assistant_turns: Optional[int] = None
    max_user_turns: Optional[int] = None
    max_parallel_calls: int = 1
    max_tool_response_length: int = 256
    tool_response_truncate_side: str = "middle"
    tool_config_path: Optional[str] = None
    interaction_config_path: Optional[str] = None  # user-turn programs (core_v1/agent_loop/interaction.py)
    format: str = "hermes"
    tool_timeout_s: float = 30.0
    tool_sandbox: ToolSandboxConfig = field(default_factory=ToolSandboxConfig)
    function_tool_path: Optional[str] = None
    use_inference_chat_template: bool = False
    tokenization_sanity_check_mode: str = "strict"


@dataclass
class CheckpointEngineConfig:
    backend: str = "naive"
    update_weights_bucket_megabytes: int = 512
    master_port: Optional[int] = None


@dataclass
class RolloutConfig:
    name: str = "hf"
    mode: str = "async"
    temperature: float = 1.0
    top_k: int = -1
    top_p: float = 1.0
    do_sample: bool = True
    prompt_length: int = II("data.max_prompt_length")
    response_length: int = II("data.max_response_length")
    dtype: str = "bfloat16"
    gpu_memory_utilization: float = 0.5
    ignore_eos: bool = False
    enforce_eager: bool = False  # verl 0.7.1's default; True turns off CUDA graphs (vllm and hf engines)
    free_cache_engine: bool = True
    load_format: str = "auto"
    tensor_model_parallel_size: int = 1
    data_parallel_size: int = 1
    max_num_batched_tokens: int = 8192
    max_model_len: Optional[int] = None
    max_num_seqs: int = 1024
    log_prob_micro_batch_size: Optional[int] = None
    log_prob_micro_batch_size_per_gpu: Optional[int] = None
    log_prob_use_dynamic_bsz: bool = False
    log_prob_max_token_len_per_gpu: int = 16384
    enable_chunked_prefill: bool = True
    calculate_log_probs: bool = False
    n: int = 1
    # Separate rollout pool (separate_async); 0 nodes = colocated with the trainer.
    nnodes: int = 0
    n_gpus_per_node: int = II("trainer.n_gpus_per_node")
    # CPU: how many replicas to start and how many CPUs each takes.
    num_replicas: int = 1
    num_cpus_per_replica: float = 1.0
    # A replica whose process dies is restarted and given the current weights; one that dies more
    # than max_restarts times within restart_window_s seconds ends the run (0: never restarted).
    max_restarts: int = 3
    restart_window_s: float = 600.0
    val_kwargs: SamplingOverridesConfig = field(default_factory=SamplingOverridesConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    checkpoint_engine: CheckpointEngineConfig = field(default_factory=CheckpointEngineConfig)
    # V0 only (verl <= 0.7): a custom checkpoint manager class; V1 syncs through checkpoint_engine.
    checkpoint_manager_class: Optional[str] = None
    engine_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        _require(self.n >= 1, "actor_rollout_ref.rollout.n must be >= 1")
        # async is what runs; verl's sync is judged (no effect) before the config is built
        _one_of("actor_rollout_ref.rollout.mode", self.mode, ("async", "sync"))
        _require(self.temperature >= 0, "actor_rollout_ref.rollout.temperature must be >= 0")
        _require(self.num_replicas >= 1, "actor_rollout_ref.rollout.num_replicas must be >= 1")
        _require(self.max_restarts >= 0, "actor_rollout_ref.rollout.max_restarts must be >= 0 (0: never restart)")
        _require(self.restart_window_s > 0, "actor_rollout_ref.rollout.restart_window_s must be > 0")


@dataclass
class ActorRolloutRefConfig:
    hybrid_engine: bool = True
    nccl_timeout: int = 600
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)


# ------------------------------------------------------------------------------------- critic
@dataclass
class CriticModelConfig:
    path: Optional[str] = II("actor_rollout_ref.model.path")
    tokenizer_path: Optional[str] = None
    trust_remote_code: bool = False
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False
    external_lib: Optional[str] = None
    override_config: dict = field(default_factory=dict)


@dataclass
class CriticConfig:
    enable: Optional[bool] = None  # None: on exactly when the advantage estimator needs values (gae)
    strategy: str = "fsdp"
    rollout_n: int = II("actor_rollout_ref.rollout.n")
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-5))
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)
    ppo_mini_batch_size: int = II("actor_rollout_ref.actor.ppo_mini_batch_size")
    ppo_micro_batch_size: Optional[int] = None
    ppo_micro_batch_size_per_gpu: Optional[int] = None
    forward_micro_batch_size: Optional[int] = None
    forward_micro_batch_size_per_gpu: Optional[int] = None
    use_dynamic_bsz: bool = False
    ppo_max_token_len_per_gpu: int = 32768
    forward_max_token_len_per_gpu: int = 32768
    ppo_epochs: int = II("actor_rollout_ref.actor.ppo_epochs")
    shuffle: bool = False
    grad_clip: float = 1.0
    cliprange_value: float = 0.5
    loss_agg_mode: str = II("actor_rollout_ref.actor.loss_agg_mode")
    checkpoint: CheckpointContentsConfig = field(default_factory=CheckpointContentsConfig)
    megatron: dict = field(default_factory=dict)  # verl's Megatron settings: compose; no effect (shims/verl_keys)

    @property
    def micro_batch_size(self) -> Optional[int]:
        return self.ppo_micro_batch_size_per_gpu or self.ppo_micro_batch_size


# ------------------------------------------------------------------------------------- reward
@dataclass
class CustomRewardFunctionConfig:
    path: Optional[str] = None
    name: str = "compute_score"
    reward_kwargs: dict = field(default_factory=dict)


@dataclass
class RewardManagerConfig:
    name: str = "naive"
    source: str = "register"
    module: dict = field(default_factory=lambda: {"path": None})


@dataclass
class RewardModelConfig:
    """A sequence-classification reward model (core_v1/reward/reward_model.py says how each key acts)."""

    enable: bool = False
    enable_resource_pool: bool = False
    n_gpus_per_node: int = 0
    nnodes: int = 0
    model_path: Optional[str] = None
    rollout: dict = field(default_factory=dict)
    micro_batch_size_per_gpu: int = 8
    max_length: Optional[int] = None
    input_tokenizer: Optional[str] = None
    trust_remote_code: bool = False
    combine: str = "replace"  # replace | add

    def __post_init__(self):
        _one_of("reward.reward_model.combine", self.combine, ("replace", "add"))
        _require(self.micro_batch_size_per_gpu > 0, "reward.reward_model.micro_batch_size_per_gpu must be positive")


@dataclass
class SandboxFusionConfig:
    url: Optional[str] = None
    max_concurrent: int = 64
    memory_limit_mb: int = 1024


@dataclass
class RewardConfig:
    num_workers: int = 1
    reward_manager: RewardManagerConfig = field(default_factory=RewardManagerConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward_kwargs: dict = field(default_factory=dict)
    sandbox_fusion: SandboxFusionConfig = field(default_factory=SandboxFusionConfig)
    timeout_s: float = 60.0  # one sample's reward; a slower one marks that sample failed


# ---------------------------------------------------------------------------------- algorithm
@dataclass
class KLControlConfig:
    type: str = "fixed"
    kl_coef: float = 0.001
    horizon: int = 10000
    target_kl: float = 0.1


@dataclass
class FilterGroupsConfig:
    enable: bool = False
    metric: Optional[str] = None
    max_num_gen_batches: int = 0


@dataclass
class RolloutCorrectionConfig:
    rollout_is: Optional[str] = None  # null | token | sequence
    # A number U truncates the weights at U (TIS); verl's "L_U" text ("0.5_4.0") zeroes those outside [L, U]
    # (IcePop); parsed by core_v1.algorithms.rollout_correction.
    rollout_is_threshold: Any = 2.0
    rollout_is_batch_normalize: bool = False  # rescale the IS weights to mean 1 over the batch
    rollout_rs: Optional[str] = None  # null or comma-separated criteria: token_k1, seq_sum_k1, seq_mean_k2, ...
    # One bound per criterion, as verl writes it: a number, or text ("0.6_1.6" is lower_upper for a
    # *_k1 criterion; "0.6_1.6,2.5" one spec per criterion), parsed by core_v1.algorithms.rollout_correction.
    rollout_rs_threshold: Any = None
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"
    # rlbridge's own: in the async modes, keep each prompt group's advantages zero-sum under the
    # IS weights (core_v1.algorithms.rollout_correction.center_group_advantages says why).
    center_group_advantages: bool = True


@dataclass
class PFPPOConfig:
    """PF-PPO's resampling (core_v1.algorithms.pf_ppo), on when algorithm.use_pf_ppo=true."""

    reweight_method: str = "pow"  # pow | max_min | max_random
    weight_pow: float = 2.0

    def __post_init__(self):
        _one_of("algorithm.pf_ppo.reweight_method", self.reweight_method, ("pow", "max_min", "max_random"))


@dataclass
class AlgorithmConfig:
    gamma: float = 1.0
    lam: float = 1.0
    adv_estimator: str = "gae"
    norm_adv_by_std_in_grpo: bool = True
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    use_pf_ppo: bool = False
    pf_ppo: PFPPOConfig = field(default_factory=PFPPOConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    # GDPO (adv_estimator=gdpo): the entries of the reward function's dict result normalised one by
    # one, and their weights in the sum (default all 1); core_v1.algorithms.advantages.gdpo.
    gdpo_reward_keys: Optional[list] = None
    gdpo_reward_weights: Optional[list] = None

    def __post_init__(self):
        if self.adv_estimator != "gdpo":
            return
        keys, weights = self.gdpo_reward_keys, self.gdpo_reward_weights
        _require(
            bool(keys),
            "algorithm.adv_estimator=gdpo needs algorithm.gdpo_reward_keys: the entries of the "
            "reward function's dict result to normalise one by one, e.g. "
            "algorithm.gdpo_reward_keys='[accuracy_reward,format_reward]'",
        )
        _require(
            weights is None or len(weights) == len(keys),
            f"algorithm.gdpo_reward_weights has {len(weights or [])} weights for {len(keys)} "
            "algorithm.gdpo_reward_keys; give one weight per key (or none for equal weights)",
        )
        # verl's trainer never hands this switch to its GDPO estimator, which always divides.
        _require(
            self.norm_adv_by_std_in_grpo,
            "algorithm.norm_adv_by_std_in_grpo=false does not apply to "
            "adv_estimator=gdpo: GDPO divides each reward component by its group "
            "std, as verl runs it; set it to true (the quickstart preset sets "
            "it false for GRPO) or remove the setting",
        )


# ------------------------------------------------------------------------------- distillation
@dataclass
class DistillationLossConfig:
    """How the teacher's log-probs enter the actor's loss (core_v1.algorithms.distillation);
    verl's keys and defaults."""

    loss_mode: str = "k3"  # kl/k1, abs, mse/k2, low_var_kl/k3, forward_kl_topk
    topk: Optional[int] = 128  # forward_kl_topk: the teacher's k most likely tokens per position
    log_prob_min_clamp: Optional[float] = -10.0  # forward_kl_topk: both sides' log-probs clamped below
    use_task_rewards: bool = True  # false: the distillation loss is the whole loss
    distillation_loss_coef: float = 1.0  # its weight beside the RL loss (use_task_rewards=true)
    loss_max_clamp: Optional[float] = None
    use_policy_gradient: bool = False  # true: -divergence is each token's advantage in PPO's surrogate
    policy_loss_mode: str = "vanilla"  # the surrogate used as a reward; verl has only vanilla
    clip_ratio: float = 0.2
    clip_ratio_low: Optional[float] = 0.2
    clip_ratio_high: Optional[float] = 0.2


def _default_teachers() -> dict:
    return {"teacher_model": {"key": None, "model_path": None}}


@dataclass
class DistillationConfig:
    """On-policy distillation (verl 0.8+): teacher models score the student's sampled tokens on the
    training ranks, as the reference does (core_v1.workers.distillation says how)."""

    enabled: bool = False
    # name -> {model_path, key}. verl's single `teacher_model` entry, or several named entries, each
    # routed to the rows whose `teacher_key` column equals its `key`.
    teacher_models: dict = field(default_factory=_default_teachers)
    teacher_key: str = "data_source"
    distillation_loss: DistillationLossConfig = field(default_factory=DistillationLossConfig)


# ------------------------------------------------------------------------------------ trainer
@dataclass
class CustomSamplerConfig:
    path: Optional[str] = None
    name: Optional[str] = None


@dataclass
class SamplerConfig:
    max_off_policy_threshold: int = 8
    max_off_policy_strategy: str = "drop"
    custom_sampler: CustomSamplerConfig = field(default_factory=CustomSamplerConfig)
    sampler_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        _require(self.max_off_policy_threshold >= 1, "trainer.v1.sampler.max_off_policy_threshold must be >= 1")
        _one_of("trainer.v1.sampler.max_off_policy_strategy", self.max_off_policy_strategy, ("drop", "wait"))


@dataclass
class AsyncModeConfig:
    """What both async modes take (`trainer.v1.colocate_async` / `trainer.v1.separate_async`)."""

    num_warmup_batches: int = 1
    # true: every request generates whole on the weights it started with and each batch is exactly
    # the groups submitted for it, so runs with one seed (a resumed run too) give the same numbers;
    # false: timing decides where an update cuts a request and which groups fill a batch (faster).
    reproducible: bool = False


@dataclass
class ColocateAsyncConfig(AsyncModeConfig):
    pass


@dataclass
class SeparateAsyncConfig(AsyncModeConfig):
    parameter_sync_step: int = 4


@dataclass
class TrainerV1Config:
    trainer_mode: str = "sync"
    # Modules or .py files imported before the run (driver and agent-loop workers), so that the
    # trainer modes, estimators, losses, scorers and backends they register can be named here.
    plugins: list = field(default_factory=list)
    colocate_async: ColocateAsyncConfig = field(default_factory=ColocateAsyncConfig)
    separate_async: SeparateAsyncConfig = field(default_factory=SeparateAsyncConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    # A V0 `ActorRolloutRefWorker` subclass ("package.module:Name" or "file.py:Name") whose methods
    # (compute_log_prob, update_actor, ...) V1's training ranks call with DataProto batches.
    worker_class: Optional[str] = None
    # Where a run's parts live. ray: the rollout replicas, the agent-loop workers and the transfer
    # store are Ray actors, the batches stay out of the driver. local: all of them in the driver
    # process, without Ray (one training rank; rollout.max_restarts does not apply: a replica that
    # fails fails the driver): a small run starts in a fraction of the time, and a debugger stops
    # in a reward function or an agent loop.
    placement: str = "ray"

    def __post_init__(self):
        _one_of("trainer.v1.placement", self.placement, ("ray", "local"))


@dataclass
class TrainerConfig:
    use_v1: bool = True
    dry_run: bool = False
    # Two CPU steps of this run on a tiny stand-in model and a few of its own rows, with every output
    # in a temporary directory (core_v1/smoke.py): checks the user's own code before a long run.
    smoke: bool = False
    v1: TrainerV1Config = field(default_factory=TrainerV1Config)
    balance_batch: bool = True
    total_epochs: int = 30
    total_training_steps: Optional[int] = None
    project_name: str = "rlbridge"
    experiment_name: str = "run"
    logger: Any = field(default_factory=lambda: ["console"])
    log_val_generations: int = 0
    rollout_data_dir: Optional[str] = None  # each step's trained samples to <dir>/<step>.jsonl, as verl dumps them
    validation_data_dir: Optional[str] = None  # each validation's samples to <dir>/<step>.jsonl, as verl dumps them
    nnodes: int = 1
    n_gpus_per_node: int = 8
    device: str = "auto"  # auto | cpu | cuda (npu, verl's Ascend option, composes but is refused)
    save_freq: int = -1
    resume_mode: str = "auto"  # auto | disable | resume_path
    resume_from_path: Optional[str] = None
    test_freq: int = -1
    val_before_train: bool = True
    val_only: bool = False  # validate the initial (or resumed) policy once and train nothing
    critic_warmup: int = 0
    default_hdfs_dir: Optional[str] = None
    default_local_dir: str = "checkpoints/${trainer.project_name}/${trainer.experiment_name}"
    max_actor_ckpt_to_keep: Optional[int] = None
    max_critic_ckpt_to_keep: Optional[int] = None
    del_local_ckpt_after_load: bool = False
    seed: int = 1
    progress_bar: bool = True
    ray_wait_register_center_timeout: int = 300

    def __post_init__(self):
        _one_of("trainer.resume_mode", self.resume_mode, ("auto", "disable", "resume_path"))
        _one_of("trainer.device", self.device, ("auto", "cpu", "cuda", "npu"))  # npu: composes, refused
        # core_v1.smoke rewrites the composed config and clears the flag; still set, nobody did.
        _require(
            not self.smoke,
            "trainer.smoke=true is carried out by `python -m core_v1.main_ppo` where it "
            "composes the config, and this launcher did not; launch through core_v1.main_ppo, or call "
            "core_v1.smoke.smoke_config(raw_config, workdir) before building the typed config",
        )
        if isinstance(self.logger, str):
            self.logger = [self.logger]
        self.logger = list(self.logger or [])  # null: no trackers (verl's scripts write logger=null too)
        known = ("console", "jsonl", "tensorboard", "wandb", "mlflow", "swanlab", "file")
        for name in self.logger:
            _one_of("trainer.logger", name, known)


# ------------------------------------------------------------------------------ the whole run
@dataclass
class ProfilerConfig:
    tool: Optional[str] = None
    steps: Optional[list] = None
    profile_continuous_steps: bool = False
    save_path: str = "outputs/profile"
    global_tool_config: dict = field(default_factory=dict)


@dataclass
class RayKwargsConfig:
    ray_init: dict = field(default_factory=lambda: {"num_cpus": None})
    timeline_json_file: Optional[str] = None


@dataclass
class SkipRolloutConfig:
    enable: bool = False
    dump_dir: Optional[str] = None


@dataclass
class SkipConfig:
    rollout: SkipRolloutConfig = field(default_factory=SkipRolloutConfig)


@dataclass
class PPOConfig:
    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    global_profiler: ProfilerConfig = field(default_factory=ProfilerConfig)
    ray_kwargs: RayKwargsConfig = field(default_factory=RayKwargsConfig)
    skip: SkipConfig = field(default_factory=SkipConfig)
    distillation: DistillationConfig = field(default_factory=DistillationConfig)

    def __post_init__(self):
        actor = self.actor_rollout_ref.actor
        _require(
            actor.ppo_mini_batch_size <= self.data.train_batch_size,
            f"actor_rollout_ref.actor.ppo_mini_batch_size ({actor.ppo_mini_batch_size}) must be <= "
            f"data.train_batch_size ({self.data.train_batch_size}); both count prompts",
        )
        if self.critic.enable is None:
            self.critic.enable = self.algorithm.adv_estimator == "gae"

    @property
    def use_critic(self) -> bool:
        return bool(self.critic.enable)

    @property
    def use_reference_policy(self) -> bool:
        return self.actor_rollout_ref.actor.use_kl_loss or self.algorithm.use_kl_in_reward


def unsupported_features(cfg: PPOConfig) -> list[str]:
    """Values the schema accepts (old configs compose) but rlbridge cannot run, each with the fix."""
    found = []
    aro = cfg.actor_rollout_ref
    for key, value in (
        ("actor_rollout_ref.actor.strategy", aro.actor.strategy),
        ("actor_rollout_ref.ref.strategy", aro.ref.strategy),
        ("critic.strategy", cfg.critic.strategy),
    ):
        if value not in ("fsdp", "fsdp2"):
            found.append(f"not supported: {value} strategy ({key}); use fsdp")
    if aro.rollout.mode != "async":  # the shim drops verl's `sync`; anything else is no mode of ours
        found.append(
            f"not supported: {aro.rollout.mode} rollout mode (actor_rollout_ref.rollout.mode); rollout is "
            "server-based (async) on V1"
        )
    if aro.rollout.name not in ("hf", "vllm"):
        found.append(
            f"not supported: {aro.rollout.name} rollout engine (actor_rollout_ref.rollout.name); use hf or vllm"
        )
    if cfg.trainer.device == "npu":
        found.append("not supported: npu device (trainer.device); use cuda or cpu")
    if cfg.trainer.use_v1:
        found += _v0_only_features(cfg)
    if cfg.trainer.val_only and not cfg.data.val_files:
        found.append(
            "trainer.val_only=true validates and trains nothing, but there is nothing to validate on: "
            "set data.val_files"
        )
    if cfg.reward.reward_model.enable and not cfg.reward.reward_model.model_path:
        found.append(
            "reward.reward_model.enable=true needs reward.reward_model.model_path (verl: "
            "reward_model.model.path), a sequence-classification checkpoint"
        )
    return found


def _v0_only_features(cfg: PPOConfig) -> list[str]:
    """V0 features V1 does not carry yet (shims.rename_table.V0_ONLY_FEATURES lists the same)."""
    found = []
    if cfg.actor_rollout_ref.rollout.checkpoint_manager_class:
        found.append(
            "not supported on V1 yet: a custom checkpoint manager class "
            "(actor_rollout_ref.rollout.checkpoint_manager_class); add trainer.use_v1=false to run it on V0, "
            "or sync weights through actor_rollout_ref.rollout.checkpoint_engine.backend"
        )
    return found
