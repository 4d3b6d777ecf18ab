"""The models the training engines run, and the forward passes over a padded training batch.

Loading is transformers' own `from_pretrained` (a local `save_pretrained` directory or a hub id
transformers can resolve), in the dtype the config names, optionally with gradient checkpointing.

Position convention (verl's, see docs/CONTRACTS.md): `input_ids = cat(prompts, responses)` with
left-padded prompts and right-padded responses, so the response always occupies the last `R`
columns. The logit at position `t` scores token `t + 1`, hence the scores of the response tokens
are the logits at positions `[-R - 1, -1)`. Values use the same slice: the value of a response
token is read from the hidden state that chose it.

A vision-language model (a config with a `vision_config`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL) loads through
`AutoModelForImageTextToText`; a batch of its rows carries `multi_modal_inputs` (one dict of the
processor's image tensors per row), and the forwards take them with the model's own mRoPE
position ids (`core_v1.utils.vision`) in place of the batch's `position_ids`.

The value model is `AutoModelForTokenClassification` with `num_labels=1` (as verl does): the
causal LM's body with a fresh linear head giving one scalar per position. transformers builds
it from a causal-LM checkpoint directly (the head is newly initialised, the body is loaded), it
saves and reloads with `save_pretrained`/`from_pretrained` like any model, and a critic
checkpoint is a standard token-classification checkpoint. Its classifier dropout is set to 0:
dropout would make the values seen by `compute_values` and by `update_critic` disagree.
transformers has no token-classification class for the vision-language families, so their value
model is the vision-language model itself with its LM head replaced by a one-output linear head
(initialised as the token-classification head is; its word embeddings untied from it): the
forwards take the rows' images as the actor's do, and the value of a position is its one logit.
The checkpoint's `model/` export keeps that head as `lm_head` ([1, hidden]), which a critic
loaded from the export takes back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
from safetensors import safe_open
from tensordict import TensorDict
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoModelForTokenClassification,
    PretrainedConfig,
    PreTrainedModel,
)

from core_v1.algorithms import logprobs_and_entropy, logprobs_from_logits, sum_pi_squared_from_logits
from core_v1.algorithms.logprob import logprobs_of_tokens, top_logprobs
from core_v1.config.schema import RolloutConfig
from core_v1.utils.vision import is_vision_config, vision_forward, vision_tower
from core_v1.workers.errors import BatchLayoutError, WorkerConfigError

_DTYPES = {
    "fp32": torch.float32,
    "float32": torch.float32,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp16": torch.float16,
    "float16": torch.float16,
}

FORWARD_KEYS = ("input_ids", "attention_mask", "position_ids", "responses")
VISION_KEY = "multi_modal_inputs"  # per row: the processor's image tensors of the prompt (a dict)


def row_input_fields(model: Optional[torch.nn.Module]) -> tuple[str, ...]:
    """The per-row model inputs a rank reads from the store beside the token fields for this model's
    forwards: a vision-language model's rows' images."""
    return (VISION_KEY,) if is_vision_config(getattr(model, "config", None)) else ()


def forward_keys(batch: TensorDict) -> tuple[str, ...]:
    """The fields a forward pass over `batch` reads: FORWARD_KEYS, and the rows' images when it has them."""
    return FORWARD_KEYS + ((VISION_KEY,) if VISION_KEY in batch.keys() else ())


def resolve_dtype(name: str | torch.dtype, config_key: str = "fsdp_config.model_dtype") -> torch.dtype:
    """The torch dtype for a config name (`fp32`, `bf16`, `fp16` or their long spellings)."""
    if isinstance(name, torch.dtype):
        return name
    try:
        return _DTYPES[str(name).lower()]
    except KeyError:
        raise WorkerConfigError(
            f"{config_key}={name!r} is not a known dtype; use one of {', '.join(sorted(_DTYPES))}"
        ) from None


