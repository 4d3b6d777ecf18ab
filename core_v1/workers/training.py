"""What the actor and the critic share: micro-batching, the optimizer, the LR schedule, the PPO
mini-batch loop with gradient accumulation, and checkpoints.

`TrainingEngine` owns one model and its AdamW optimizer. A subclass supplies the loss of one
micro-batch; `TrainingEngine._train` runs the loop verl runs:

    for epoch in ppo_epochs:
        for mini_batch in batch (contiguous rows, no shuffling):   # one optimizer step each
            for micro_batch in mini_batch:                          # gradient accumulation
                (weight * loss(micro_batch)).backward()
            clip the gradient norm; step (or skip the step if the norm is not finite)
    step the LR schedule once

Gradient accumulation is exact: a micro-batch's loss is aggregated over its own tokens or
sequences (`core_v1.algorithms.agg_loss` with local counts), and `loss_weights` scales it by its
share of the mini-batch's count, so the accumulated gradient equals that of the mini-batch
loss computed in one piece, for every `loss_agg_mode`. Across data-parallel ranks the counts
are summed over ranks, so the gradient average FSDP takes is again the whole mini-batch's.

A checkpoint is a directory: `sharded/` (model and AdamW state as `torch.distributed.checkpoint`
shards, each rank writing its own; loadable at any number of ranks), `model/` (the gathered
model's `save_pretrained`, an export `from_pretrained` loads elsewhere; a LoRA model's merged, with
its adapter beside it in `lora_adapter/`) and `extra_state.pt` (LR
schedule, RNG states, counters). It is written to a sibling staging directory, fsynced, and
renamed into place (an older directory of the same name is moved aside first and deleted after;
`core_v1.utils.durable.replace_directory`), so a crash never leaves a half-written checkpoint under
the target name, and `load_checkpoint` puts back a directory such a crash left moved aside.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import shutil
import warnings
from collections import defaultdict
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np
import torch
import torch.distributed.checkpoint as dcp
from tensordict import TensorDict
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR

from core_v1.config.schema import CheckpointContentsConfig, OptimConfig
from core_v1.workers import distributed
from core_v1.workers.errors import BatchLayoutError, WorkerConfigError
from core_v1.utils.durable import fault_point, fsync_tree, recover_directory, remove_retired, replace_directory
from core_v1.workers.lora import merged_weights, save_exports

_SEQUENCE_MODES = ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")

MicroBatchLoss = Callable[[TensorDict], tuple[torch.Tensor, dict[str, float]]]


# ------------------------------------------------------------------------------ micro-batching
def split_rows(batch: TensorDict, rows: Optional[int]) -> list[TensorDict]:
    """Contiguous pieces of `rows` rows (the last may be shorter); the whole batch when `rows` is None."""
    if rows is None or rows >= batch.batch_size[0]:
        return [batch]
    return list(batch.split(rows, dim=0))


def rows_per_rank(global_rows: int, key: str) -> int:
    """A global row count split evenly over the data-parallel ranks (each rank gets its shard)."""
    ranks = distributed.world_size()
    if global_rows % ranks:
        raise WorkerConfigError(
            f"{key} = {global_rows} rows cannot be split evenly over {ranks} ranks; make it a multiple of {ranks}"
        )
    return global_rows // ranks


def micro_batch_rows(per_gpu: Optional[int], global_rows: Optional[int], key: str) -> Optional[int]:
    """Rows per micro-batch on this rank.

    `per_gpu` (a `*_per_gpu` key) wins; else the global count is split over the ranks; None (one
    micro-batch per mini-batch, or the whole batch for forward passes) when neither is set.
    """
    if per_gpu:
        return per_gpu
    return rows_per_rank(global_rows, key) if global_rows else None


@dataclasses.dataclass(frozen=True)
class TokenBudget:
    """Micro-batches by tokens (`use_dynamic_bsz`): as few as hold at most `max_tokens` real tokens
    (`attention_mask`) each, with rows dealt longest first to the lightest micro-batch. Under
    FSDP every rank runs the largest count any rank needs (each forward is a collective)."""

    max_tokens: int
    key: str


MicroBatching = Union[None, int, TokenBudget]
"""Rows per micro-batch (None: one micro-batch), or a token budget."""


def micro_batching(dynamic: bool, max_tokens: int, rows: Optional[int], key: str) -> MicroBatching:
    """The micro-batching a `use_dynamic_bsz`-style flag chooses: a token budget, else `rows`."""
    if not dynamic:
        return rows
    if max_tokens <= 0:
        raise WorkerConfigError(f"{key}={max_tokens} must be positive with dynamic batch sizes")
    return TokenBudget(int(max_tokens), key)


def micro_batch_indices(batch: TensorDict, spec: MicroBatching) -> list[torch.Tensor]:
    """Row indices of each micro-batch of `batch` under `spec` (together, every row exactly once)."""
    rows = batch.batch_size[0]
    if not isinstance(spec, TokenBudget):
        step = rows if spec is None or spec >= rows else spec
        return list(torch.arange(rows).split(max(1, step)))
    lengths = batch["attention_mask"].sum(-1).tolist()
    longest = max(lengths, default=0)
    if longest > spec.max_tokens:
        raise WorkerConfigError(
            f"a row of {longest} tokens does not fit {spec.key}={spec.max_tokens}; raise it to at "
            "least the longest prompt + response"
        )
    count = max(1, -(-sum(lengths) // spec.max_tokens))
    while True:
        # Every rank holds as many rows as the others (the worker group pads shards), so every
        # rank can run the agreed count; the loop decides together, or a collective would hang.
        count = distributed.max_over_ranks(min(count, rows))
        groups = _deal_by_tokens(lengths, count)
        overflow = count < rows and any(sum(lengths[i] for i in group) > spec.max_tokens for group in groups)
        if not distributed.max_over_ranks(int(overflow)):
            return [torch.tensor(sorted(group), dtype=torch.long) for group in groups]
        count += 1


def _deal_by_tokens(lengths: list[int], count: int) -> list[list[int]]:
    groups: list[list[int]] = [[] for _ in range(count)]
    load = [0] * count
    for row in sorted(range(len(lengths)), key=lambda r: (-lengths[r], r)):
        lightest = min(range(count), key=lambda g: (load[g], g))
        groups[lightest].append(row)
        load[lightest] += lengths[row]
    return groups


_SEQUENCE_FIELDS = ("input_ids", "attention_mask", "position_ids")


def trim_padding(micro_batch: TensorDict, keep_response_width: bool = False) -> TensorDict:
    """The micro-batch without the columns that are padding in all of its rows.

    A batch is padded to its longest prompt and longest response; a micro-batch of shorter rows
    would pay for columns no row uses. Leading prompt columns (prompts are left-padded) and
    trailing response columns (responses are right-padded) that hold no real token in any row
    (`attention_mask`) are cut: from `input_ids`, `attention_mask`, `position_ids`, `prompts`, and
    from every other `[b, R, ...]` field (R = the response width). Positions keep their values.
    `keep_response_width` cuts only prompt columns (`seq-mean-token-sum-norm` divides by R).
    """
    mask = micro_batch["attention_mask"]
    response_width = micro_batch["responses"].shape[1]
    prompt_width = mask.shape[1] - response_width
    used_prompt = mask[:, :prompt_width].any(0)
    start = int(used_prompt.int().argmax()) if bool(used_prompt.any()) else prompt_width
    used_response = mask[:, prompt_width:].any(0).nonzero()
    width = int(used_response.max()) + 1 if len(used_response) else 1
    width = response_width if keep_response_width else width
    if start == 0 and width == response_width:
        return micro_batch
    trimmed = {}
    for key, value in micro_batch.items():
        if key in _SEQUENCE_FIELDS:
            value = value[:, start : prompt_width + width]
        elif key == "prompts":
            value = value[:, start:]
        elif isinstance(value, torch.Tensor) and value.dim() >= 2 and value.shape[1] == response_width:
            value = value[:, :width]
        trimmed[key] = value
    return TensorDict(trimmed, batch_size=micro_batch.batch_size)


def _to_response_width(output: Optional[torch.Tensor], response_width: int) -> Optional[torch.Tensor]:
    """A trimmed micro-batch's [b, r, ...] output padded with zeros back to the batch's R columns."""
    if output is None or output.dim() < 2 or output.shape[1] == response_width:
        return output
    padding = torch.zeros(
        output.shape[0], response_width - output.shape[1], *output.shape[2:], dtype=output.dtype, device=output.device
    )
    return torch.cat([output, padding], dim=1)


def require_fields(batch: TensorDict, fields: tuple[str, ...], stage: str) -> None:
    """Raise `BatchLayoutError` naming the fields of `fields` that `batch` lacks."""
    missing = [key for key in fields if key not in batch.keys()]
    if missing:
        raise BatchLayoutError(
            f"{stage} needs batch fields {', '.join(missing)}, which are missing; "
            "see docs/CONTRACTS.md for the stage that writes each one"
        )


@torch.no_grad()
def map_micro_batches(
    model: torch.nn.Module,
    batch: TensorDict,
    fields: tuple[str, ...],
    rows: MicroBatching,
    device: torch.device,
    forward: Callable[[TensorDict], tuple],
) -> list[Optional[torch.Tensor]]:
    """Run `forward` (returning a tuple of [b, ...] tensors or None) over micro-batches, in eval mode.

    Each micro-batch is cut to its own longest row (`trim_padding`); outputs come back `[B, R]`,
    zero at response padding (`attention_mask` 0).

    Returns, for each element of the tuple, the pieces concatenated over the whole batch on CPU
    (None where `forward` gave None).
    """
    model.eval()
    selected = batch.select(*fields)
    groups = micro_batch_indices(selected, rows)
    width = selected["responses"].shape[1]
    outputs = [
        tuple(_to_response_width(out, width) for out in forward(trim_padding(selected[group]).to(device)))
        for group in groups
    ]
    order = torch.cat(groups) if groups else torch.zeros(0, dtype=torch.long)
    # Zero at response padding whatever micro-batch a row was in (tool tokens keep their values).
    padding = selected["attention_mask"][:, -width:] == 0
    return [None if pieces[0] is None else _joined(pieces, order, padding) for pieces in zip(*outputs)]


def _joined(pieces: Sequence[torch.Tensor], order: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
    """One output's micro-batch pieces [b, R, ...] as one [B, R, ...] tensor in row order on CPU,
    zero at response padding; floating outputs as float32, token ids keep their integer type."""
    joined = torch.cat([p.float().cpu() if p.is_floating_point() else p.cpu() for p in pieces])
    per_position = padding.reshape(*padding.shape, *(1,) * (joined.dim() - padding.dim()))
    return _in_row_order(joined, order).masked_fill(per_position, 0)


def _in_row_order(stacked: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """Undo the micro-batches' row order: row `order[i]` of the batch is `stacked[i]`."""
    if torch.equal(order, torch.arange(len(order))):
        return stacked
    result = torch.empty_like(stacked)
    result[order] = stacked
    return result


