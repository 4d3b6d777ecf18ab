"""Prove the key table: every key it marks "used" reaches what rlbridge builds or runs.

The key table (`shims.verl_keys.verdicts`) marks a verl key "used" when it lands on a key of the
schema that no no-op or refused row names. Here each such key is set to a value other than its
default and followed to where it acts: the model config, the training engines (optimizer, LR
schedule, micro-batching, the loss options of the update), the reference engine, the dataset, the
agent loop's sampling parameters and tool settings, the rollout engine's arguments, the KL
controller, the rollout-correction settings, the dry-run plan. Small real constructions on the CPU
(a tiny model saved with `save_pretrained`), seconds in all.

Where a key's effect lives in the trainer's loop (the step schedule, checkpoints, validation) or
needs several ranks (FSDP sharding and offload, the process group's timeout), the key is listed in
`ELSEWHERE` with the test that sets it and checks its effect, or in `NEEDS_RANKS`; the walk checks that every used key is
covered one way or the other, and that the named test does set the key.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest
from omegaconf import OmegaConf

from core_v1.config import load_config
from core_v1.config.schema import PPOConfig
from core_v1.workers.distillation import distillation_loss_of
from shims.verl_keys import verdicts
from shims.verl_keys.verdicts import Verdict

ROOT = Path(__file__).resolve().parents[2]
ARO = "actor_rollout_ref"


def used_keys() -> list[str]:
    found = {
        verdicts.declared(key).v1_key for key in verdicts.verl_keys() if verdicts.declared(key).verdict is Verdict.USED
    }
    return sorted(found)


@dataclass(frozen=True)
class Probe:
    """`key=value` acts where `read(built)` looks; it must find `expect` (the value itself by default)."""

    value: Any
    read: Callable[[Any], Any]
    expect: Any = None

    @property
    def expected(self) -> Any:
        return self.value if self.expect is None else self.expect


def token(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    if isinstance(value, dict):
        return f"{key}={{{','.join(f'{k}:{v}' for k, v in value.items())}}}"
    if isinstance(value, list):
        return f"{key}=[{','.join(map(str, value))}]"
    return f"{key}={value}"


def schema_default(key: str) -> Any:
    value = OmegaConf.select(OmegaConf.structured(PPOConfig), key, throw_on_resolution_failure=False)
    return OmegaConf.to_container(value) if OmegaConf.is_config(value) else value


# ----------------------------------------------------------------------------- what gets built
@pytest.fixture(scope="module")
def tiny(tiny_assets, tmp_path_factory):
    """The tiny model and data, an agent-loop file and a reward function file."""
    folder = tmp_path_factory.mktemp("probe_files")
    (folder / "loops.yaml").write_text(
        "- name: my_loop\n  _target_: core_v1.agent_loop.single_turn.SingleTurnAgentLoop\n"
    )
    (folder / "reward.py").write_text(
        "def my_score(data_source, solution_str, ground_truth, extra_info=None):\n    return 0.0\n"
    )
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(
        pa.Table.from_pylist(
            [{"question": [{"role": "user", "content": f"{i}+1="}], "data_source": "mine"} for i in range(6)]
        ),
        folder / "questions.parquet",
    )
    (folder / "tools.py").write_text('''from core_v1.agent_loop.tools.function_tool import function_tool


@function_tool
def walk_probe_tool(a: int) -> int:
    """Echo.

    Args:
        a: a number
    """
    return a
''')
    return {
        **tiny_assets,
        "loops": folder / "loops.yaml",
        "reward": folder / "reward.py",
        "questions": folder / "questions.parquet",
        "tools": folder / "tools.py",
        "coded": with_its_own_code(tiny_assets["model"], folder / "coded"),
    }


CODE = '''"""Qwen2's classes under names of this folder's own: loaded only with trust_remote_code."""
from transformers import (AutoModel, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
                          Qwen2ForTokenClassification, Qwen2Model)


class CodedConfig(Qwen2Config):
    pass


class CodedModel(Qwen2Model):
    config_class = CodedConfig


AutoModel.register(CodedConfig, CodedModel)  # the token-classification head builds its body through AutoModel


class CodedForCausalLM(Qwen2ForCausalLM):
    config_class = CodedConfig


class CodedForTokenClassification(Qwen2ForTokenClassification):
    config_class = CodedConfig


class CodedTokenizer(PreTrainedTokenizerFast):
    pass
'''


def with_its_own_code(model: Path, folder: Path) -> Path:
    """A copy of `model` whose config and tokenizer name classes of a file in the folder (`auto_map`),
    as a model that ships its own code does; without trust_remote_code transformers loads Qwen2's."""
    import json
    import shutil

    shutil.copytree(model, folder)
    (folder / "modeling_coded.py").write_text(CODE)
    auto_maps = {
        "config.json": {
            "AutoConfig": "modeling_coded.CodedConfig",
            "AutoModelForCausalLM": "modeling_coded.CodedForCausalLM",
            "AutoModelForTokenClassification": "modeling_coded.CodedForTokenClassification",
        },
        "tokenizer_config.json": {"AutoTokenizer": [None, "modeling_coded.CodedTokenizer"]},
    }
    for name, auto_map in auto_maps.items():
        settings = json.loads((folder / name).read_text())
        (folder / name).write_text(json.dumps({**settings, "auto_map": auto_map}))
    return folder


def config_for(tiny, overrides: list[str]) -> PPOConfig:
    return load_config(
        [
            f"{ARO}.model.path={tiny['model']}",
            f"data.train_files={tiny['train']}",
            f"data.val_files={tiny['val']}",
            *(filled(tiny, o) for o in overrides),
        ],
        config_name="quickstart",
    )


def filled(tiny, value: Any) -> Any:
    """`value` with `{model}`, `{train}`, `{loops}` and `{reward}` replaced by this run's files."""
    if not isinstance(value, str):
        return value
    for name, path in tiny.items():
        value = value.replace("{" + name + "}", str(path))
    return value


def actor_engine(config):
    from core_v1.workers.actor import ActorEngine

    return ActorEngine(config)


def critic_engine(config):
    from core_v1.workers.critic import CriticEngine

    return CriticEngine(config)


def reference_engine(config):
    from core_v1.workers.reference import ReferenceEngine

    return ReferenceEngine(config)


def schedule(engine) -> dict:
    """The LR schedule's settings as the engine's `LambdaLR` holds them."""
    return dict(engine.lr_scheduler.lr_lambdas[0].keywords)


def group0(engine) -> dict:
    return engine.optimizer.param_groups[0]


def loss_options(engine) -> dict:
    from tensordict import TensorDict

    return engine._policy_loss_options(TensorDict({}, batch_size=[]))