def sampling_temperature(rollout: RolloutConfig) -> float:
    """The rollout's sampling temperature, which training log-probs must divide logits by."""
    if rollout.temperature <= 0:
        raise WorkerConfigError(
            f"actor_rollout_ref.rollout.temperature={rollout.temperature} samples greedily, "
            "so there is no sampling distribution to train on; set it > 0 (1.0 is usual)"
        )
    return float(rollout.temperature)


def load_causal_lm(
    path: str,
    *,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "cpu",
    gradient_checkpointing: bool = False,
    trust_remote_code: bool = False,
    override_config: Optional[dict] = None,
    config_key: str = "actor_rollout_ref.model.path",
) -> PreTrainedModel:
    """A causal LM from a local `save_pretrained` directory, on `device`, in `dtype`."""
    config = _model_config(path, trust_remote_code, override_config, config_key)
    auto_class = AutoModelForImageTextToText if is_vision_config(config) else AutoModelForCausalLM
    model = _from_pretrained(auto_class, path, config, dtype, trust_remote_code, config_key)
    return _prepare(model, device, gradient_checkpointing)


def freeze_vision_tower(model: torch.nn.Module) -> int:
    """Stop the vision encoder's weights from training (`actor.freeze_vision_tower`, as verl does);
    returns how many parameters it froze (0 for a text model)."""
    tower = vision_tower(model)
    if tower is None:
        return 0
    tower.requires_grad_(False)
    return sum(p.numel() for p in tower.parameters())


def load_value_model(
    path: str,
    *,
    dtype: str | torch.dtype = "fp32",
    device: str | torch.device = "cpu",
    gradient_checkpointing: bool = False,
    trust_remote_code: bool = False,
    override_config: Optional[dict] = None,
    config_key: str = "critic.model.path",
) -> PreTrainedModel:
    """A one-output token-classification model (the critic) from a causal-LM or critic checkpoint;
    for a vision-language checkpoint, the model with a one-output value head in place of its LM head."""
    config = _model_config(path, trust_remote_code, override_config, config_key)
    if is_vision_config(config):
        model = _vision_value_model(path, config, dtype, trust_remote_code, config_key)
        return _prepare(model, device, gradient_checkpointing)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    model = _from_pretrained(AutoModelForTokenClassification, path, config, dtype, trust_remote_code, config_key)
    return _prepare(model, device, gradient_checkpointing)


def _vision_value_model(path: str, config, dtype, trust_remote_code: bool, config_key: str) -> PreTrainedModel:
    saved_head = _saved_value_head(path)
    for section in {id(c): c for c in (config, config.get_text_config())}.values():
        section.tie_word_embeddings = False  # the value head must not share the embeddings' weight
    # A critic's own export holds a [1, hidden] head where the LM head was: only it differs in size.
    loading = {"ignore_mismatched_sizes": True} if saved_head is not None else {}
    model = _from_pretrained(AutoModelForImageTextToText, path, config, dtype, trust_remote_code, config_key, **loading)
    old = model.get_output_embeddings()
    head = torch.nn.Linear(old.in_features, 1, dtype=old.weight.dtype)
    if saved_head is not None:
        head.load_state_dict(saved_head)
    else:
        torch.nn.init.normal_(head.weight, std=getattr(config.get_text_config(), "initializer_range", 0.02))
        torch.nn.init.zeros_(head.bias)
    model.set_output_embeddings(head)
    return model


def _saved_value_head(path: str) -> Optional[dict[str, torch.Tensor]]:
    """The value head a vision-language critic's export saved as its `lm_head` ([1, hidden] and its
    bias); None for any other checkpoint (a policy's LM head has a vocabulary's rows)."""
    folder = Path(path).expanduser()
    index = folder / "model.safetensors.index.json"
    shard = json.loads(index.read_text())["weight_map"].get("lm_head.weight") if index.is_file() else None
    file = folder / (shard or "model.safetensors")
    if not file.is_file():
        return None
    with safe_open(str(file), framework="pt") as weights:
        names = set(weights.keys())
        if "lm_head.weight" not in names or "lm_head.bias" not in names:
            return None
        weight = weights.get_tensor("lm_head.weight")
        if weight.shape[0] != 1:
            return None
        return {"weight": weight, "bias": weights.get_tensor("lm_head.bias")}


