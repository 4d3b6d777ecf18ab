"""V0's verdict, key by key, on settings of verl backends that rlbridge does not have.

verl V0 scripts choose Megatron-LM for training, SGLang or TRT-LLM for generation, Ascend NPUs,
or Ulysses sequence parallelism. None of these changes which PPO update is computed: they choose
how the same model is sharded, which engine samples with the same sampling settings, and which
device runs it. So on rlbridge's V0 trainer each maps to what rlbridge has (FSDP, vLLM, CUDA or
CPU, unsplit sequences) with one warning line that names the key and why it cannot matter. A
setting that does change what is trained is refused, with the reason. One mapping has a caveat
the warning spells out: `*.megatron.use_dist_checkpointing=true` loads the weights from a
Megatron distributed checkpoint, which rlbridge cannot read; verl's scripts make that checkpoint
by converting the very model `model.path` names, so the weights come from `model.path`.

LoRA (`model.lora_rank > 0`) is not in this list: it trains a different set of parameters, so
V1's check refuses it on V0 as well.
"""

from __future__ import annotations

import sys
from typing import Any

from omegaconf import DictConfig, OmegaConf


_STRATEGY_KEYS = ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy")
_MEGATRON_SECTIONS = ("actor_rollout_ref.actor.megatron", "actor_rollout_ref.ref.megatron", "critic.megatron")
_ULYSSES_KEYS = (
    "actor_rollout_ref.actor.fsdp_config.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.fsdp_config.ulysses_sequence_parallel_size",
    "critic.fsdp.ulysses_sequence_parallel_size",
)
# verl's older homes of the Ulysses degree (rlbridge reads it under fsdp_config / critic.fsdp).
_ULYSSES_ALIASES = (
    "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
    "actor_rollout_ref.ref.ulysses_sequence_parallel_size",
    "critic.ulysses_sequence_parallel_size",
)
_OTHER_ENGINES = ("sglang", "sglang_async", "trtllm")


def apply_backend_verdicts(cfg: DictConfig) -> list[str]:
    """Map or refuse backend settings in `cfg` (open for writing), printing one warning per
    mapped key; returns the warnings for the dry-run plan."""
    notes: list[str] = []
    notes += _megatron(cfg)
    notes += _other_rollout_engine(cfg)
    notes += _npu(cfg)
    notes += _ulysses(cfg)
    for note in notes:
        print(f"warning: {note}", file=sys.stderr)
    return notes


def _megatron(cfg: DictConfig) -> list[str]:
    notes = []
    for key in _STRATEGY_KEYS:
        if _get(cfg, key) == "megatron":
            OmegaConf.update(cfg, key, "fsdp")
            notes.append(
                f"{key}=megatron: rlbridge trains with FSDP; the PPO update is the same, only the "
                "sharding differs (Megatron's parallel layout does not apply)"
            )
    for section_key in _MEGATRON_SECTIONS:
        section = _get(cfg, section_key)
        if not isinstance(section, DictConfig) or not len(section):
            continue
        if _get(cfg, f"{section_key}.use_dist_checkpointing") is True:
            model_key = "critic.model.path" if section_key.startswith("critic") else "actor_rollout_ref.model.path"
            notes.append(
                f"{section_key}.use_dist_checkpointing=true: rlbridge cannot read Megatron distributed "
                f"checkpoints; the weights are loaded from {model_key} (verl's scripts convert that same "
                "model into the distributed checkpoint; point it at your own weights if they differ)"
            )
        names = ", ".join(sorted(str(k) for k in section.keys()))
        OmegaConf.update(cfg, section_key, {}, merge=False)
        notes.append(
            f"{section_key}.{{{names}}}: Megatron parallelism and memory settings have no effect with "
            "FSDP (the update is the same)"
        )
    return notes


def _other_rollout_engine(cfg: DictConfig) -> list[str]:
    key = "actor_rollout_ref.rollout.name"
    name = _get(cfg, key)
    if name not in _OTHER_ENGINES:
        return []
    OmegaConf.update(cfg, key, "vllm")
    return [f"{key}={name}: rlbridge has no {name} engine; vLLM generates with the same sampling settings"]


def _npu(cfg: DictConfig) -> list[str]:
    if _get(cfg, "trainer.device") != "npu":
        return []
    OmegaConf.update(cfg, "trainer.device", "auto")
    return [
        "trainer.device=npu: rlbridge has no Ascend NPU backend; the run uses CUDA when a GPU is visible, "
        "else the CPU (the same training)"
    ]


def _ulysses(cfg: DictConfig) -> list[str]:
    from core_v1.config import config_keys

    schema_keys = set(config_keys())
    notes = []
    # Read every old home before moving any: verl 0.4's preset sets the reference's degree to
    # ${actor_rollout_ref.actor.ulysses_sequence_parallel_size}, which the actor's move would leave dangling.
    values = {alias: _get(cfg, alias) for alias in _ULYSSES_ALIASES}
    for alias, key in zip(_ULYSSES_ALIASES, _ULYSSES_KEYS):
        value = values[alias]
        if value is not None and alias not in schema_keys:  # an old home rlbridge does not keep
            _remove(cfg, alias)
            OmegaConf.update(cfg, key, value, force_add=True)
    for key in (*_ULYSSES_KEYS, *(alias for alias in _ULYSSES_ALIASES if alias in schema_keys)):
        value = _get(cfg, key)
        if isinstance(value, int) and value > 1:
            OmegaConf.update(cfg, key, 1)
            notes.append(
                f"{key}={value}: rlbridge does not split sequences across GPUs (Ulysses); each sequence "
                "is processed whole, the update is the same"
            )
    return notes


def _get(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=None, throw_on_resolution_failure=False)


def _remove(cfg: DictConfig, key: str) -> None:
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key)
    if isinstance(parent, DictConfig) and leaf in parent:
        del parent[leaf]
