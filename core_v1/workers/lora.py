"""LoRA adapters on a training model (verl's `model.lora_rank`, `lora_alpha`, `target_modules`,
`exclude_modules`, `lora_adapter_path`), built with peft.

- `lora_rank > 0` wraps the loaded model with peft's LoRA on `target_modules` (`all-linear`, verl's
  default, or a list of module names / a regex) minus `exclude_modules`; `lora_adapter_path` loads
  a saved adapter instead, trainable (its own rank and alpha). The base weights are frozen, so the
  optimizer (which takes the parameters that require grad) trains the adapter only.
- The reference policy is the same model with its adapters disabled (`adapters_disabled`), as verl
  does it: the base weights are never trained, so they are the starting policy, and no second copy
  is loaded.
- Weights leave the trainer merged (`merged_weights`): `W + scaling * B @ A` per adapted layer,
  under the names the base model's `from_pretrained` uses, so a rollout engine loads them as the
  full model it already serves. The merge is computed on copies, one layer at a time: merging in
  place and unmerging afterwards (peft's `merge_adapter`) would leave rounding error in the base
  weights, which are the reference policy.
- A checkpoint's `model/` holds the merged model (an export `from_pretrained` loads) and
  `lora_adapter/` the adapter (`adapter_config.json`, `adapter_model.safetensors`), which
  `lora_adapter_path` loads; the sharded state (for resuming) holds the adapter and the base.

LoRA on linear layers only (peft's `lora.Linear`): that is what `all-linear` and verl's module
lists name; any other layer type is refused when the model is built.

verl's Megatron-Bridge LoRA section (`model.lora.{rank, alpha, target_modules, exclude_modules,
dropout, adapter_path}`, read by verl's Megatron workers) is the same adapter on the same Hugging
Face model, so it is read here too (as `strategy=megatron` runs on FSDP): Megatron's module names
become the Hugging Face ones (`MEGATRON_MODULES`; its default, every linear layer of the blocks, is
`all-linear`), `dropout` is peft's `lora_dropout` (applied before A, Megatron's `pre`). Its other
settings get their verdict in shims/verl_keys/verdicts.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional

import torch

from core_v1.workers.errors import WorkerConfigError

ADAPTER_DIRECTORY = "lora_adapter"  # a checkpoint's adapter, as verl names it
_ADAPTER = "default"  # peft's name of the one adapter
# Megatron-Core's linear layers of a transformer block, by the Hugging Face (Llama/Qwen) modules they hold.
MEGATRON_MODULES = {
    "linear_qkv": ("q_proj", "k_proj", "v_proj"),
    "linear_q": ("q_proj",),
    "linear_k": ("k_proj",),
    "linear_v": ("v_proj",),
    "linear_proj": ("o_proj",),
    "linear_fc1": ("gate_proj", "up_proj"),
    "linear_fc1_gate": ("gate_proj",),
    "linear_fc1_up": ("up_proj",),
    "linear_fc2": ("down_proj",),
}
_FLAT_KEYS = {"rank": "lora_rank", "adapter_path": "lora_adapter_path"}  # model.lora_* names of the settings
_MEGATRON_ALL_LINEAR = {"linear_qkv", "linear_proj", "linear_fc1", "linear_fc2"}


@dataclasses.dataclass(frozen=True)
class LoraSettings:
    """What a model section asks for; `enabled` when `rank > 0` or an adapter is given (as in verl)."""

    rank: int = 0
    alpha: float = 16
    target_modules: Any = "all-linear"
    exclude_modules: Any = None
    adapter_path: Optional[str] = None
    dropout: float = 0.0
    a_init: str = "kaiming"  # lora_A's initialisation: peft's Kaiming-uniform, or Megatron-Bridge's default "xavier"
    config_prefix: str = "actor_rollout_ref.model"
    bridge_names: bool = False  # read from Megatron-Bridge's `lora` section (its key names in messages)

    def key(self, name: str) -> str:
        """The config key a setting came from (`rank`, `adapter_path` or `target_modules`)."""
        return f"{self.config_prefix}.{name if self.bridge_names else _FLAT_KEYS.get(name, name)}"

    @classmethod
    def of(cls, model_config: Any, config_prefix: str) -> "LoraSettings":
        """The settings of a schema model section (`ModelConfig`): its `lora_*` keys, or its
        Megatron-Bridge `lora` section when that asks for an adapter."""
        bridge = dict(getattr(model_config, "lora", None) or {})
        if int(bridge.get("rank") or 0) > 0 or bridge.get("adapter_path"):
            if model_config.lora_rank or model_config.lora_adapter_path:
                raise WorkerConfigError(
                    f"{config_prefix}.lora_rank and {config_prefix}.lora.rank both ask for LoRA; set one of them"
                )
            return cls.of_megatron_bridge(bridge, config_prefix)
        return cls(
            rank=int(model_config.lora_rank or 0),
            alpha=model_config.lora_alpha,
            target_modules=_plain(model_config.target_modules),
            exclude_modules=_plain(model_config.exclude_modules),
            adapter_path=model_config.lora_adapter_path or None,
            config_prefix=config_prefix,
        )

    @classmethod
    def of_megatron_bridge(cls, bridge: dict, config_prefix: str) -> "LoraSettings":
        """verl's `model.lora.*` (Megatron-Bridge names and defaults) as peft settings."""
        targets = _plain(bridge.get("target_modules"))
        excluded = _plain(bridge.get("exclude_modules"))
        if not targets or set(targets) == _MEGATRON_ALL_LINEAR:
            targets = "all-linear"  # Megatron's default: every linear layer of the blocks
        else:
            targets = huggingface_modules(targets)
        return cls(
            rank=int(bridge.get("rank") or 0),
            alpha=bridge.get("alpha", 32),
            target_modules=targets,
            exclude_modules=huggingface_modules(excluded) if excluded else None,
            adapter_path=bridge.get("adapter_path") or None,
            dropout=float(bridge.get("dropout") or 0.0),
            a_init=str(bridge.get("lora_A_init_method") or "xavier"),
            config_prefix=f"{config_prefix}.lora",
            bridge_names=True,
        )

    @property
    def enabled(self) -> bool:
        return self.rank > 0 or bool(self.adapter_path)