def response_log_probs(
    model: torch.nn.Module,
    batch: TensorDict,
    *,
    temperature: float,
    calculate_entropy: bool = False,
    entropy_requires_grad: bool = False,
    calculate_sum_pi_squared: bool = False,
    router_logits: Optional[list] = None,
    other_tokens: Optional[torch.Tensor] = None,
    other_log_probs: Optional[list] = None,
) -> tuple[Optional[torch.Tensor], ...]:
    """Log-probs [B, R] of the response tokens under `softmax(logits / temperature)`, and their entropy.

    `temperature` must be the rollout's, so that these log-probs are those of the distribution
    the tokens were sampled from. Padded response positions hold finite values that callers mask
    with `response_mask` (as in verl, nothing is zeroed here). The entropy [B, R] is returned when
    `calculate_entropy`; it takes part in autograd only with `entropy_requires_grad`, since it
    costs a vocabulary-sized activation per token that only an entropy bonus needs. With
    `calculate_sum_pi_squared` a third tensor [B, R] follows: sum_v pi(v)^2 of the same
    distribution at each position (no gradient; `actor.calculate_sum_pi_squared`). A list given as
    `router_logits` receives a mixture-of-experts model's router logits, one [B * T, experts] tensor
    per MoE layer (the router losses of `actor.moe` need them). With `other_tokens` [B, R, K] (token
    ids), the list `other_log_probs` receives their log-probs [B, R, K] under the same distribution,
    with gradient (the top-k distillation loss compares them with the teacher's).
    """
    response_length = _response_length(batch)
    # Only the last R + 1 positions' logits are needed; models that support it skip the rest.
    routers = {} if router_logits is None else {"output_router_logits": True}
    output = _forward(model, batch, logits_to_keep=response_length + 1, **routers)
    if router_logits is not None:
        router_logits.extend(output.router_logits or ())
    logits = output.logits[:, -response_length - 1 : -1, :]
    if temperature != 1.0:  # a vocabulary-sized pass (and one more in backward) only when it changes anything
        logits = logits / temperature
    if other_tokens is not None and other_log_probs is not None:
        other_log_probs.append(logprobs_of_tokens(logits, other_tokens.to(logits.device)))
    if calculate_entropy:
        log_probs, entropy = logprobs_and_entropy(logits, batch["responses"], entropy_requires_grad)
    else:
        log_probs, entropy = logprobs_from_logits(logits, batch["responses"]), None
    if calculate_sum_pi_squared:
        return log_probs, entropy, sum_pi_squared_from_logits(logits)
    return log_probs, entropy