def optim_probes(prefix: str) -> dict[str, Probe]:
    return {
        f"{prefix}.optim.lr": Probe(
            3e-4, lambda e: group0(e)["initial_lr"] if "initial_lr" in group0(e) else group0(e)["lr"]
        ),
        f"{prefix}.optim.betas": Probe([0.8, 0.9], lambda e: list(group0(e)["betas"])),
        f"{prefix}.optim.weight_decay": Probe(0.05, lambda e: group0(e)["weight_decay"]),
        f"{prefix}.optim.lr_scheduler_type": Probe("cosine", lambda e: schedule(e)["schedule"]),
        f"{prefix}.optim.lr_warmup_steps": Probe(3, lambda e: schedule(e)["warmup_steps"]),
        f"{prefix}.optim.min_lr_ratio": Probe(0.25, lambda e: schedule(e)["min_lr_ratio"]),
        f"{prefix}.optim.num_cycles": Probe(1.5, lambda e: schedule(e)["num_cycles"]),
        f"{prefix}.optim.total_training_steps": Probe(40, lambda e: schedule(e)["total_steps"]),
        f"{prefix}.optim.clip_grad": Probe(0.7, lambda e: e._max_grad_norm),
    }


def older_optim_probes(prefix: str, grad_clip_key: str) -> dict[str, Probe]:
    """verl's older spellings, which the newer keys above override."""
    return {
        f"{prefix}.optim.warmup_style": Probe("linear", lambda e: schedule(e)["schedule"]),
        f"{prefix}.optim.lr_warmup_steps_ratio": Probe(0.25, lambda e: schedule(e)["warmup_steps"], expect=10),
        grad_clip_key: Probe(0.3, lambda e: e._max_grad_norm),
    }


def older_optim_context(prefix: str) -> list[str]:
    return [f"{prefix}.optim.lr_warmup_steps=-1", f"{prefix}.optim.total_training_steps=40"]


GROUPS: dict[str, tuple[Callable, list[str], dict[str, Probe]]] = {}


def group(name: str, build: Callable, context: list[str], probes: dict[str, Probe]) -> None:
    GROUPS[name] = (build, context, probes)


CONFIG_ONLY_CONTEXT: list[str] = []
CONFIG_ONLY: dict[str, Probe] = {}


def config_only(build: Callable, context: list[str], probes: dict[str, Probe]) -> None:
    """Probes whose build needs nothing but the config and is cheap: they share one config (one load
    for all of them, the group "config-only"), each probe building what it reads."""
    CONFIG_ONLY_CONTEXT.extend(context)
    CONFIG_ONLY.update(
        {
            key: Probe(probe.value, lambda config, probe=probe: probe.read(build(config)), probe.expect)
            for key, probe in probes.items()
        }
    )