def huggingface_modules(names: list[str]) -> list[str]:
    """Megatron-Core module names (`linear_qkv`, ...) as the Hugging Face modules they hold; other names as given."""
    return list(dict.fromkeys(hf for name in names for hf in MEGATRON_MODULES.get(name, (name,))))


def starts_from_adapter(model_config: Any) -> bool:
    """True when the policy loads a saved adapter: its first weights are not `model.path`'s alone."""
    return bool(LoraSettings.of(model_config, "actor_rollout_ref.model").adapter_path)


def _plain(value: Any) -> Any:
    """A list from the config (an OmegaConf ListConfig or a tuple) as a plain list; other values as they are."""
    return [str(v) for v in value] if isinstance(value, Iterable) and not isinstance(value, str) else value


def apply_lora(
    model: torch.nn.Module, settings: LoraSettings, task_type: str = "CAUSAL_LM", gradient_checkpointing: bool = False
) -> torch.nn.Module:
    """`model` wrapped with LoRA adapters as `settings` ask (unchanged when LoRA is off)."""
    if not settings.enabled:
        return model
    with warnings.catch_warnings():
        # peft asks transformers whether checkpointing is on through a name transformers 5 deprecated.
        warnings.filterwarnings("ignore", message=r"`is_gradient_checkpointing` is deprecated", category=FutureWarning)
        model = _wrap(model, settings, task_type, gradient_checkpointing)
    _refuse_other_layers(model, settings)
    return model


