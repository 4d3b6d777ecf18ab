"""On-policy distillation on the training ranks (`distillation.enabled`, verl 0.8+'s keys).

The teachers are placed like the reference policy: every training rank holds each teacher as a
role of its own, `teacher` or `teacher:<key>` (FSDP-sharded with `actor_rollout_ref.ref.fsdp_config`, its
log-prob micro-batches `actor_rollout_ref.ref.log_prob_*`), frozen. After the old-log-prob and
reference stages, the trainer's `teacher` stage has each row scored by its teacher: the log-prob of
every response token under the teacher, written onto the row as `teacher_log_prob` (0 at padding);
with `loss_mode=forward_kl_topk` also the teacher's `topk` largest log-probs of the whole vocabulary
at each response position and their token ids (`teacher_topk_log_probs`, `teacher_topk_ids`, [R, K]
a row), which the actor's loss compares with the student's log-probs of the same ids.
As verl's teacher servers do, a teacher scores the student's prompt and response tokens as given,
at temperature 1 (a forward pass, no sampling); the student's own log-probs stay at the rollout's
temperature. The actor's loss then adds the term of `core_v1.algorithms.distillation`.

Teachers (`distillation.teacher_models`, as in verl): the single default entry `teacher_model` scores
every row (its `key` is not needed); with other named entries, `teacher_model` is dropped (verl pops
it) and each row goes to the teacher whose `key` equals the row's `distillation.teacher_key` column
(`data_source` by default). A teacher must share the student's tokenizer: it reads the student's
token ids.

verl serves teachers on a pool of inference servers of their own (`distillation.nnodes`,
`n_gpus_per_node`, each teacher's `num_replicas` and `inference.*`); here they share the training
ranks, which changes where they run, not their log-probs (shims/verl_keys says so per key).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Optional, Sequence

import torch
from tensordict import TensorDict

from core_v1.algorithms.distillation import (
    TOPK_LOSS_MODE,
    TopKLogProbs,
    check_distillation_loss_mode,
    combine_with_task_loss,
    compute_distillation_loss,
)
from core_v1.config.schema import ConfigError, DistillationConfig, DistillationLossConfig, PPOConfig
from core_v1.workers import distributed
from core_v1.workers.errors import WorkerConfigError
from core_v1.workers.model import (
    FORWARD_KEYS,
    forward_keys,
    load_causal_lm,
    response_log_probs,
    response_top_log_probs,
)
from core_v1.workers.training import map_micro_batches, micro_batch_rows, micro_batching, require_fields

TEACHER_ROLE_PREFIX = "teacher:"  # of a routed teacher's role; the single teacher's is "teacher"
SINGLE_TEACHER = "teacher_model"  # verl's default entry
TEACHER_FIELD = "teacher_log_prob"
TOPK_FIELDS = ("teacher_topk_log_probs", "teacher_topk_ids")  # forward_kl_topk's, [R, K] a row
_TEACHER_TEMPERATURE = 1.0  # verl's teachers return prompt log-probs of a plain forward pass


# ------------------------------------------------------------------------------------- config
def teacher_models(distillation: DistillationConfig) -> dict[str, str]:
    """`{routing key: model path}` of the configured teachers (see the module docstring); the single
    default teacher's key is "" (it scores every row). Raises ConfigError for a teacher without a
    model path, a named teacher without a key, or two teachers with one key."""
    entries = {name: dict(entry or {}) for name, entry in dict(distillation.teacher_models).items()}
    if len(entries) > 1:
        entries.pop(SINGLE_TEACHER, None)
    if not entries:
        raise ConfigError(
            "distillation.enabled=true needs a teacher: set distillation.teacher_models.teacher_model.model_path"
        )
    teachers: dict[str, str] = {}
    for name, entry in entries.items():
        where = f"distillation.teacher_models.{name}"
        if not entry.get("model_path"):
            raise ConfigError(
                f"{where}.model_path is not set: name the teacher's checkpoint (a local folder or a Hub id)"
            )
        key = "" if len(entries) == 1 else entry.get("key")
        if key is None:
            raise ConfigError(
                f"{where}.key is not set: with several teachers each names the value of the rows' "
                f"{distillation.teacher_key!r} column (distillation.teacher_key) it scores"
            )
        if str(key) in teachers:
            raise ConfigError(f"{where}.key={key!r}: two teachers have this key; give each teacher its own")
        teachers[str(key)] = str(Path(str(entry["model_path"])).expanduser())
    return teachers


def teacher_role(key: str) -> str:
    """The rank role of the teacher with routing key `key` ("teacher" for the single teacher)."""
    return TEACHER_ROLE_PREFIX + key if key else "teacher"


@dataclass(frozen=True)
class DistillationLoss:
    """`distillation.distillation_loss`, as the actor's loss reads it."""

    loss_mode: str
    use_policy_gradient: bool
    use_task_rewards: bool
    coef: float
    loss_max_clamp: Optional[float]
    clip_ratio: float
    clip_ratio_low: Optional[float]
    clip_ratio_high: Optional[float]
    topk: Optional[int] = None  # read by forward_kl_topk only, as log_prob_min_clamp
    log_prob_min_clamp: Optional[float] = None

    @property
    def uses_topk(self) -> bool:
        return self.loss_mode == TOPK_LOSS_MODE

    @property
    def fields(self) -> tuple[str, ...]:
        """The teacher's fields the loss reads from each row."""
        return (TEACHER_FIELD, *TOPK_FIELDS) if self.uses_topk else (TEACHER_FIELD,)

    @classmethod
    def of(cls, loss: DistillationLossConfig) -> "DistillationLoss":
        """Read and check the section (a mode rlbridge does not compute is refused here)."""
        check_distillation_loss_mode(loss.loss_mode, loss.use_policy_gradient)
        if loss.policy_loss_mode != "vanilla":
            raise ConfigError(
                f"distillation.distillation_loss.policy_loss_mode={loss.policy_loss_mode!r} is not "
                "supported: distillation as a reward uses PPO's clipped surrogate (vanilla), as verl's "
                "does; set it to vanilla"
            )
        if loss.loss_mode == TOPK_LOSS_MODE and (loss.topk is None or loss.topk < 1):
            raise ConfigError(
                f"distillation.distillation_loss.topk={loss.topk} with loss_mode=forward_kl_topk: set "
                "the number of the teacher's most likely tokens compared at each position (verl's default: 128)"
            )
        if loss.loss_max_clamp is not None and loss.loss_max_clamp <= 0:
            raise ConfigError(
                f"distillation.distillation_loss.loss_max_clamp={loss.loss_max_clamp} must be positive "
                "(or null: no clamp)"
            )
        return cls(
            loss.loss_mode,
            loss.use_policy_gradient,
            loss.use_task_rewards,
            loss.distillation_loss_coef,
            loss.loss_max_clamp,
            loss.clip_ratio,
            loss.clip_ratio_low,
            loss.clip_ratio_high,
            loss.topk,
            loss.log_prob_min_clamp,
        )

    def add_to(
        self,
        task_loss: torch.Tensor,
        micro_batch: TensorDict,
        log_prob: torch.Tensor,
        loss_agg_mode: str,
        student_topk: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The actor's loss with the distillation term, and the term's metrics; `student_topk` [B, R, K]
        holds the student's log-probs of the teacher's top-k ids (forward_kl_topk only)."""
        topk = None if student_topk is None else TopKLogProbs(student_topk, micro_batch[TOPK_FIELDS[0]])
        weights = micro_batch["rollout_is_weights"] if "rollout_is_weights" in micro_batch.keys() else None
        loss, metrics = compute_distillation_loss(
            micro_batch["old_log_probs"],
            log_prob,
            micro_batch[TEACHER_FIELD],
            micro_batch["response_mask"],
            loss_mode=self.loss_mode,
            use_policy_gradient=self.use_policy_gradient,
            loss_agg_mode=loss_agg_mode,
            loss_max_clamp=self.loss_max_clamp,
            clip_ratio=self.clip_ratio,
            clip_ratio_low=self.clip_ratio_low,
            clip_ratio_high=self.clip_ratio_high,
            rollout_is_weights=weights,
            topk=topk,
            log_prob_min_clamp=self.log_prob_min_clamp,
        )
        total = combine_with_task_loss(
            task_loss, loss, use_task_rewards=self.use_task_rewards, distillation_loss_coef=self.coef
        )
        return total, metrics


def distillation_loss_of(config: PPOConfig) -> Optional[DistillationLoss]:
    """The loss term a run's actor adds, or None without distillation."""
    return DistillationLoss.of(config.distillation.distillation_loss) if config.distillation.enabled else None


def check_distillation(config: PPOConfig) -> None:
    """Everything the distillation keys ask for that rlbridge cannot run, before anything starts."""
    if not config.distillation.enabled:
        return
    if not config.trainer.use_v1:
        raise ConfigError(
            "on-policy distillation (distillation.enabled=true) runs on V1 only: drop trainer.use_v1=false"
        )
    if config.trainer.v1.worker_class:
        raise ConfigError(
            "on-policy distillation (distillation.enabled=true) needs rlbridge's own actor, whose "
            "loss adds the teacher's term; a V0 worker class (trainer.v1.worker_class) does not: drop "
            "one of the two"
        )
    teacher_models(config.distillation)
    distillation_loss_of(config)


# ------------------------------------------------------------------------------------- engine
class TeacherEngine:
    """One frozen teacher model; `compute_teacher_log_prob` is its only operation.

    Args:
        config: the run's config (`actor_rollout_ref.{model, ref}` are read: trust_remote_code, the
            reference's dtype, sharding and log-prob micro-batches).
        model_path: the teacher's weights.
        device: where the model runs; the caller chooses it.
    """

    def __init__(self, config: PPOConfig, model_path: str, device: str | torch.device = "cpu"):
        aro = config.actor_rollout_ref
        self.device = torch.device(device)
        model = load_causal_lm(
            model_path,
            dtype=aro.ref.fsdp_config.model_dtype,
            device="cpu",
            trust_remote_code=aro.model.trust_remote_code,
            config_key="distillation.teacher_models.*.model_path",
        )
        model.requires_grad_(False)
        self.model = distributed.place_model(model.eval(), aro.ref.fsdp_config, self.device)
        distillation = config.distillation.distillation_loss
        self.topk = distillation.topk if distillation.loss_mode == TOPK_LOSS_MODE else None
        rows = micro_batch_rows(
            aro.ref.log_prob_micro_batch_size_per_gpu,
            aro.ref.log_prob_micro_batch_size,
            "actor_rollout_ref.ref.log_prob_micro_batch_size",
        )
        self._micro_batch_rows = micro_batching(
            aro.ref.log_prob_use_dynamic_bsz,
            aro.ref.log_prob_max_token_len_per_gpu,
            rows,
            "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        )

    def compute_teacher_log_prob(self, batch: TensorDict) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """Log-probs [B, R] of `batch["responses"]` under the teacher (float32, CPU; 0 at response
        padding); with forward_kl_topk also the teacher's top-k log-probs and their token ids
        [B, R, K] (`TOPK_FIELDS`)."""
        require_fields(batch, FORWARD_KEYS, "compute_teacher_log_prob")
        self._check_vocabulary(batch["responses"])
        if self.topk:
            with_top = partial(response_top_log_probs, self.model, temperature=_TEACHER_TEMPERATURE, k=self.topk)
            log_probs, top, ids = map_micro_batches(
                self.model, batch, forward_keys(batch), self._micro_batch_rows, self.device, with_top
            )
            return log_probs, top, ids
        forward = partial(response_log_probs, self.model, temperature=_TEACHER_TEMPERATURE)
        log_probs, _ = map_micro_batches(
            self.model, batch, forward_keys(batch), self._micro_batch_rows, self.device, forward
        )
        return log_probs

    def _check_vocabulary(self, tokens: torch.Tensor) -> None:
        vocabulary = self.model.get_output_embeddings().weight.shape[0]
        if tokens.numel() and int(tokens.max()) >= vocabulary:
            raise WorkerConfigError(
                f"a response token id ({int(tokens.max())}) is outside the teacher's vocabulary "
                f"({vocabulary} tokens): a teacher must share the student's tokenizer "
                "(distillation.teacher_models.*.model_path)"
            )


def teacher_roles(config: PPOConfig, device: torch.device) -> dict[str, TeacherEngine]:
    """The rank's teacher roles, `{"teacher:<key>": engine}` (none without distillation)."""
    if not config.distillation.enabled:
        return {}
    return {
        teacher_role(key): TeacherEngine(config, path, device)
        for key, path in teacher_models(config.distillation).items()
    }


# ------------------------------------------------------------------------------------ routing
def route_rows(
    teacher_keys: Sequence[str], rows: int, routing: Optional[Sequence[Any]], teacher_key: str
) -> dict[str, list[int]]:
    """`{teacher key: row indices}` of a batch of `rows` rows: every row to the single teacher (key
    ""), else each row to the teacher whose key is the row's value in `routing` (the batch's
    `teacher_key` column, None when the rows have none). Raises ConfigError for a row no teacher takes."""
    if list(teacher_keys) == [""]:
        return {"": list(range(rows))}
    if routing is None:
        raise ConfigError(
            f"distillation.teacher_key={teacher_key!r}: the training rows have no such field, so "
            "they cannot be routed to a teacher; name a column of the dataset (e.g. data_source)"
        )
    routes: dict[str, list[int]] = {}
    for row, value in enumerate(routing):
        if str(value) not in teacher_keys:
            raise ConfigError(
                f"no teacher for {teacher_key}={value!r} (distillation.teacher_models keys: "
                f"{', '.join(sorted(teacher_keys))}); add a teacher with that key"
            )
        routes.setdefault(str(value), []).append(row)
    return routes