group(
    "actor",
    actor_engine,
    [],
    {
        **optim_probes(f"{ARO}.actor"),
        f"{ARO}.actor.ppo_mini_batch_size": Probe(2, lambda e: e._mini_batch_rows, expect=2 * 16),
        f"{ARO}.actor.ppo_micro_batch_size_per_gpu": Probe(3, lambda e: e._micro_batch_rows),
        f"{ARO}.rollout.log_prob_micro_batch_size_per_gpu": Probe(5, lambda e: e._log_prob_rows),
        f"{ARO}.actor.clip_ratio": Probe(0.3, lambda e: loss_options(e)["clip_ratio"]),
        f"{ARO}.actor.clip_ratio_low": Probe(0.1, lambda e: loss_options(e)["clip_ratio_low"]),
        f"{ARO}.actor.clip_ratio_high": Probe(0.28, lambda e: loss_options(e)["clip_ratio_high"]),
        f"{ARO}.actor.clip_ratio_c": Probe(4.0, lambda e: loss_options(e)["clip_ratio_c"]),
        f"{ARO}.actor.tau_pos": Probe(0.5, lambda e: loss_options(e)["tau_pos"]),
        f"{ARO}.actor.tau_neg": Probe(0.6, lambda e: loss_options(e)["tau_neg"]),
        **{
            f"{ARO}.actor.policy_loss.{name}": Probe(value, lambda e, name=name: loss_options(e)[name])
            for name, value in (
                ("clip_cov_ratio", 0.001),
                ("clip_cov_lb", 0.5),
                ("clip_cov_ub", 3.0),
                ("kl_cov_ratio", 0.002),
                ("ppo_kl_coef", 1.0),
            )
        },
        f"{ARO}.actor.loss_agg_mode": Probe("seq-mean-token-mean", lambda e: loss_options(e)["loss_agg_mode"]),
        f"{ARO}.actor.policy_loss.loss_mode": Probe("gspo", lambda e: e._loss_mode),
        f"{ARO}.actor.entropy_coeff": Probe(0.01, lambda e: e._update_computes_entropy, expect=True),
        f"{ARO}.actor.use_kl_loss": Probe(True, lambda e: "ref_log_prob" in e._update_fields(_batch())),
        f"{ARO}.actor.calculate_sum_pi_squared": Probe(True, lambda e: len(e.compute_log_prob(_batch())), expect=3),
        f"{ARO}.model.enable_gradient_checkpointing": Probe(True, lambda e: e.model.is_gradient_checkpointing),
        f"{ARO}.model.override_config": Probe(
            {"attention_dropout": 0.25}, lambda e: e.model.config.attention_dropout, expect=0.25
        ),
        f"{ARO}.actor.fsdp_config.model_dtype": Probe("bf16", lambda e: str(e.model.dtype), expect="torch.bfloat16"),
        f"{ARO}.rollout.temperature": Probe(0.7, lambda e: e.temperature),
        f"{ARO}.model.path": Probe("{coded}", lambda e: e.model.name_or_path),
        f"{ARO}.model.trust_remote_code": Probe(True, lambda e: type(e.model.config).__name__, expect="CodedConfig"),
        f"{ARO}.actor.checkpoint.save_contents": Probe(["model"], lambda e: list(e._contents.save_contents)),
        f"{ARO}.actor.checkpoint.load_contents": Probe(["model"], lambda e: list(e._contents.load_contents)),
    },
)
group(
    "actor-older-keys",
    actor_engine,
    [*older_optim_context(f"{ARO}.actor"), f"{ARO}.actor.ppo_micro_batch_size_per_gpu=null"],
    {
        **older_optim_probes(f"{ARO}.actor", f"{ARO}.actor.grad_clip"),
        f"{ARO}.actor.ppo_micro_batch_size": Probe(4, lambda e: e._micro_batch_rows),
        f"{ARO}.rollout.log_prob_micro_batch_size": Probe(6, lambda e: e._log_prob_rows),
        f"{ARO}.model.override_config.model_config": Probe(
            {"attention_dropout": 0.5}, lambda e: e.model.config.attention_dropout, expect=0.5
        ),
        **{
            f"algorithm.rollout_correction.{key}": Probe(
                value, lambda e, key=key: loss_options(e)["rollout_correction"][key]
            )
            for key, value in (
                ("rollout_is", "sequence"),
                ("rollout_is_threshold", 3.0),
                ("rollout_is_batch_normalize", True),
                ("rollout_rs", "seq_mean_k3"),
                ("rollout_rs_threshold", 0.01),
                ("bypass_mode", True),
                ("loss_type", "reinforce"),
            )
        },
    },
)
group(
    "actor-dynamic-batches",
    actor_engine,
    [f"{ARO}.actor.use_dynamic_bsz=true", f"{ARO}.rollout.log_prob_use_dynamic_bsz=true"],
    {
        f"{ARO}.actor.use_dynamic_bsz": Probe(True, lambda e: type(e._micro_batch_rows).__name__, expect="TokenBudget"),
        f"{ARO}.actor.ppo_max_token_len_per_gpu": Probe(999, lambda e: e._micro_batch_rows.max_tokens),
        f"{ARO}.rollout.log_prob_use_dynamic_bsz": Probe(
            True, lambda e: type(e._log_prob_rows).__name__, expect="TokenBudget"
        ),
        f"{ARO}.rollout.log_prob_max_token_len_per_gpu": Probe(777, lambda e: e._log_prob_rows.max_tokens),
    },
)
group(
    "actor-lora",
    actor_engine,
    [f"{ARO}.model.lora_rank=4"],
    {
        f"{ARO}.model.lora_rank": Probe(4, lambda e: e.model.peft_config["default"].r),
        f"{ARO}.model.lora_alpha": Probe(8, lambda e: e.model.peft_config["default"].lora_alpha),
        f"{ARO}.model.target_modules": Probe(
            ["q_proj", "v_proj"], lambda e: sorted(e.model.peft_config["default"].target_modules)
        ),
        f"{ARO}.model.exclude_modules": Probe(
            ["k_proj"], lambda e: sorted(e.model.peft_config["default"].exclude_modules)
        ),
    },
)
group(
    "actor-bridge-lora",
    actor_engine,
    [],
    {
        f"{ARO}.model.lora.rank": Probe(2, lambda e: e.model.peft_config["default"].r),
        f"{ARO}.model.lora.alpha": Probe(6, lambda e: e.model.peft_config["default"].lora_alpha),
        f"{ARO}.model.lora.target_modules": Probe(
            ["o_proj"], lambda e: sorted(e.model.peft_config["default"].target_modules)
        ),
        f"{ARO}.model.lora.exclude_modules": Probe(
            ["q_proj"], lambda e: sorted(e.model.peft_config["default"].exclude_modules)
        ),
        f"{ARO}.model.lora.dropout": Probe(0.1, lambda e: e.model.peft_config["default"].lora_dropout),
        f"{ARO}.model.lora.lora_A_init_method": Probe(
            "kaiming", lambda e: e.model.peft_config["default"].init_lora_weights, expect=True
        ),
    },
)
group(
    "critic",
    critic_engine,
    [f"{ARO}.actor.ppo_mini_batch_size=4"],
    {
        **optim_probes("critic"),
        "critic.ppo_mini_batch_size": Probe(2, lambda e: e._mini_batch_rows, expect=2 * 16),
        "critic.ppo_micro_batch_size_per_gpu": Probe(3, lambda e: e._micro_batch_rows),
        "critic.forward_micro_batch_size_per_gpu": Probe(5, lambda e: e._forward_rows),
        "critic.model.enable_gradient_checkpointing": Probe(True, lambda e: e.model.is_gradient_checkpointing),
        "critic.model.override_config": Probe(
            {"attention_dropout": 0.25}, lambda e: e.model.config.attention_dropout, expect=0.25
        ),
        "critic.fsdp.model_dtype": Probe("bf16", lambda e: str(e.model.dtype), expect="torch.bfloat16"),
        "critic.checkpoint.save_contents": Probe(["model"], lambda e: list(e._contents.save_contents)),
        "critic.model.path": Probe("{coded}", lambda e: e.model.name_or_path),
        "critic.model.trust_remote_code": Probe(True, lambda e: type(e.model.config).__name__, expect="CodedConfig"),
        "critic.checkpoint.load_contents": Probe(["model"], lambda e: list(e._contents.load_contents)),
        "critic.loss_agg_mode": Probe(
            "seq-mean-token-sum", lambda e: value_loss_follows(e, "critic.loss_agg_mode"), expect=True
        ),
    },
)
group(
    "critic-older-keys",
    critic_engine,
    older_optim_context("critic"),
    {
        **older_optim_probes("critic", "critic.grad_clip"),
        "critic.ppo_micro_batch_size": Probe(4, lambda e: e._micro_batch_rows),
        "critic.forward_micro_batch_size": Probe(6, lambda e: e._forward_rows),
        "critic.rollout_n": Probe(2, lambda e: e._mini_batch_rows, expect=4 * 2),
        "critic.model.override_config.model_config": Probe(
            {"attention_dropout": 0.5}, lambda e: e.model.config.attention_dropout, expect=0.5
        ),
    },
)
group(
    "critic-dynamic-batches",
    critic_engine,
    ["critic.use_dynamic_bsz=true"],
    {
        "critic.use_dynamic_bsz": Probe(True, lambda e: type(e._micro_batch_rows).__name__, expect="TokenBudget"),
        "critic.ppo_max_token_len_per_gpu": Probe(999, lambda e: e._micro_batch_rows.max_tokens),
        "critic.forward_max_token_len_per_gpu": Probe(555, lambda e: e._forward_rows.max_tokens),
    },
)
group(
    "reference",
    reference_engine,
    [],
    {
        f"{ARO}.ref.log_prob_micro_batch_size_per_gpu": Probe(3, lambda e: e._micro_batch_rows),
        f"{ARO}.ref.fsdp_config.model_dtype": Probe("bf16", lambda e: str(e.model.dtype), expect="torch.bfloat16"),
    },
)
group(
    "reference-older-keys",
    reference_engine,
    [f"{ARO}.ref.log_prob_use_dynamic_bsz=false"],
    {
        f"{ARO}.ref.log_prob_micro_batch_size": Probe(4, lambda e: e._micro_batch_rows),
    },
)
group(
    "reference-dynamic-batches",
    reference_engine,
    [],
    {
        f"{ARO}.ref.log_prob_use_dynamic_bsz": Probe(
            True, lambda e: type(e._micro_batch_rows).__name__, expect="TokenBudget"
        ),
        f"{ARO}.ref.log_prob_max_token_len_per_gpu": Probe(321, lambda e: e._micro_batch_rows.max_tokens),
    },
)


# ---------------------------------------------------------------------- rollout and agent loop
def sampling(config, validate=False) -> dict:
    from core_v1.agent_loop.manager import sampling_params_for

    return sampling_params_for(config, validate)


def engine_arguments(config) -> dict:
    from core_v1.trainer.setup import rollout_engine_kwargs

    return rollout_engine_kwargs(config.actor_rollout_ref.rollout)