def response_top_log_probs(
    model: torch.nn.Module, batch: TensorDict, *, temperature: float, k: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Log-probs [B, R] of the response tokens, as `response_log_probs` gives them, and at each
    response position the k largest log-probs [B, R, K] of the whole vocabulary with their token
    ids [B, R, K] (no gradient)."""
    response_length = _response_length(batch)
    output = _forward(model, batch, logits_to_keep=response_length + 1)
    logits = output.logits[:, -response_length - 1 : -1, :]
    if temperature != 1.0:
        logits = logits / temperature
    top, ids = top_logprobs(logits, k)
    return logprobs_from_logits(logits, batch["responses"]), top, ids


def response_values(model: torch.nn.Module, batch: TensorDict) -> torch.Tensor:
    """Values [B, R] of the response tokens from a value model, zero where `response_mask` is 0."""
    response_length = _response_length(batch)
    if "response_mask" not in batch.keys():
        raise BatchLayoutError("the batch has no 'response_mask' [B, R]; the critic needs it to mask values")
    output = _forward(model, batch)
    values = output.logits[:, -response_length - 1 : -1, 0].float()
    return values * batch["response_mask"].to(values.dtype)


def _model_config(path: str, trust_remote_code: bool, override_config: Optional[dict], config_key: str):
    override_config = dict(override_config or {})
    # As in verl, attn_implementation goes to the config loader: transformers honours it only there.
    attention = (
        {"attn_implementation": override_config.pop("attn_implementation")}
        if override_config.get("attn_implementation")
        else {}
    )
    try:
        config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, **attention)
    except (OSError, ValueError) as error:
        raise WorkerConfigError(
            f"cannot load a model config from {config_key}={path!r} ({_first_line(error)}); "
            "point it at a save_pretrained directory or a cached hub model"
        ) from None
    apply_override_config(config, override_config)
    return config


def apply_override_config(config: PretrainedConfig, override_config: dict) -> None:
    """`model.override_config` on a Hugging Face config, as verl applies it: its `model_config`
    section when it has one (verl's Megatron configs nest it there), else the whole dict; a dict
    value updates the sub-config of that name (`text_config`) key by key, any other value is set.
    Where verl fails (a dict for a plain dict field such as `rope_scaling`), the dict is merged in."""
    if "model_config" in override_config:
        override_config = dict(override_config["model_config"] or {})
    _update_config(config, override_config)


def _update_config(config: PretrainedConfig, overrides: dict) -> None:
    for key, value in overrides.items():
        current = getattr(config, key, None)
        if isinstance(value, dict) and isinstance(current, PretrainedConfig):
            _update_config(current, value)
        elif isinstance(value, dict) and isinstance(current, dict):
            setattr(config, key, {**current, **value})
        else:
            setattr(config, key, value)


def _from_pretrained(auto_class, path: str, config, dtype, trust_remote_code: bool, config_key: str, **kwargs):
    try:
        return auto_class.from_pretrained(
            path, config=config, dtype=resolve_dtype(dtype), trust_remote_code=trust_remote_code, **kwargs
        )
    except (OSError, ValueError) as error:
        raise WorkerConfigError(
            f"cannot load {auto_class.__name__} from {config_key}={path!r}: {_first_line(error)}"
        ) from None


def _prepare(model: PreTrainedModel, device, gradient_checkpointing: bool) -> PreTrainedModel:
    model.config.use_cache = False  # training forwards never reuse a KV cache
    if gradient_checkpointing:
        # Non-reentrant checkpointing works with FSDP2 and with inputs that need no grad.
        # transformers 5 renamed the method; older releases only have the first name.
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model.to(device)


def _forward(model: torch.nn.Module, batch: TensorDict, **kwargs):
    """The model over the batch's rows; with their images when the batch carries them."""
    inputs = _model_inputs(batch)
    if VISION_KEY not in batch.keys():
        return model(**inputs, use_cache=False, **kwargs)
    # Any token may be an image slot: a tool's images sit in the response, among the tool's tokens.
    # The first slots of the sequence are the images' (the tool loop shows no image after a
    # placeholder id the model sampled), so a sampled one is text.
    rows = batch.get(VISION_KEY).tolist()
    mask = inputs["attention_mask"]
    output, _ = vision_forward(model, inputs["input_ids"], mask, mask.bool(), rows, use_cache=False, **kwargs)
    return output


def _model_inputs(batch: TensorDict) -> dict[str, torch.Tensor]:
    missing = [key for key in FORWARD_KEYS if key not in batch.keys()]
    if missing:
        raise BatchLayoutError(
            f"the batch lacks {', '.join(missing)}; a forward pass needs {', '.join(FORWARD_KEYS)} (docs/CONTRACTS.md)"
        )
    return {key: batch[key] for key in ("input_ids", "attention_mask", "position_ids")}


def _response_length(batch: TensorDict) -> int:
    response_length = batch["responses"].shape[-1]
    if response_length >= batch["input_ids"].shape[-1]:
        raise BatchLayoutError(
            f"responses are {response_length} tokens but input_ids only "
            f"{batch['input_ids'].shape[-1]}; input_ids must be cat(prompts, responses)"
        )
    return response_length


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
