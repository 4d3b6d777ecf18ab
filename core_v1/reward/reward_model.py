"""The served reward model: a sequence-classification model scores each (prompt, response).

Config, one place for both trainers (V1 `reward.reward_model.*`; verl's V0 `reward_model.*` keys
move here through the rename table):

- `enable`, `model_path`: an `AutoModelForSequenceClassification` checkpoint with one label (verl's
  discriminative reward model); its one logit on the last token is the score.
- `micro_batch_size_per_gpu`: rows per forward pass (verl's `reward_model.micro_batch_size_per_gpu`).
- `max_length`: longest input the model sees; longer inputs keep their *end* (the response and
  the token that is scored), where verl cut the end off.
- `input_tokenizer`: the tokenizer that wrote the policy's tokens (default: the policy's own).
  When the reward model's tokenizer differs from it (another vocabulary or chat template), each
  row is decoded (the row's `raw_prompt` messages plus the decoded response, as one assistant turn)
  and re-encoded with the reward model's chat template, as verl's `_switch_chat_template` does;
  otherwise the policy's prompt and response tokens go in as they are.
- `trust_remote_code`; `rollout.dtype` (default: bfloat16 on GPU, float32 on CPU).
- `combine`: how the model's score meets the rule score (`reward.custom_reward_function` or the
  scorer registered for the row's `data_source`):
  `replace` (default, verl's behaviour: the reward model's score is the reward; the rule score,
  where the row's data source has one, is still reported as `reward_model/rule_score/mean`) or
  `add` (reward = rule score + reward-model score; every row then needs a rule score).

Where it runs: in the trainer process, on the trainer's device, in the reward stage of each step
(V1 `PPOTrainer._compute_reward_colocate`, V0 `RayPPOTrainer._compute_reward`), on the training
batch. Validation reports the rule score. verl's other `reward_model.rollout.*` settings (an
inference server's parallelism and memory) and its placement keys (`enable_resource_pool`,
`n_gpus_per_node`, `nnodes`) have nothing to configure here: the key table declares them no-op
(one warning line at start-up), and `build_reward_model` names any other `rollout.*` key it gets.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
from contextlib import contextmanager
from typing import Any, Optional, Sequence

import torch

COMBINE_MODES = ("replace", "add")
_ROLLOUT_KEYS_READ = {"dtype"}


class RewardModel:
    """A loaded sequence-classification reward model and the tokenizer(s) that feed it."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        input_tokenizer: Any,
        micro_batch_size: int = 8,
        max_length: Optional[int] = None,
        device: str = "cpu",
    ):
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.input_tokenizer = input_tokenizer
        self.micro_batch_size = micro_batch_size
        self.max_length = max_length
        self.device = device
        self.reencode = not same_tokenizer(tokenizer, input_tokenizer)

    @classmethod
    def from_pretrained(
        cls,
        path: str,
        input_tokenizer: Any,
        device: str = "cpu",
        dtype: Optional[str] = None,
        trust_remote_code: bool = False,
        **kwargs: Any,
    ) -> "RewardModel":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        torch_dtype = (
            getattr(torch, dtype) if dtype else (torch.bfloat16 if device.startswith("cuda") else torch.float32)
        )
        model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=1, dtype=torch_dtype, trust_remote_code=trust_remote_code
        )
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
        return cls(model, tokenizer, input_tokenizer, device=device, **kwargs)

    # ------------------------------------------------------------------------------ scoring
    @torch.no_grad()
    def score(
        self,
        prompt_ids: Sequence[Sequence[int]],
        response_ids: Sequence[Sequence[int]],
        chats: Optional[Sequence[Optional[list]]] = None,
    ) -> torch.Tensor:
        """One score per row [B] (float32, CPU) for unpadded prompt and response token ids."""
        chats = chats if chats is not None else [None] * len(prompt_ids)
        inputs = [self.encode(p, r, c) for p, r, c in zip(prompt_ids, response_ids, chats)]
        scores = [
            self.score_ids(inputs[start : start + self.micro_batch_size])
            for start in range(0, len(inputs), self.micro_batch_size)
        ]
        return torch.cat(scores) if scores else torch.zeros(0)

    def encode(self, prompt_ids: Sequence[int], response_ids: Sequence[int], chat: Optional[list] = None) -> list[int]:
        """The reward model's input ids for one row (see the module docstring)."""
        if not self.reencode:
            ids = [*prompt_ids, *response_ids]
        else:
            response = self.input_tokenizer.decode(list(response_ids), skip_special_tokens=True)
            if chat:
                text = self.tokenizer.apply_chat_template(
                    [*[dict(m) for m in chat], {"role": "assistant", "content": response}],
                    tokenize=False,
                    add_generation_prompt=False,
                )
            else:  # no messages to re-template: the decoded prompt and response as plain text
                text = self.input_tokenizer.decode(list(prompt_ids), skip_special_tokens=True) + response
            ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if self.max_length and len(ids) > self.max_length:
            ids = ids[-self.max_length :]
        return ids or [self._pad_id]

    def score_ids(self, rows: list[list[int]]) -> torch.Tensor:
        """Scores [B] for rows of the reward model's own input ids (one forward; differentiable
        outside `score`, which is how examples/reward_model trains it)."""
        # Left padding, fed as embeddings: the model then pools the logit of the last position,
        # which is every row's real last token. (Given input_ids, HF pools the last token that is
        # not the pad id, which is wrong when a response ends with an eos that doubles as pad.)
        width = max(len(r) for r in rows)
        input_ids = torch.full((len(rows), width), self._pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, width - len(row) :] = 1
        input_ids, attention_mask = input_ids.to(self.device), attention_mask.to(self.device)
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        embeds = self.model.get_input_embeddings()(input_ids)
        with _quiet("transformers.modeling_layers"):  # its "cannot detect padding in inputs_embeds" note
            logits = self.model(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=position_ids).logits
        return logits[:, 0].float().cpu()

    @property
    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return pad if pad is not None else (self.tokenizer.eos_token_id or 0)