config_only(
    lambda config: config,
    [f"{ARO}.rollout.val_kwargs.do_sample=true"],
    {
        f"{ARO}.rollout.top_p": Probe(0.9, lambda c: sampling(c)["top_p"]),
        f"{ARO}.rollout.top_k": Probe(5, lambda c: sampling(c)["top_k"]),
        f"{ARO}.rollout.ignore_eos": Probe(True, lambda c: sampling(c)["ignore_eos"]),
        f"{ARO}.rollout.response_length": Probe(7, lambda c: sampling(c)["max_tokens"]),
        f"{ARO}.rollout.val_kwargs.temperature": Probe(0.3, lambda c: sampling(c, True)["temperature"]),
        f"{ARO}.rollout.val_kwargs.top_p": Probe(0.8, lambda c: sampling(c, True)["top_p"]),
        f"{ARO}.rollout.val_kwargs.top_k": Probe(3, lambda c: sampling(c, True)["top_k"]),
        f"{ARO}.rollout.gpu_memory_utilization": Probe(0.3, lambda c: engine_arguments(c)["gpu_memory_utilization"]),
        f"{ARO}.rollout.max_num_seqs": Probe(17, lambda c: engine_arguments(c)["max_num_seqs"]),
        f"{ARO}.rollout.max_num_batched_tokens": Probe(333, lambda c: engine_arguments(c)["max_num_batched_tokens"]),
        f"{ARO}.rollout.enforce_eager": Probe(True, lambda c: engine_arguments(c)["enforce_eager"]),
        f"{ARO}.rollout.max_model_len": Probe(99, lambda c: engine_arguments(c)["max_model_len"]),
    },
)
group(
    "sampling-switches",
    lambda config: config,
    [f"{ARO}.rollout.val_kwargs.temperature=0.5"],
    {
        f"{ARO}.rollout.do_sample": Probe(False, lambda c: sampling(c)["temperature"], expect=0.0),
        f"{ARO}.rollout.val_kwargs.do_sample": Probe(True, lambda c: sampling(c, True)["temperature"], expect=0.5),
        "data.max_response_length": Probe(5, lambda c: sampling(c)["max_tokens"]),
    },
)


def updated(config):
    """The actor after one real update on a small batch, and the update's metrics."""
    engine = actor_engine(config)
    batch = _batch(engine.model.config.vocab_size)
    batch["ref_log_prob"] = batch["old_log_probs"] - 0.5
    return engine, engine.update_policy(batch)


def optimizer_steps(engine) -> int:
    return int(next(iter(engine.optimizer.state.values()))["step"])


group(
    "actor-update",
    updated,
    [
        f"{ARO}.rollout.n=4",
        f"{ARO}.actor.ppo_mini_batch_size=1",
        f"{ARO}.actor.use_kl_loss=true",
        f"{ARO}.actor.optim.total_training_steps=10",
    ],
    {
        f"{ARO}.actor.ppo_epochs": Probe(3, lambda built: optimizer_steps(built[0])),
        f"{ARO}.actor.kl_loss_coef": Probe(0.3, lambda built: built[1]["actor/kl_coef"]),
    },
)


def critic_updated(config):
    engine = critic_engine(config)
    return engine, engine.update_critic(_batch(engine.model.config.vocab_size))


group(
    "critic-update",
    critic_updated,
    [
        f"{ARO}.rollout.n=4",
        "critic.ppo_mini_batch_size=1",
        "critic.rollout_n=4",
        "critic.optim.total_training_steps=10",
    ],
    {
        "critic.ppo_epochs": Probe(2, lambda built: optimizer_steps(built[0])),
    },
)


def value_loss_follows(engine, key: str) -> bool:
    """True when the critic's loss on a batch is the value loss aggregated the configured way, not the default way."""
    import torch

    from core_v1.algorithms import compute_value_loss
    from core_v1.workers.model import response_values

    batch = _batch(engine.model.config.vocab_size)
    batch["returns"] = torch.ones_like(batch["returns"])
    with torch.no_grad():
        observed = engine._micro_batch_loss(batch)[1]["critic/vf_loss"]
        vpreds = response_values(engine.model, batch)

    def loss(mode: str) -> torch.Tensor:
        return compute_value_loss(
            vpreds,
            batch["returns"],
            batch["values"],
            batch["response_mask"],
            cliprange_value=engine.config.cliprange_value,
            loss_agg_mode=mode,
        )[0]

    return bool(
        torch.allclose(observed, loss(engine.config.loss_agg_mode))
        and not torch.allclose(observed, loss(schema_default(key)))
    )


def _batch(vocab_size: int = 64):
    from tests.core_v1.workers.conftest import build_batch

    batch = build_batch(rows=4)
    for key in ("prompts", "responses", "input_ids"):
        batch[key] = batch[key] % vocab_size
    return batch


# ------------------------------------------------------------------ the plan, controllers, loops
def plan_says(text: str) -> Callable[[str], bool]:
    return lambda plan: text in plan


group(
    "plan",
    lambda config: _plan(config),
    [],
    {
        f"{ARO}.rollout.agent.agent_loop_config_path": Probe("{loops}", plan_says("loops.yaml"), expect=True),
        f"{ARO}.rollout.n": Probe(3, plan_says("n=3,"), expect=True),
        f"{ARO}.rollout.name": Probe("vllm", plan_says("rollout vllm ("), expect=True),
        f"{ARO}.rollout.nnodes": Probe(1, plan_says("separate rollout pool 1x"), expect=True),
        f"{ARO}.rollout.agent.default_agent_loop": Probe("tool_agent", plan_says("default tool_agent"), expect=True),
        f"{ARO}.rollout.checkpoint_engine.backend": Probe("gloo", plan_says("weight sync gloo"), expect=True),
        "algorithm.adv_estimator": Probe("rloo", plan_says("algorithm:   rloo"), expect=True),
        "critic.enable": Probe(True, plan_says("critic on"), expect=True),
        "algorithm.use_pf_ppo": Probe(True, plan_says("PF-PPO resampling (max_min)"), expect=True),
        "algorithm.pf_ppo.reweight_method": Probe("max_min", plan_says("PF-PPO resampling (max_min)"), expect=True),
        "data.train_batch_size": Probe(8, plan_says("batch 8 prompts"), expect=True),
        "trainer.v1.trainer_mode": Probe("colocate_async", plan_says("mode colocate_async"), expect=True),
        "trainer.v1.colocate_async.num_warmup_batches": Probe(2, plan_says("(2 batch(es) ahead"), expect=True),
        "trainer.nnodes": Probe(2, plan_says("training 2x"), expect=True),
        "trainer.n_gpus_per_node": Probe(3, plan_says("training 2x3"), expect=True),
        "reward.custom_reward_function.path": Probe("{reward}", plan_says("reward.py:my_score"), expect=True),
        "reward.custom_reward_function.name": Probe("my_score", plan_says("reward.py:my_score"), expect=True),
    },
)


def _plan(config) -> str:
    from core_v1.trainer.plan import describe_plan

    return describe_plan(config)


# ------------------------------------------------------------------------------- the walk
def probes() -> dict[str, tuple[str, Probe]]:
    found = {}
    for name, (_, _, group_probes) in GROUPS.items():
        for key, probe in group_probes.items():
            assert key not in found, f"{key} probed twice"
            found[key] = (name, probe)
    return found


def kl_controller(config):
    from core_v1.algorithms.kl import get_kl_controller

    return get_kl_controller(config.algorithm.kl_ctrl)


config_only(
    kl_controller,
    [],
    {
        "algorithm.kl_ctrl.type": Probe("adaptive", lambda c: type(c).__name__, expect="AdaptiveKLController"),
        "algorithm.kl_ctrl.kl_coef": Probe(0.05, lambda c: c.value),
        "algorithm.kl_ctrl.target_kl": Probe(0.2, lambda c: c.target),
        "algorithm.kl_ctrl.horizon": Probe(500, lambda c: c.horizon),
    },
)


def tokenizer(config):
    from core_v1.agent_loop.base import load_policy_tokenizer

    return load_policy_tokenizer(config)