def loss_weights(micro_masks: list[torch.Tensor], loss_agg_mode: str) -> list[float]:
    """Weights w_i such that sum_i w_i * agg_loss(micro_i) = agg_loss(mini-batch), averaged over ranks.

    `agg_loss` with local counts divides a micro-batch's loss by its own valid tokens
    (`token-mean`) or by its sequences that have a valid token (sequence modes); weighting it by
    that count over the mini-batch's count restores the mini-batch denominator.
    """
    counts = torch.stack([_normaliser_count(mask, loss_agg_mode) for mask in micro_masks]).double()
    total = distributed.sum_over_ranks(counts.sum())
    if total.item() == 0:
        return [0.0] * len(micro_masks)
    # FSDP averages gradients over ranks; multiplying by the world size undoes that average.
    return (counts * distributed.world_size() / total).tolist()


def _normaliser_count(mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    if loss_agg_mode in _SEQUENCE_MODES:
        return (mask.sum(dim=-1) > 0).sum().cpu()
    return mask.sum().cpu()


# ------------------------------------------------------------------------- optimizer, schedule
def build_optimizer(model: torch.nn.Module, optim: OptimConfig) -> torch.optim.AdamW:
    """AdamW over the trainable parameters with `optim.{lr, weight_decay, betas}`."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(parameters, lr=optim.lr, weight_decay=optim.weight_decay, betas=tuple(optim.betas))


def lr_multiplier(
    step: int, *, schedule: str, warmup_steps: int, total_steps: int, min_lr_ratio: float, num_cycles: float
) -> float:
    """The factor on the base LR for the update numbered `step` (from 0); verl's schedules.

    - `constant`: linear warmup from 0 to 1 over `warmup_steps`, then 1.
    - `cosine` / `linear`: linear warmup from `min_lr_ratio` to 1, then a cosine (`num_cycles`
      waves, 0.5 = half a wave) or a straight line down to `min_lr_ratio` at `total_steps`,
      never below `min_lr_ratio`.

    Without warmup the first update runs at the full LR (verl's constant schedule computes
    `min(1, step / max(1, warmup))`, which gives 0 there and wastes the first update).
    """
    if schedule == "constant":
        return step / warmup_steps if step < warmup_steps else 1.0
    if step < warmup_steps:
        return min_lr_ratio + (1.0 - min_lr_ratio) * step / max(1, warmup_steps)
    progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
    if schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(2.0 * math.pi * num_cycles * progress))
    else:
        decay = 1.0 - progress
    return max(min_lr_ratio, min_lr_ratio + (1.0 - min_lr_ratio) * decay)


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimConfig, total_steps: Optional[int], config_prefix: str
) -> LambdaLR:
    """A `LambdaLR` over `lr_multiplier`, for `optim.lr_scheduler_type` (or its old name `warmup_style`).

    Warmup lasts `optim.lr_warmup_steps` updates, or `lr_warmup_steps_ratio * total_steps` when
    `lr_warmup_steps` is negative. Decaying schedules and warmup ratios need `total_steps`.
    """
    schedule = optim.warmup_style or optim.lr_scheduler_type
    needs_total = schedule != "constant" or (optim.lr_warmup_steps < 0 and optim.lr_warmup_steps_ratio > 0)
    if needs_total and not total_steps:
        raise WorkerConfigError(
            f"{config_prefix}.lr_scheduler_type={schedule} (or a warmup ratio) needs the number of "
            f"training steps: set {config_prefix}.total_training_steps or call "
            "set_total_training_steps(n) before the first update"
        )
    min_lr_ratio = optim.min_lr_ratio
    if min_lr_ratio is None:  # as in verl: unread by the constant schedule, an error for the others
        if schedule != "constant":
            raise WorkerConfigError(
                f"{config_prefix}.min_lr_ratio is null, but lr_scheduler_type={schedule} "
                f"decays to it: set {config_prefix}.min_lr_ratio to a number in [0, 1]"
            )
        min_lr_ratio = 0.0
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise WorkerConfigError(f"{config_prefix}.min_lr_ratio={min_lr_ratio} must lie in [0, 1]")
    warmup_steps = optim.lr_warmup_steps
    if warmup_steps < 0:
        warmup_steps = int(optim.lr_warmup_steps_ratio * (total_steps or 0))
    return LambdaLR(
        optimizer,
        partial(
            lr_multiplier,
            schedule=schedule,
            warmup_steps=warmup_steps,
            total_steps=total_steps or 0,
            min_lr_ratio=min_lr_ratio,
            num_cycles=optim.num_cycles,
        ),
    )


def clip_grad_norm(parameters: list[torch.nn.Parameter], max_norm: Optional[float]) -> torch.Tensor:
    """Total gradient 2-norm before clipping; gradients are scaled to `max_norm` when it is set (> 0)."""
    total_norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    # FSDP2: the norm of sharded gradients is a DTensor whose reduction over ranks is pending;
    # clipping accepts it as is, and `full_tensor()` completes it for the caller.
    global_norm = total_norm.full_tensor() if isinstance(total_norm, DTensor) else total_norm
    if max_norm and torch.isfinite(global_norm):
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, total_norm)
    return global_norm


# ------------------------------------------------------------------------------ the engine base
class TrainingEngine:
    """A model, its AdamW optimizer and LR schedule, the PPO update loop, and checkpoints.

    Subclasses (`ActorEngine`, `CriticEngine`) build the model, call `__init__`, and implement
    their update by handing `_train` the loss of one micro-batch. Metrics are named
    `<metric_prefix>/<name>`.
    """

    metric_prefix = "train"

    def __init__(
        self,
        model: torch.nn.Module,
        *,
        optim: OptimConfig,
        grad_clip: Optional[float],
        contents: CheckpointContentsConfig,
        device: torch.device,
        config_prefix: str,
        load_model: Callable[[str], torch.nn.Module],
    ):
        self.model = model
        self.device = device
        self.optimizer = build_optimizer(model, optim)
        self.skipped_steps = 0  # optimizer steps skipped because the gradient norm was not finite
        self._optim = optim
        # verl reads the newer `optim.clip_grad` first and falls back to the older `grad_clip`.
        self._max_grad_norm = optim.clip_grad if optim.clip_grad is not None else grad_clip
        self._contents = contents
        self._config_prefix = config_prefix
        self._load_model = load_model
        self._total_training_steps = optim.total_training_steps if optim.total_training_steps > 0 else None
        self._lr_scheduler: Optional[LambdaLR] = None

    # ---- schedule
    def set_total_training_steps(self, total_training_steps: int) -> None:
        """Fix the number of updates the LR schedule spans; call before the first update."""
        if total_training_steps <= 0:
            raise WorkerConfigError(f"total training steps must be positive, got {total_training_steps}")
        if self._lr_scheduler is not None and total_training_steps != self._total_training_steps:
            raise WorkerConfigError(
                "set_total_training_steps() after the LR schedule started; call it before "
                "the first update or load_checkpoint"
            )
        self._total_training_steps = total_training_steps

    @property
    def lr_scheduler(self) -> LambdaLR:
        """The LR schedule, built on first use (it needs the total number of training steps)."""
        if self._lr_scheduler is None:
            self._lr_scheduler = build_lr_scheduler(
                self.optimizer, self._optim, self._total_training_steps, self._config_prefix
            )
        return self._lr_scheduler

    # ---- the update loop
    def _train(
        self,
        batch: TensorDict,
        *,
        fields: tuple[str, ...],
        mini_batch_rows: int,
        micro_batch_rows: MicroBatching,
        epochs: int,
        loss_agg_mode: str,
        micro_batch_loss: MicroBatchLoss,
    ) -> dict[str, float]:
        """`epochs` passes of one optimizer step per mini-batch; returns metrics averaged over the steps.

        `micro_batch_loss(micro_batch)` returns the micro-batch's loss (aggregated over its own
        rows with `loss_agg_mode`) and float metrics of the same kind; both are weighted by
        `loss_weights`, so a mini-batch's metrics are whole-mini-batch values.
        """
        scheduler = self.lr_scheduler
        self.model.train()
        per_step: list[dict[str, float]] = []
        for _ in range(epochs):
            for mini_batch in split_rows(batch.select(*fields), mini_batch_rows):
                per_step.append(
                    self._accumulate_and_step(mini_batch, micro_batch_rows, loss_agg_mode, micro_batch_loss)
                )
        # Each rank's metrics are weighted by its share of the global counts; their mean over
        # ranks is the whole mini-batch's value.
        metrics = distributed.mean_over_ranks(_mean_per_key(per_step))
        metrics[f"{self.metric_prefix}/lr"] = scheduler.get_last_lr()[0]
        with warnings.catch_warnings():
            # When every step of this update was skipped, torch warns that the schedule moves before
            # the optimizer did; advancing once per update regardless is intended (as in verl).
            warnings.filterwarnings("ignore", message=r"Detected call of `lr_scheduler.step\(\)` before")
            scheduler.step()
        return metrics

    def _accumulate_and_step(
        self,
        mini_batch: TensorDict,
        micro_batch_rows: MicroBatching,
        loss_agg_mode: str,
        micro_batch_loss: MicroBatchLoss,
    ) -> dict[str, float]:
        metrics = self._accumulate_gradients(mini_batch, micro_batch_rows, loss_agg_mode, micro_batch_loss)
        grad_norm = self._clip_and_step()
        if grad_norm is not None:
            metrics[f"{self.metric_prefix}/grad_norm"] = grad_norm
        metrics[f"{self.metric_prefix}/skipped_steps"] = float(grad_norm is None)
        return metrics

    def _accumulate_gradients(
        self,
        mini_batch: TensorDict,
        micro_batch_rows: MicroBatching,
        loss_agg_mode: str,
        micro_batch_loss: MicroBatchLoss,
    ) -> dict[str, float]:
        """Zero the gradients, then backpropagate every micro-batch's weighted loss; returns the metrics."""
        micro_batches = [mini_batch[group] for group in micro_batch_indices(mini_batch, micro_batch_rows)]
        weights = loss_weights([micro["response_mask"] for micro in micro_batches], loss_agg_mode)
        self.optimizer.zero_grad(set_to_none=True)
        # Metrics stay on the device until the last micro-batch: reading one back per micro-batch
        # would stall the host until the device finished, leaving the device idle while the host
        # launches the next forward.
        metrics: dict[str, torch.Tensor | float] = defaultdict(float)
        for micro_batch, weight in zip(micro_batches, weights):
            micro_batch = trim_padding(micro_batch, keep_response_width=loss_agg_mode == "seq-mean-token-sum-norm")
            loss, micro_metrics = micro_batch_loss(micro_batch.to(self.device))
            (loss * weight).backward()
            for name, value in micro_metrics.items():
                metrics[name] = metrics[name] + weight * (value.detach().double() if torch.is_tensor(value) else value)
        return _read_back(metrics)

    def _clip_and_step(self) -> Optional[float]:
        """Clip and step; on a non-finite norm skip the step (counted) and return None."""
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = clip_grad_norm(parameters, self._max_grad_norm)
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_steps += 1
            return None
        self.optimizer.step()
        return grad_norm.item()

    # ---- weights out
    def named_parameters_for_sync(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) pairs of the whole model, named as `from_pretrained` of the same class expects.

        Tied weights appear under each of their names (as in `state_dict()`), so a fresh model
        loads them with `load_state_dict(..., strict=True)`. Tensors are detached; under FSDP2
        they are gathered to full tensors on CPU (every rank must iterate).
        """
        if distributed.world_size() > 1:
            pairs = distributed.full_model_state_dict(self.model).items()
        else:
            pairs = ((name, tensor.detach()) for name, tensor in self.model.state_dict().items())
        yield from merged_weights(pairs, self.model)  # a LoRA model's adapters merged into its base weights

    # ---- checkpoints
    def save_checkpoint(self, directory: str | os.PathLike) -> None:
        """Write model, optimizer and extra state (as `checkpoint.save_contents` says) to `directory`.

        Every rank writes its own shards (`sharded/`, torch.distributed.checkpoint); rank 0 adds
        the gathered model as a `save_pretrained` export (`model/`) and `extra_state.pt`. A
        collective: every rank calls it.
        """
        directory = Path(directory)
        contents = set(self._contents.save_contents)
        staging = directory.with_name(f".{directory.name}.staging")
        if distributed.is_main_process():
            shutil.rmtree(staging, ignore_errors=True)  # left by a run that died mid-save
            staging.mkdir(parents=True)
        distributed.barrier()
        sharded = distributed.sharded_state(
            self.model, self.optimizer if "optimizer" in contents else None, include_model="model" in contents
        )
        if sharded:
            with _one_process_checkpoint_is_intended():
                dcp.save(sharded, checkpoint_id=str(staging / "sharded"))
        export = distributed.full_model_state_dict(self.model) if "model" in contents else None
        if distributed.is_main_process():
            if export is not None:
                save_exports(self.model, export, staging)
            if "extra" in contents:
                torch.save(self._extra_state(), staging / "extra_state.pt")
            fsync_tree(staging)  # the shards of other ranks too (DCP fsyncs each rank's own as well)
            fault_point("rank.staged")
            replace_directory(staging, directory, "rank")
            remove_retired(directory)
        distributed.barrier()

    def load_checkpoint(self, directory: str | os.PathLike) -> None:
        """Restore what `checkpoint.load_contents` names from a directory `save_checkpoint` wrote, at
        any number of ranks (the shards are re-cut for this one's layout)."""
        directory = Path(directory)
        if distributed.is_main_process():
            recover_directory(directory)  # a save killed between moving the old folder aside and renaming the new in
        distributed.barrier()
        if not directory.is_dir():
            raise WorkerConfigError(f"checkpoint directory {str(directory)!r} does not exist")
        contents = set(self._contents.load_contents)
        extra = (
            torch.load(_checkpoint_part(directory, "extra_state.pt"), map_location="cpu", weights_only=True)
            if "extra" in contents
            else None
        )
        if extra is not None:
            self._load_schedule_state(extra)
        if "model" in contents or "optimizer" in contents:
            if extra is None or extra["lr_scheduler"] is not None:  # saved after the schedule started
                _ = self.lr_scheduler  # it adds `initial_lr` to the param groups, as they had when saved
            sharded = distributed.sharded_state(
                self.model, self.optimizer if "optimizer" in contents else None, include_model="model" in contents
            )
            with _one_process_checkpoint_is_intended():
                dcp.load(sharded, checkpoint_id=str(_checkpoint_part(directory, "sharded")))
            distributed.load_sharded_state(self.model, self.optimizer, sharded)
        if extra is not None:
            self.skipped_steps = extra["skipped_steps"]
            _restore_rng_state(extra["rng"])  # last: loading the model above may draw random numbers

    def _extra_state(self) -> dict:
        return {
            "total_training_steps": self._total_training_steps,
            "lr_scheduler": self._lr_scheduler.state_dict() if self._lr_scheduler is not None else None,
            "skipped_steps": self.skipped_steps,
            "rng": _rng_state(),
        }

    def _load_schedule_state(self, extra: dict) -> None:
        if extra["total_training_steps"] is not None:
            self._lr_scheduler = None  # rebuilt below for the saved span
            self._total_training_steps = extra["total_training_steps"]
        if extra["lr_scheduler"] is not None:
            self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
            # LambdaLR restores its counter, not the LR it last set on the optimizer.
            for group, lr in zip(self.optimizer.param_groups, self.lr_scheduler.get_last_lr()):
                group["lr"] = lr


def _read_back(metrics: dict[str, torch.Tensor | float]) -> dict[str, float]:
    """Floats for metrics held as device tensors, read back in one transfer."""
    names = [name for name, value in metrics.items() if torch.is_tensor(value)]
    read = dict(zip(names, torch.stack([metrics[name].reshape(()) for name in names]).tolist())) if names else {}
    return {name: read[name] if name in read else float(value) for name, value in metrics.items()}


def _mean_per_key(per_step: list[dict[str, float]]) -> dict[str, float]:
    """Mean over the steps that report each key (a skipped step reports no grad norm)."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for metrics in per_step:
        for name, value in metrics.items():
            sums[name] += value
            counts[name] += 1
    return {name: sums[name] / counts[name] for name in sums}


def _checkpoint_part(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.exists():
        raise WorkerConfigError(
            f"checkpoint {str(directory)!r} has no {name}; it was saved without it "
            "(checkpoint.save_contents) or is not a worker checkpoint"
        )
    return path


@contextmanager
def _one_process_checkpoint_is_intended() -> Iterator[None]:
    """A one-rank run saves and loads shards without a process group, which DCP warns about each time."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"torch.distributed is disabled, unavailable or uninitialized")
        yield


def _rng_state() -> dict:
    """Every RNG a training step may draw from, as tensors and ints (loadable with weights_only)."""
    kind, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.copy()),
            "position": position,
            "has_gauss": has_gauss,
            "cached_gaussian": cached_gaussian,
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _restore_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    numpy_state = state["numpy"]
    np.random.set_state(
        (
            numpy_state["kind"],
            numpy_state["keys"].numpy(),
            numpy_state["position"],
            numpy_state["has_gauss"],
            numpy_state["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