def same_tokenizer(a: Any, b: Any) -> bool:
    """Whether token ids mean the same text and chats are templated alike under both tokenizers."""
    return a is b or (
        a.get_vocab() == b.get_vocab() and getattr(a, "chat_template", None) == getattr(b, "chat_template", None)
    )


@contextmanager
def _quiet(logger_name: str):
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


# ------------------------------------------------------------------------- from a run's config
def build_reward_model(reward_model_config: Any, policy_tokenizer: Any, device: str) -> Optional[RewardModel]:
    """The reward model `reward.reward_model` describes, or None when it is off."""
    cfg = reward_model_config
    if not cfg.enable:
        return None
    # verl's serving and placement keys are judged at start-up by the key table (shims.verl_keys);
    # this names what reaches here without it.
    unused = [f"reward.reward_model.rollout.{key}" for key in sorted(set(dict(cfg.rollout or {})) - _ROLLOUT_KEYS_READ)]
    if unused:
        print(
            f"warning: {', '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect: the reward model "
            "runs as one model in the trainer process, on the trainer's device, not on inference servers of its own",
            file=sys.stderr,
        )
    input_tokenizer = policy_tokenizer
    if cfg.input_tokenizer:
        from transformers import AutoTokenizer

        input_tokenizer = AutoTokenizer.from_pretrained(cfg.input_tokenizer, trust_remote_code=cfg.trust_remote_code)
    return RewardModel.from_pretrained(
        cfg.model_path,
        input_tokenizer,
        device=device,
        dtype=(cfg.rollout or {}).get("dtype"),
        trust_remote_code=cfg.trust_remote_code,
        micro_batch_size=cfg.micro_batch_size_per_gpu,
        max_length=cfg.max_length,
    )


# --------------------------------------------------------------------- the padded training batch
def score_padded_batch(
    reward_model: RewardModel,
    prompts: torch.Tensor,
    responses: torch.Tensor,
    attention_mask: torch.Tensor,
    raw_prompts: Optional[Sequence] = None,
) -> torch.Tensor:
    """Scores [B] for a training batch laid out as both trainers lay it out: `prompts` left-padded,
    `responses` right-padded, `attention_mask` over both."""
    width = prompts.shape[1]
    prompt_mask, response_mask = attention_mask[:, :width].bool(), attention_mask[:, width:].bool()
    prompt_ids = [row[mask].tolist() for row, mask in zip(prompts, prompt_mask)]
    response_ids = [row[mask].tolist() for row, mask in zip(responses, response_mask)]
    chats = [list(chat) if chat is not None else None for chat in raw_prompts] if raw_prompts is not None else None
    return reward_model.score(prompt_ids, response_ids, chats)