TEMPLATE = "{% for m in messages %}{{ m.content }}{% endfor %}"
group(
    "tokenizer",
    tokenizer,
    [],
    {
        f"{ARO}.model.tokenizer_path": Probe("{model}", lambda t: t.name_or_path),
        f"{ARO}.model.custom_chat_template": Probe(f"'{TEMPLATE}'", lambda t: t.chat_template, expect=TEMPLATE),
    },
)
group(
    "tokenizer-from-data",
    tokenizer,
    [],
    {
        "data.tokenizer": Probe("{coded}", lambda t: t.name_or_path),
        "data.trust_remote_code": Probe(True, lambda t: type(t).__name__, expect="CodedTokenizer"),
    },
)


def tool_agent(config):
    """The tool loop as a run builds it (its tools from the config); the sandbox limits it asked for
    are then put back to the defaults, so that no later test in this process inherits them."""
    from core_v1.agent_loop.tool_agent import ToolAgentLoop
    from core_v1.agent_loop.tools.sandbox import SandboxLimits, sandbox_for

    loop = ToolAgentLoop(config, None, tokenizer(config))
    sandbox_for(SandboxLimits())
    return loop


def refused_images(loop, column: str = "pics") -> str:
    """What the loop says of a row with one image or video under `column` (a text model refuses
    them where it finds them)."""
    import asyncio

    row = {"raw_prompt": [{"role": "user", "content": "1+1="}], column: [b"not read"]}
    try:
        asyncio.run(loop.encode_prompt(row))
    except Exception as error:  # the probe reports what happened, whatever it is
        return str(error).split(" under ")[1].split(",")[0]
    return "no image read"


SANDBOX = f"{ARO}.rollout.multi_turn.tool_sandbox"


group(
    "tool-agent",
    tool_agent,
    [],
    {
        f"{ARO}.rollout.multi_turn.max_assistant_turns": Probe(4, lambda loop: loop.max_assistant_turns),
        f"{ARO}.rollout.multi_turn.max_user_turns": Probe(2, lambda loop: loop.max_user_turns),
        f"{ARO}.rollout.multi_turn.max_parallel_calls": Probe(3, lambda loop: loop.limits.max_parallel_calls),
        f"{ARO}.rollout.multi_turn.max_tool_response_length": Probe(77, lambda loop: loop.limits.max_response_length),
        f"{ARO}.rollout.multi_turn.tool_response_truncate_side": Probe("left", lambda loop: loop.limits.truncate_side),
        f"{ARO}.rollout.multi_turn.function_tool_path": Probe(
            "{tools}", lambda loop: sorted(loop.tools), expect=["walk_probe_tool"]
        ),
        "data.image_key": Probe("pics", refused_images, expect="data.image_key='pics'"),
        "data.video_key": Probe("clips", lambda loop: refused_images(loop, "clips"), expect="data.video_key='clips'"),
        **{
            f"{SANDBOX}.{name}": Probe(value, lambda loop, name=name: getattr(loop.sandbox.limits, name))
            for name, value in (
                ("workers", 3),
                ("memory_mb", 300),
                ("cpu_s", 4.0),
                ("network", True),
                ("max_processes", 9),
                ("isolation", "audit-hook"),
            )
        },
    },
)


def datasets(config):
    from core_v1.data import build_dataset

    data = config.data
    return build_dataset(data, data.train_files, None), build_dataset(data, data.val_files, None, train=False)


def indexes(dataset) -> list[int]:
    return [row["extra_info"]["index"] for row in dataset.rows]


def drawn(count: int, seed: int) -> list[int]:
    from core_v1.data.dataset import chosen_samples

    return chosen_samples(25, count, True, seed)


group(
    "dataset",
    datasets,
    [],
    {
        "data.train_max_samples": Probe(5, lambda d: indexes(d[0]), expect=drawn(5, 7)),
        "data.seed": Probe(7, lambda d: indexes(d[0]), expect=drawn(5, 7)),
        "data.val_max_samples": Probe(3, lambda d: len(d[1])),
        "data.train_files": Probe("{train}", lambda d: len(d[0]), expect=5),
        "data.val_files": Probe("{train}", lambda d: indexes(d[1]), expect=drawn(3, 7)),
    },
)
group(
    "dataset-prompt-key",
    datasets,
    ["data.train_files={questions}", "data.val_files={questions}"],
    {
        "data.prompt_key": Probe(
            "question", lambda d: [row["raw_prompt"][0]["content"] for row in d[0].rows][:2], expect=["0+1=", "1+1="]
        ),
    },
)
group(
    "plan-v0",
    lambda config: _plan(config),
    [],
    {
        "trainer.use_v1": Probe(False, plan_says("V0 (deprecated"), expect=True),
    },
)
group(
    "dataset-in-order",
    datasets,
    ["data.train_max_samples=4"],
    {
        "data.shuffle": Probe(False, lambda d: indexes(d[0]), expect=[0, 1, 2, 3]),
    },
)


def device(config):
    from core_v1.device import resolve_device

    return resolve_device(config)


config_only(
    device,
    [],
    {
        "trainer.device": Probe("cpu", lambda resolved: resolved),
    },
)


def lora_settings(config):
    from core_v1.workers.lora import LoraSettings

    return LoraSettings.of(config.actor_rollout_ref.model, "actor_rollout_ref.model")


config_only(
    lora_settings,
    [],
    {
        f"{ARO}.model.lora.adapter_path": Probe("{model}", lambda settings: settings.adapter_path),
    },
)


def weight_sync(config):
    from core_v1.checkpoint_engine import CHECKPOINT_BACKENDS

    section = config.actor_rollout_ref.rollout.checkpoint_engine
    return CHECKPOINT_BACKENDS.get(section.backend)(section)


config_only(
    weight_sync,
    [],
    {
        f"{ARO}.rollout.checkpoint_engine.update_weights_bucket_megabytes": Probe(
            3, lambda engine: engine.bucket_bytes, expect=3 * 1024 * 1024
        ),
    },
)
group(
    "plan-separate",
    lambda config: _plan(config),
    ["trainer.v1.trainer_mode=separate_async", f"{ARO}.rollout.nnodes=1"],
    {
        "trainer.v1.separate_async.num_warmup_batches": Probe(3, plan_says("(3 batch(es) ahead"), expect=True),
    },
)


def advantages(config):
    """The trainer's advantage stage on a small batch, with the run's `algorithm` section."""
    import torch
    from tensordict import TensorDict

    from core_v1.trainer.stages import advantage_stage

    generator = torch.Generator().manual_seed(0)
    batch = TensorDict(
        {
            "token_level_scores": torch.rand(4, 3, generator=generator),
            "values": torch.rand(4, 3, generator=generator),
            "response_mask": torch.ones(4, 3, dtype=torch.long),
        },
        batch_size=[4],
    )
    uids, sessions = ["a", "a", "b", "b"], ["s0", "s1", "s2", "s3"]
    out = advantage_stage(
        batch.clone(), {}, algorithm=config.algorithm, kl_ctrl=None, uids=uids, sessions=sessions, output_index=None
    )

    def with_(**options):
        from core_v1.trainer.stages import estimate_advantages

        fixed = batch.clone()
        fixed["token_level_rewards"] = fixed["token_level_scores"]
        settings = dict(
            adv_estimator=config.algorithm.adv_estimator,
            gamma=config.algorithm.gamma,
            lam=config.algorithm.lam,
            norm_adv_by_std_in_grpo=config.algorithm.norm_adv_by_std_in_grpo,
        )
        return estimate_advantages(fixed, uids=uids, sessions=sessions, **{**settings, **options})["advantages"]

    return out["advantages"], with_