def _wrap(model: torch.nn.Module, settings: LoraSettings, task_type: str, gradient_checkpointing: bool):
    from peft import LoraConfig, PeftModel, get_peft_model

    if gradient_checkpointing:
        # The frozen embeddings give checkpointed blocks inputs that need no grad; this makes them.
        model.enable_input_require_grads()
    if settings.adapter_path:
        path = Path(settings.adapter_path).expanduser()
        if not (path / "adapter_config.json").is_file():
            raise WorkerConfigError(
                f"{settings.key('adapter_path')}={settings.adapter_path!r} holds no "
                "adapter_config.json; point it at a saved peft adapter (a checkpoint's "
                f"{ADAPTER_DIRECTORY}/ folder)"
            )
        model = PeftModel.from_pretrained(model, str(path), is_trainable=True)
    else:
        if settings.target_modules in (None, "", []):
            raise WorkerConfigError(
                f"{settings.key('rank')}={settings.rank} needs "
                f"{settings.key('target_modules')} (all-linear, or a list of module names)"
            )
        config = LoraConfig(
            task_type=task_type,
            r=settings.rank,
            lora_alpha=settings.alpha,
            target_modules=settings.target_modules,
            exclude_modules=settings.exclude_modules,
            lora_dropout=settings.dropout,
            bias="none",
        )
        try:
            model = get_peft_model(model, config)
        except ValueError as error:  # peft: no module matched, or a layer type it cannot adapt
            raise WorkerConfigError(
                f"{settings.key('target_modules')}={settings.target_modules!r}: {str(error).splitlines()[0]}"
            ) from None
        _initialise_a(model, settings)
    return model


def _initialise_a(model: torch.nn.Module, settings: LoraSettings) -> None:
    """peft draws A Kaiming-uniform (a = sqrt(5)), as Megatron-Bridge's "kaiming" does; its "xavier" is
    Xavier-uniform. B starts at zero either way, so the adapted model starts as the base model."""
    if settings.a_init not in ("kaiming", "xavier"):
        raise WorkerConfigError(
            f"{settings.key('lora_A_init_method')}={settings.a_init!r} is not one of kaiming, xavier"
        )
    if settings.a_init == "xavier":
        from peft.tuners.lora import Linear

        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, Linear):
                    torch.nn.init.xavier_uniform_(module.lora_A[_ADAPTER].weight)


def _refuse_other_layers(model: torch.nn.Module, settings: LoraSettings) -> None:
    from peft.tuners.lora import Linear, LoraLayer

    others = sorted(
        {type(m).__name__ for m in model.modules() if isinstance(m, LoraLayer) and not isinstance(m, Linear)}
    )
    if others:
        raise WorkerConfigError(
            f"{settings.key('target_modules')} adapts {', '.join(others)} layers; LoRA is "
            "supported on linear layers only (all-linear, or names of Linear modules)"
        )
    base = model.get_base_model()
    if getattr(base.config, "tie_word_embeddings", False) and isinstance(base.get_output_embeddings(), LoraLayer):
        # The merged head would be loaded into the input embeddings too (one tied tensor in the engine).
        raise WorkerConfigError(
            f"{settings.key('target_modules')} adapts the output layer of a model whose "
            "input and output embeddings are tied (tie_word_embeddings); leave it out"
        )
    dora = [name for name, m in model.named_modules() if isinstance(m, Linear) and m.use_dora.get(_ADAPTER)]
    if dora:
        raise WorkerConfigError(
            f"{settings.key('adapter_path')} is a DoRA adapter; only plain LoRA adapters are supported"
        )


