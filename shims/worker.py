"""A V0 `ActorRolloutRefWorker` subclass inside V1's training ranks.

verl users extended training by subclassing the V0 worker and overriding `compute_log_prob`,
`compute_ref_log_prob` or `update_actor`. Naming such a class in `trainer.v1.worker_class`
("package.module:Name" or "file.py:Name") runs it on V1: every training rank builds the class
(role `actor`, and a second instance in role `ref` when the run uses a reference policy), and
V1's stages call its methods with a `DataProto` made from the rank's rows of the transfer store
(`shims.data.tensordict_to_dataproto`); the tensors it returns go back into the store, and a
`meta_info["metrics"]` it returns is logged with the step (averaged over the ranks).

core_v1 never imports this module: the V0 base class names it (`v1_worker_adapter`), and a rank
loads it by that name through the user's class. The critic stays V1's `CriticEngine`: a V0
`CriticWorker` subclass has no V1 hook yet.
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from tensordict import TensorDict

from core_v1.config.schema import PPOConfig
from core_v1.workers import CriticEngine
from legacy_v0.protocol import DataProto
from shims.data import tensordict_to_dataproto


def v0_worker_roles(worker_cls: type, config: PPOConfig, device: torch.device) -> dict[str, Any]:
    """The roles of one rank, built from `worker_cls` (order: actor, ref, critic, as V1's own)."""
    roles: dict[str, Any] = {"actor": V0ActorRole(_started(worker_cls, config, "actor"))}
    if config.use_reference_policy:
        roles["ref"] = V0ReferenceRole(_started(worker_cls, config, "ref"))
    if config.use_critic:
        roles["critic"] = CriticEngine(config, device=device)
    return roles


def _started(worker_cls: type, config: PPOConfig, role: str) -> Any:
    worker = worker_cls(config, role=role)
    worker.init_model()
    return worker


def as_dataproto(batch: TensorDict) -> DataProto:
    """The rank's rows as the V0 worker expects them: padded tensors plus per-row columns."""
    return tensordict_to_dataproto(batch)


class _V0Role:
    def __init__(self, worker: Any):
        self.worker = worker
        self._metrics: dict = {}

    def drain_metrics(self) -> dict:
        metrics, self._metrics = self._metrics, {}
        return metrics

    def _keep_metrics(self, output: DataProto) -> None:
        self._metrics.update(output.meta_info.get("metrics", {}) if output is not None else {})


class V0ActorRole(_V0Role):
    """The actor role of a rank, served by the user's worker in role `actor`."""

    @property
    def model(self) -> torch.nn.Module:
        return self.worker.actor.model

    def compute_log_prob(
        self, batch: TensorDict, calculate_entropy: bool = False
    ) -> tuple[Optional[torch.Tensor], ...]:
        output = self.worker.compute_log_prob(as_dataproto(batch))
        self._keep_metrics(output)
        entropys = output.batch.get("entropys", None) if calculate_entropy else None
        if "sum_pi_squared" in output.batch.keys():  # `actor.calculate_sum_pi_squared`, as ActorEngine adds it
            return output.batch["old_log_probs"], entropys, output.batch["sum_pi_squared"]
        return output.batch["old_log_probs"], entropys

    def update_policy(self, batch: TensorDict) -> dict[str, float]:
        output = self.worker.update_actor(as_dataproto(batch))
        return {**self.drain_metrics(), **dict(output.meta_info.get("metrics", {}))}

    def save_checkpoint(self, directory: str) -> None:
        self.worker.save_checkpoint(directory)

    def load_checkpoint(self, directory: str) -> None:
        self.worker.load_checkpoint(directory)

    def set_total_training_steps(self, total_training_steps: int) -> None:
        self.worker.set_total_training_steps(total_training_steps)


class V0ReferenceRole(_V0Role):
    """The reference role of a rank, served by the user's worker in role `ref`."""

    def compute_ref_log_prob(self, batch: TensorDict) -> torch.Tensor:
        output = self.worker.compute_ref_log_prob(as_dataproto(batch))
        self._keep_metrics(output)
        return output.batch["ref_log_prob"]