def follows(key: str) -> Callable:
    """True when the stage's advantages are those of the configured value and not of the default."""
    import torch

    name = key.rsplit(".", 1)[1]
    return lambda built: (
        torch.allclose(built[0], built[1]()) and not torch.allclose(built[0], built[1](**{name: schema_default(key)}))
    )


group(
    "advantages-gae",
    advantages,
    ["algorithm.adv_estimator=gae"],
    {
        "algorithm.gamma": Probe(0.5, follows("algorithm.gamma"), expect=True),
        "algorithm.lam": Probe(0.7, follows("algorithm.lam"), expect=True),
    },
)
group(
    "advantages-grpo",
    advantages,
    ["algorithm.adv_estimator=grpo"],
    {
        "algorithm.norm_adv_by_std_in_grpo": Probe(False, follows("algorithm.norm_adv_by_std_in_grpo"), expect=True),
    },
)


def trainer_of(config):
    """The sync trainer as the run's config makes it, on no parts (what it decides from the config alone)."""
    from core_v1.trainer.components import TrainerComponents
    from core_v1.trainer.modes.sync import SyncTrainer

    parts = TrainerComponents(
        tokenizer=None,
        store=None,
        agent_loop_manager=None,
        checkpoint_manager=None,
        pipeline=None,
        replay_buffer=None,
        actor=None,
        train_sampler=None,
        tracking=None,
        total_training_steps=1,
    )
    return SyncTrainer(config, parts)


def in_reward_kl(config):
    """The trainer's advantage stage with the trainer's in-reward KL controller: the rewards it gives,
    a function of the estimator name that gives them by hand, and the scores."""
    import torch
    from tensordict import TensorDict

    from core_v1.algorithms.kl import kl_penalty
    from core_v1.trainer.stages import advantage_stage

    generator = torch.Generator().manual_seed(0)
    scores, old, ref = (torch.rand(4, 3, generator=generator) for _ in range(3))
    batch = TensorDict(
        {
            "token_level_scores": scores,
            "old_log_probs": old,
            "ref_log_prob": ref - 1.0,
            "response_mask": torch.ones(4, 3, dtype=torch.long),
        },
        batch_size=[4],
    )
    kl_ctrl = trainer_of(config).kl_ctrl
    beta = kl_ctrl.value if kl_ctrl is not None else 0.0
    out = advantage_stage(
        batch,
        {},
        algorithm=config.algorithm,
        kl_ctrl=kl_ctrl,
        uids=["a", "a", "b", "b"],
        sessions=["s0", "s1", "s2", "s3"],
        output_index=None,
    )
    return out["token_level_rewards"], lambda name: scores - beta * kl_penalty(old, ref - 1.0, name), scores


config_only(
    in_reward_kl,
    ["algorithm.adv_estimator=grpo"],
    {
        "algorithm.use_kl_in_reward": Probe(True, lambda built: not built[0].allclose(built[2]), expect=True),
        "algorithm.kl_penalty": Probe(
            "mse",
            lambda built: bool(built[0].allclose(built[1]("mse")) and not built[0].allclose(built[1]("kl"))),
            expect=True,
        ),
    },
)


def pf_ppo(config):
    """The trainer's PF-PPO stage on 16 rows' scores, and a function of `weight_pow` that redraws them by hand."""
    import torch

    from core_v1.algorithms.pf_ppo import pf_ppo_generator, pf_ppo_resample_indices
    from core_v1.trainer.stages import pf_ppo_rows

    scores = torch.linspace(-1.0, 1.0, 16)[:, None]
    pf = config.algorithm.pf_ppo
    chosen = pf_ppo_rows({"token_level_scores": scores}, {}, pf_ppo=pf, seed=1, global_steps=1)
    return chosen, lambda power: pf_ppo_resample_indices(scores, pf.reweight_method, power, pf_ppo_generator(1, 1))


config_only(
    pf_ppo,
    ["algorithm.pf_ppo.reweight_method=pow"],
    {
        "algorithm.pf_ppo.weight_pow": Probe(
            8.0, lambda built: bool(built[0].equal(built[1](8.0)) and not built[0].equal(built[1](2.0))), expect=True
        ),
    },
)


def generated(config):
    """One validation prompt through the run's agent loops on the tiny model (local agent-loop
    workers, the hf engine on the CPU): how many workers, and how many trajectories its group got."""
    from core_v1.agent_loop.manager import AgentLoopManager
    from core_v1.data import build_dataset
    from core_v1.rollout import FullyAsyncLLMServerClient
    from core_v1.rollout.server import LLMServer
    from core_v1.transfer_store import RowStatus, make_transfer_store

    server = LLMServer.from_model(config.actor_rollout_ref.model.path, "hf", device="cpu")
    store = make_transfer_store("local")
    manager = AgentLoopManager(
        config, store, client=FullyAsyncLLMServerClient([server]), tokenizer=tokenizer(config), backend="local"
    )
    try:
        row = build_dataset(config.data, config.data.val_files, None, train=False).rows[0]
        manager.submit("val", [dict(row)], 0, validate=True)
        manager.drain()
        finished = [key for key, tags in store.list("val").items() if tags.get("status") == RowStatus.FINISHED.value]
        return len(manager.workers), len(finished)
    finally:
        manager.loop.close()
        server.shutdown()


group(
    "generation",
    generated,
    ["data.max_response_length=4"],
    {
        f"{ARO}.rollout.agent.num_workers": Probe(3, lambda built: built[0]),
        f"{ARO}.rollout.val_kwargs.n": Probe(2, lambda built: built[1]),
    },
)


def ray_init(config) -> dict:
    from core_v1.trainer.setup import ray_init_kwargs

    return ray_init_kwargs(config)


config_only(
    ray_init,
    [],
    {
        "ray_kwargs.ray_init.num_cpus": Probe(3, lambda kwargs: kwargs["num_cpus"]),
        "ray_kwargs.ray_init.runtime_env.py_executable": Probe(
            "python3",
            lambda kwargs: (kwargs["runtime_env"]["py_executable"], "PYTHONPATH" in kwargs["runtime_env"]["env_vars"]),
            expect=("python3", True),
        ),
    },
)


def tracking(config):
    from core_v1.trainer.setup import build_tracking

    return build_tracking(config, 1)


config_only(
    tracking,
    ["trainer.logger=[]"],
    {
        "trainer.project_name": Probe("walk_project", lambda t: t.project),
        "trainer.experiment_name": Probe("walk_experiment", lambda t: t.experiment),
    },
)


def replay_buffer(config):
    from core_v1.trainer.replay_buffer import ReplayBuffer
    from core_v1.trainer.setup import build_replay_buffer
    from core_v1.transfer_store import make_transfer_store

    return build_replay_buffer(config, ReplayBuffer, make_transfer_store("local"), 0)


config_only(
    replay_buffer,
    [],
    {
        "trainer.v1.sampler.sampler_kwargs": Probe({"window": 3}, lambda buffer: buffer.sampler_kwargs),
    },
)