def is_lora(model: torch.nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def adapters_disabled(model: torch.nn.Module) -> contextlib.AbstractContextManager:
    """Within it, a LoRA model computes with its base weights only (the reference policy)."""
    return model.disable_adapter() if is_lora(model) else contextlib.nullcontext()


# ------------------------------------------------------------------------------ merged weights
def merged_weights(
    pairs: Iterable[tuple[str, torch.Tensor]], model: torch.nn.Module
) -> Iterator[tuple[str, torch.Tensor]]:
    """The full (name, tensor) pairs of a LoRA model's state dict, as the merged base model's.

    `pairs` are the model's state-dict entries in order, as full tensors (from `state_dict()`, or
    gathered one by one under FSDP). Each adapted layer's base weight is held until its `lora_A`
    and `lora_B` arrive, then yielded as `W + scaling * B @ A` (computed in float32, returned in
    W's dtype); names lose peft's `base_model.model.` prefix and `.base_layer`. A model without
    LoRA passes through unchanged.
    """
    if not is_lora(model):
        yield from pairs
        return
    layers = _lora_layers(model)
    pending: dict[str, dict[str, torch.Tensor]] = {}
    for name, tensor in pairs:
        layer, part = _split_lora_name(name, layers)
        if layer is None:
            yield _base_name(name), tensor
            continue
        if part == "bias":
            yield _base_name(name), tensor
            continue
        pending.setdefault(layer, {})[part] = tensor
        if len(pending[layer]) == 3:
            parts = pending.pop(layer)
            yield _base_name(f"{layer}.weight"), _merge(parts, layers[layer])
    if pending:
        raise RuntimeError(f"LoRA layers {sorted(pending)} lacked a base weight, lora_A or lora_B in the state dict")


def _lora_layers(model: torch.nn.Module) -> dict[str, tuple[float, bool]]:
    """`{module name: (scaling, fan_in_fan_out)}` of every adapted layer."""
    from peft.tuners.lora import Linear

    return {
        name: (float(module.scaling[_ADAPTER]), bool(module.fan_in_fan_out))
        for name, module in model.named_modules()
        if isinstance(module, Linear)
    }


def _split_lora_name(name: str, layers: dict) -> tuple[Optional[str], str]:
    """`(layer, part)` for an entry of an adapted layer (`part`: weight, bias, A or B), else `(None, "")`."""
    for suffix, part in (
        (".base_layer.weight", "weight"),
        (".base_layer.bias", "bias"),
        (f".lora_A.{_ADAPTER}.weight", "A"),
        (f".lora_B.{_ADAPTER}.weight", "B"),
    ):
        if name.endswith(suffix) and name[: -len(suffix)] in layers:
            return name[: -len(suffix)], part
    return None, ""


def _merge(parts: dict[str, torch.Tensor], layer: tuple[float, bool]) -> torch.Tensor:
    scaling, fan_in_fan_out = layer
    weight = parts["weight"]
    delta = (parts["B"].float() @ parts["A"].float()) * scaling
    if fan_in_fan_out:  # Conv1D-style layers store the weight transposed
        delta = delta.T
    return (weight.float() + delta.to(weight.device)).to(weight.dtype)


def _base_name(name: str) -> str:
    """peft's `base_model.model.x.base_layer.weight` -> the base model's `x.weight`."""
    prefix = "base_model.model."
    name = name[len(prefix) :] if name.startswith(prefix) else name
    return name.replace(".base_layer.", ".")


def save_exports(model: torch.nn.Module, state: dict[str, torch.Tensor], directory: Path) -> None:
    """A checkpoint's exports from the full state dict: `model/` (the model `from_pretrained` loads;
    merged for a LoRA model) and, for a LoRA model, `lora_adapter/` (the adapter alone)."""
    if not is_lora(model):
        model.save_pretrained(directory / "model", state_dict=state)
        return
    merged = dict(merged_weights(state.items(), model))
    model.get_base_model().save_pretrained(directory / "model", state_dict=merged)
    # The adapter alone: the base weights (an adapted head or embedding included) never train.
    model.save_pretrained(directory / ADAPTER_DIRECTORY, state_dict=state, save_embedding_layers=False)