def rescore_training_batch(
    reward_model: RewardModel,
    combine: str,
    token_level_scores: torch.Tensor,
    prompts: torch.Tensor,
    responses: torch.Tensor,
    attention_mask: torch.Tensor,
    raw_prompts: Optional[Sequence] = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The reward stage of both trainers: score the padded batch and combine with the rule scores
    already on it; returns the new `token_level_scores` [B, R] and the metrics."""
    rm_scores = score_padded_batch(reward_model, prompts, responses, attention_mask, raw_prompts)
    return combine_scores(token_level_scores, rm_scores, attention_mask[:, prompts.shape[1] :], combine)


def combine_scores(
    rule_token_scores: torch.Tensor, rm_scores: torch.Tensor, response_attention: torch.Tensor, combine: str
) -> tuple[torch.Tensor, dict[str, float]]:
    """The `token_level_scores` [B, R] to train on and the reward-model metrics.

    `rule_token_scores` holds each row's rule score on its last response token (NaN rows: no rule
    scorer for that data source); `rm_scores` [B] goes on the same token.
    """
    last = (response_attention.sum(-1) - 1).clamp(min=0)
    rm_tokens = torch.zeros_like(rule_token_scores)
    rm_tokens[torch.arange(len(rm_scores)), last] = rm_scores.to(rm_tokens.dtype)
    rule = rule_token_scores.sum(-1)
    scored = rule[~rule.isnan()]
    metrics = {
        "reward_model/score/mean": rm_scores.float().mean().item(),
        "reward_model/rule_score/mean": scored.mean().item() if len(scored) else math.nan,
    }
    _check_combine(rule, combine)
    return (rm_tokens if combine == "replace" else rule_token_scores + rm_tokens), metrics


def combine_sequence_scores(rule_scores: torch.Tensor, rm_scores: torch.Tensor, combine: str) -> torch.Tensor:
    """One score per row [B], combined as `combine_scores` combines them (ReMax's greedy baselines)."""
    _check_combine(rule_scores, combine)
    return rm_scores.float().clone() if combine == "replace" else rule_scores.float() + rm_scores.float()


def _check_combine(rule_scores: torch.Tensor, combine: str) -> None:
    if combine not in COMBINE_MODES:
        raise ValueError(f"reward.reward_model.combine={combine!r} is not one of {', '.join(COMBINE_MODES)}")
    if combine == "add" and rule_scores.isnan().any():
        raise ValueError(
            "reward.reward_model.combine=add needs a rule score for every row, but some rows' "
            "data_source has no scorer; register one or set reward.custom_reward_function"
        )


def rule_score_or_nan(
    data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
) -> float | dict:
    """The rule score in `replace` mode, where it is only reported: rows whose data source has no
    scorer get NaN instead of failing the sample (the reward model scores them)."""
    from core_v1.reward.scorers import SCORERS, default_compute_score

    if data_source not in SCORERS:
        return math.nan
    return default_compute_score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def rule_function_for(reward_config: Any, custom_fn: Any) -> Any:
    """The rule scorer a run uses: the custom function, else the built-in scorers, which may leave a
    row unscored (NaN) when a reward model replaces the score. With `reward.sandbox_fusion.url` the
    built-in scorers get the Sandbox Fusion settings (code rows run there), as verl's reward manager
    passes them to `default_compute_score` (and not to a custom function)."""
    from core_v1.reward.scorers import default_compute_score

    if custom_fn is not None:
        return custom_fn
    reward_model = getattr(reward_config, "reward_model", None)
    replaces = bool(getattr(reward_model, "enable", False)) and getattr(reward_model, "combine", "replace") == "replace"
    fn = rule_score_or_nan if replaces else default_compute_score
    if getattr(reward_config, "sandbox_fusion", None) is None or not reward_config.sandbox_fusion.url:
        return fn
    return with_sandbox_fusion(
        fn,
        reward_config.sandbox_fusion.url,
        reward_config.sandbox_fusion.max_concurrent,
        reward_config.sandbox_fusion.memory_limit_mb,
    )


def with_sandbox_fusion(fn: Any, url: str, max_concurrent: Any, memory_limit_mb: Any) -> "SandboxFusionSettings":
    """`fn` with verl's `sandbox_fusion_url`, `concurrent_semaphore` (this process's limit of
    `max_concurrent` requests in flight to `url`) and `memory_limit_mb` keyword arguments."""
    from core_v1.errors import UserError

    if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise UserError(
            f"reward.sandbox_fusion.url must be the http:// or https:// URL of a Sandbox Fusion "
            f"service's run_code endpoint (e.g. http://localhost:8080/run_code), got {url!r}"
        )
    for key, value in (("max_concurrent", max_concurrent), ("memory_limit_mb", memory_limit_mb)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise UserError(f"reward.sandbox_fusion.{key} must be an int >= 1, got {value!r}")
    return SandboxFusionSettings(fn, url, max_concurrent, memory_limit_mb)


class SandboxFusionSettings:
    """A rule scorer called with the run's Sandbox Fusion settings. A plain object rather than a
    closure, so that V0's prime reward manager can send it to its worker processes (pickle); each
    process takes its own semaphore (`sandbox_fusion.semaphore_for`) when it scores."""

    def __init__(self, fn: Any, url: str, max_concurrent: int, memory_limit_mb: int):
        functools.update_wrapper(self, fn)  # messages name the scorer, not this wrapper
        self.fn, self.url, self.max_concurrent, self.memory_limit_mb = fn, url, max_concurrent, memory_limit_mb

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from core_v1.reward.scorers.sandbox_fusion import semaphore_for

        semaphore = semaphore_for(self.url, self.max_concurrent)
        return self.fn(
            *args,
            sandbox_fusion_url=self.url,
            concurrent_semaphore=semaphore,
            memory_limit_mb=self.memory_limit_mb,
            **kwargs,
        )