def reward_model(config):
    from core_v1.reward.reward_model import build_reward_model

    return build_reward_model(config.reward.reward_model, tokenizer(config), "cpu")


group(
    "reward-model",
    reward_model,
    ["reward.reward_model.enable=true", "reward.reward_model.model_path={model}"],
    {
        "reward.reward_model.rollout.dtype": Probe("bfloat16", lambda rm: str(rm.model.dtype), expect="torch.bfloat16"),
    },
)

DISTILLATION_LOSS = "distillation.distillation_loss"
config_only(
    distillation_loss_of,
    ["distillation.enabled=true"],
    {
        f"{DISTILLATION_LOSS}.loss_mode": Probe("k2", lambda loss: loss.loss_mode),
        f"{DISTILLATION_LOSS}.use_policy_gradient": Probe(True, lambda loss: loss.use_policy_gradient),
        f"{DISTILLATION_LOSS}.use_task_rewards": Probe(False, lambda loss: loss.use_task_rewards),
        f"{DISTILLATION_LOSS}.distillation_loss_coef": Probe(0.5, lambda loss: loss.coef),
        f"{DISTILLATION_LOSS}.loss_max_clamp": Probe(5.0, lambda loss: loss.loss_max_clamp),
        f"{DISTILLATION_LOSS}.clip_ratio": Probe(0.3, lambda loss: loss.clip_ratio),
        f"{DISTILLATION_LOSS}.clip_ratio_low": Probe(0.1, lambda loss: loss.clip_ratio_low),
        f"{DISTILLATION_LOSS}.clip_ratio_high": Probe(0.28, lambda loss: loss.clip_ratio_high),
        f"{DISTILLATION_LOSS}.topk": Probe(16, lambda loss: loss.topk),
        f"{DISTILLATION_LOSS}.log_prob_min_clamp": Probe(-5.0, lambda loss: loss.log_prob_min_clamp),
    },
)
group("config-only", lambda config: config, CONFIG_ONLY_CONTEXT, CONFIG_ONLY)

# ------------------------------------------------------------------ keys not probed above, and why
# Keys that act only with several training ranks and have no two-rank test of their own yet.
NEEDS_RANKS = {
    "trainer.balance_batch": (
        "deals each mini-batch's rows to the training ranks by tokens "
        "(core_v1.workers.group.WorkerGroup.run through core_v1.workers.sharding.shard_rows, "
        "whose balanced and contiguous deals tests/core_v1/workers/test_workers_sharding.py "
        "checks); one rank gets every row either way"
    ),
}
# Keys whose only accepted value is what rlbridge runs anyway: other values are mapped (VALUE_MAPS)
# or declared no-op, so there is no non-default value to follow.
ONE_VALUE = {
    **{
        f"{section}.ulysses_sequence_parallel_size": "1 (other degrees map to 1)"
        for section in (f"{ARO}.actor.fsdp_config", f"{ARO}.ref.fsdp_config", "critic.fsdp")
    },
    **{f"{section}.strategy": "fsdp (megatron maps to fsdp)" for section in (f"{ARO}.actor", f"{ARO}.ref", "critic")},
    f"{ARO}.rollout.mode": "async (sync is a no-op row)",
    "distillation.distillation_loss.policy_loss_mode": "vanilla (verl has no other; others are refused)",
}
# Keys whose effect shows only in a run (the trainer's loop, Ray, a served model): the test named
# sets the key and checks what it does.
ELSEWHERE = {
    f"{ARO}.actor.freeze_vision_tower": "tests/core_v1/test_vision.py",
    f"{ARO}.actor.kl_loss_type": "tests/core_v1/workers/test_workers_actor.py",
    f"{ARO}.model.lora_adapter_path": "tests/core_v1/workers/test_workers_lora.py",
    f"{ARO}.rollout.multi_turn.format": "tests/core_v1/agent_loop/test_retool_style_run.py",
    f"{ARO}.rollout.multi_turn.tool_config_path": "tests/core_v1/agent_loop/test_retool_style_run.py",
    "algorithm.filter_groups.max_num_gen_batches": "tests/core_v1/trainer/test_async_replay_buffer.py",
    "algorithm.filter_groups.metric": "tests/core_v1/trainer/test_filter_groups_sync.py",
    "critic.cliprange_value": "tests/core_v1/workers/test_workers_critic.py",
    "data.apply_chat_template_kwargs": "tests/examples/test_custom_dataset_example.py",
    "data.custom_cls.name": "tests/core_v1/data/test_max_samples.py",
    "data.custom_cls.path": "tests/core_v1/data/test_max_samples.py",
    "data.filter_overlong_prompts": "tests/core_v1/data/test_truncation.py",
    "data.truncation": "tests/core_v1/data/test_truncation.py",
    "data.max_prompt_length": "tests/core_v1/data/test_truncation.py",
    "data.reward_fn_key": "tests/core_v1/test_reward_managers.py",
    "data.sampler.class_name": "tests/core_v1/trainer/test_curriculum_sampler.py",
    "data.sampler.class_path": "tests/core_v1/trainer/test_curriculum_sampler.py",
    "reward.reward_manager.name": "tests/core_v1/test_batch_reward_manager.py",
    "reward.reward_model.enable": "tests/core_v1/trainer/test_build_components.py",
    "reward.reward_model.model_path": "tests/core_v1/trainer/test_build_components.py",
    "reward.sandbox_fusion.max_concurrent": "tests/core_v1/reward/test_code_scorers.py",
    "reward.sandbox_fusion.memory_limit_mb": "tests/core_v1/reward/test_code_scorers.py",
    "reward.sandbox_fusion.url": "tests/core_v1/reward/test_code_scorers.py",
    "trainer.default_hdfs_dir": "tests/core_v1/trainer/test_checkpoint_mirror.py",
    "trainer.max_actor_ckpt_to_keep": "tests/faults/test_checkpoint_faults.py",
    "trainer.rollout_data_dir": "tests/core_v1/trainer/test_trainer_e2e.py",
    "trainer.save_freq": "tests/core_v1/trainer/test_curriculum_sampler.py",
    "trainer.total_training_steps": "tests/core_v1/trainer/test_vision_run.py",
    "trainer.v1.sampler.max_off_policy_strategy": "tests/core_v1/trainer/test_async_replay_buffer.py",
    "trainer.v1.sampler.max_off_policy_threshold": "tests/core_v1/trainer/test_async_replay_buffer.py",
    "trainer.val_before_train": "tests/core_v1/test_batch_reward_manager.py",
    "trainer.critic_warmup": "tests/core_v1/test_batch_reward_manager.py",
    "trainer.val_only": "tests/core_v1/trainer/test_trainer_e2e.py",
    "trainer.validation_data_dir": "tests/core_v1/trainer/test_trainer_e2e.py",
    f"{ARO}.rollout.multi_turn.enable": "tests/examples/test_interaction_example.py",
    f"{ARO}.rollout.multi_turn.interaction_config_path": "tests/examples/test_interaction_example.py",
    "algorithm.filter_groups.enable": "tests/core_v1/trainer/test_filter_groups_sync.py",
    "trainer.default_local_dir": "tests/core_v1/trainer/test_trainer_e2e.py",
    "trainer.logger": "tests/core_v1/trainer/test_trainer_e2e.py",
    "trainer.resume_from_path": "tests/core_v1/workers/test_lora_e2e.py",
    "trainer.resume_mode": "tests/core_v1/trainer/test_trainer_e2e.py",
    "trainer.test_freq": "tests/core_v1/trainer/test_curriculum_sampler.py",
    "trainer.total_epochs": "tests/smoke/test_smoke.py",
    "trainer.v1.sampler.custom_sampler.name": "tests/core_v1/trainer/test_async_examples.py",
    "trainer.v1.sampler.custom_sampler.path": "tests/core_v1/trainer/test_async_examples.py",
    "trainer.v1.separate_async.parameter_sync_step": "tests/core_v1/trainer/test_async_weight_broadcast.py",
    "distillation.enabled": "tests/core_v1/trainer/test_distillation_run.py",
    "distillation.teacher_key": "tests/core_v1/trainer/test_distillation_run.py",
    "distillation.teacher_models.teacher_model.model_path": "tests/core_v1/workers/test_distillation_engine.py",
}
# FSDP2 sharding (core_v1.workers.distributed.shard_model) and the process group (core_v1.workers.rank):
# two gloo ranks build each role with each key set and read it back from the FSDP2 units and the group.
TWO_RANKS = "tests/core_v1/workers/test_fsdp_keys_reach_the_ranks.py"
ELSEWHERE |= {
    f"{section}.{name}": TWO_RANKS
    for section in (f"{ARO}.actor.fsdp_config", f"{ARO}.ref.fsdp_config", "critic.fsdp")
    for name in ("fsdp_size", "offload_policy", "optimizer_offload", "param_offload", "reshard_after_forward")
} | {f"{ARO}.nccl_timeout": TWO_RANKS}
# Used keys this walk does not follow yet (each is read by core_v1, tests/shims/test_unread_fields.py
# checks that); listed so that the gap is visible and a new used key cannot join it unseen.
NOT_FOLLOWED: dict[str, str] = {}
# rlbridge's own keys (no verl key lands on them) that the walk probes too.
OWN_KEYS = {f"{SANDBOX}.{name}" for name in ("workers", "memory_mb", "cpu_s", "network", "max_processes", "isolation")}


