"""Validation on the `val` partition every `trainer.test_freq` steps, with `rollout.val_kwargs` sampling."""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path
from statistics import mean
from typing import Any

from core_v1.batch.layout import build_training_batch
from core_v1.trainer.generation_dump import dump_generations, write_jsonl_atomically
from core_v1.transfer_store import RowStatus, parse_key
from core_v1.transfer_store.groups import all_complete


class Validator:
    """Validates with the run's parts (`TrainerComponents`): replicas, agent loops, store, buffer."""

    def __init__(self, config: Any, components: Any):
        self.config = config
        self.components = components

    @property
    def enabled(self) -> bool:
        return validation_enabled(self.config.trainer, self.components.val_dataset is not None)

    def due(self, step: int) -> bool:
        return validation_due(
            self.config.trainer, step, self.components.total_training_steps, self.components.val_dataset is not None
        )

    def run(self, global_steps: int) -> dict[str, float]:
        """Generate for every validation prompt with the current weights and report mean scores."""
        parts = self.components
        parts.checkpoint_manager.wake_up_replicas()
        rows = [dict(row) for row in parts.val_dataset.rows]
        uids = parts.agent_loop_manager.submit("val", rows, global_steps, validate=True)
        groups = parts.replay_buffer.wait_for_groups("val", functools.partial(all_complete, uids=uids))
        keys = [
            key
            for members in groups.values()
            for key, tags in members.items()
            if tags.get("status") == RowStatus.FINISHED.value
        ]
        sources, scores = [], []
        if keys:
            trajectories = parts.store.get("val", keys, fields=["reward_score", "data_source"])
            sources, scores = trajectories["data_source"].tolist(), trajectories["reward_score"].tolist()
        if self.config.trainer.validation_data_dir:
            self._dump(global_steps, keys, uids)
        parts.store.consume("val", [k for members in groups.values() for k in members] + list(groups))
        parts.store.check_accounting("val", require_drained=True)  # every val row put was scored exactly once
        return validation_metrics(
            sources,
            scores,
            n=self.config.actor_rollout_ref.rollout.val_kwargs.n,
            failed=sum(len(m) for m in groups.values()) - len(keys),
        )

    def _dump(self, global_steps: int, keys: list[str], uids: list[str]) -> None:
        """`trainer.validation_data_dir`: the scored samples to `<dir>/<step>.jsonl`, in the order
        the prompts were submitted (the V0 trainer's order), each prompt's samples by session."""
        directory = self.config.trainer.validation_data_dir
        if not keys:  # nothing scored: an empty file says the validation ran
            write_jsonl_atomically(Path(directory) / f"{global_steps}.jsonl", [])
            return
        order = {uid: position for position, uid in enumerate(uids)}
        keys = sorted(keys, key=lambda key: (order[parse_key(key).uid], parse_key(key)[1:]))
        batch = build_training_batch(self.components.store.get("val", keys), pad_token_id=0)  # padding is not written
        dump_generations(directory, global_steps, batch, self.components.tokenizer, validation=True)


def validation_enabled(trainer_config: Any, has_val_data: bool) -> bool:
    """Whether the run validates at all: it has validation data and `trainer.test_freq` > 0."""
    return has_val_data and trainer_config.test_freq > 0


def validation_due(trainer_config: Any, step: int, total_steps: int, has_val_data: bool) -> bool:
    """Whether step `step` validates: every `trainer.test_freq` steps and the last one (V1 and V0)."""
    return validation_enabled(trainer_config, has_val_data) and (
        step % trainer_config.test_freq == 0 or step == total_steps
    )


def validation_metrics(sources: list, scores: list[float], *, n: int, failed: int) -> dict[str, float]:
    """`val-core/<data_source>/reward/mean@<n>`, `val/score/mean` over the samples that scored
    (`sources[i]`, `scores[i]`), and `val/failed_samples`; V1's validator and the V0 trainer report these."""
    by_source: dict[str, list[float]] = defaultdict(list)
    for source, score in zip(sources, scores):
        by_source[source].append(float(score))
    metrics = {f"val-core/{source}/reward/mean@{n}": mean(values) for source, values in by_source.items()}
    metrics["val/score/mean"] = mean(float(score) for score in scores) if scores else 0.0
    metrics["val/failed_samples"] = failed
    return metrics