def test_every_used_key_is_followed_somewhere():
    """Each used key is probed above, needs several ranks, has one value only, or is set by the
    named test; the numbers are printed (pytest -s) for the record."""
    probed = probes()
    covered = {
        **{k: "probed" for k in probed},
        **{k: "needs ranks" for k in NEEDS_RANKS},
        **{k: "one value" for k in ONE_VALUE},
        **{k: "elsewhere" for k in ELSEWHERE},
        **{k: "not followed yet" for k in NOT_FOLLOWED},
    }
    missing = [key for key in used_keys() if key not in covered]
    stale = sorted(set(covered) - set(used_keys()) - OWN_KEYS)
    assert not OWN_KEYS & set(used_keys()), "a verl key lands on a key listed as rlbridge's own"
    print(Counter(covered[k] for k in used_keys() if k in covered), f"not followed: {len(missing)}")
    for key, path in ELSEWHERE.items():
        assert f"{key}=" in (ROOT / path).read_text() or key in (ROOT / path).read_text(), (key, path)
    assert stale == [], "keys listed here that the table no longer marks used"
    assert missing == [], "used keys that reach nothing checked: probe them, or re-judge them in verdicts.py"


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_each_probed_key_reaches_what_is_built(name, tiny):
    build, context, group_probes = GROUPS[name]
    overrides = [token(key, probe.value) for key, probe in group_probes.items()]
    for key, probe in group_probes.items():
        assert probe.value != schema_default(key) or key in " ".join(context), f"{key}: not a non-default value"
    built = build(config_for(tiny, [*context, *overrides]))
    wrong = {}
    for key, probe in group_probes.items():
        if probe.expect is None and probe.value is None:
            continue
        observed = probe.read(built)
        if observed != filled(tiny, probe.expected):
            wrong[key] = (probe.expected, observed)
    assert wrong == {}


@pytest.mark.parametrize(
    "override, named",
    [
        ("isolation=chroot", "tool_sandbox.isolation='chroot' is not one of auto, namespaces, seccomp, audit-hook"),
        ("max_processes=0", "tool_sandbox.max_processes=0 must be >= 1"),
        ("cpu_s=0", "tool_sandbox.cpu_s=0.0 must be > 0"),
    ],
)
def test_a_bad_sandbox_setting_is_one_line_at_load(tiny, override, named):
    from core_v1.config.schema import ConfigError

    with pytest.raises(ConfigError) as error:
        config_for(tiny, [f"{SANDBOX}.{override}"])
    assert named in str(error.value) and "\n" not in str(error.value)


def test_the_schemas_isolation_modes_are_the_sandboxs():
    from core_v1.agent_loop.tools.sandbox import SandboxLimits
    from core_v1.config.schema import ISOLATION_MODES
    from core_v1.utils import isolation

    assert ISOLATION_MODES == ("auto", *isolation.MODES)
    for mode in ISOLATION_MODES:
        SandboxLimits(isolation=mode)  # each accepted where the limits are checked again


def test_the_runs_sandbox_settings_reach_a_tool_that_runs_code_in_any_loop(tiny):
    """An agent-loop worker sets the run's limits for every tool that runs code (`active_sandbox`),
    not only for the tool loop's own tools."""
    from core_v1.agent_loop.tools.sandbox import SandboxLimits, active_sandbox, sandbox_for
    from core_v1.agent_loop.worker import AgentLoopWorker

    config = config_for(tiny, [f"{SANDBOX}.isolation=seccomp", f"{SANDBOX}.max_processes=5"])
    try:
        AgentLoopWorker(config, client=None, store=None, tokenizer=None)
        limits = active_sandbox().limits
    finally:
        sandbox_for(SandboxLimits())
    assert (limits.isolation, limits.max_processes) == ("seccomp", 5)


def _check_isolation_where_namespaces_are_refused(answers) -> None:
    """In a forked child: refuse unshare() as a container that forbids namespaces does (EPERM), then
    check a mode the machine still allows and one it now refuses."""
    from core_v1.agent_loop.tools.errors import ToolConfigError
    from core_v1.agent_loop.tools.sandbox import SandboxLimits, check_isolation
    from core_v1.utils import isolation

    isolation.install_filter([("unshare", 1)])
    check_isolation(SandboxLimits(isolation="seccomp"))
    try:
        check_isolation(SandboxLimits(isolation="namespaces"))
        answers.send("accepted")
    except ToolConfigError as error:
        answers.send(str(error))


def test_a_named_isolation_mode_the_kernel_refuses_is_one_line_at_start_up():
    import multiprocessing

    receiver, sender = multiprocessing.Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_check_isolation_where_namespaces_are_refused, args=(sender,)
    )
    child.start()
    assert receiver.poll(120), "the check did not answer"
    line = receiver.recv()
    child.join(30)
    assert child.exitcode == 0
    assert line.startswith(f"{SANDBOX}.isolation='namespaces': the sandbox could not start") and "unshare" in line
    assert "set it to auto" in line and "\n" not in line
