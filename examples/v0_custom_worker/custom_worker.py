"""A user's V0 worker: `ActorRolloutRefWorker` with its own `compute_log_prob`.

verl users extended the V0 trainer by subclassing its workers. This one keeps the policy's
log-probs as they are and adds a health check of the sampled responses: how often the policy
sampled a token it itself finds unlikely (probability below `LOW_PROB`), and the mean
per-token log-prob. It returns them the V0 way, in `meta_info["metrics"]`, and the trainer logs
them with the step (`custom/low_prob_token_frac`, `custom/old_log_prob_mean`).

A `TaskRunner` subclass puts the worker in the loop on V0, as in verl; on V1 the same class runs
inside the training ranks when `trainer.v1.worker_class` names it (`python -m
examples.v0_custom_worker --v1`).
"""

from __future__ import annotations

import math

from core_v1.algorithms import masked_mean
from legacy_v0.main_ppo import TaskRunner
from legacy_v0.protocol import DataProto
from legacy_v0.trainer import Role
from legacy_v0.workers import ActorRolloutRefWorker

LOW_PROB = 0.05


class LogProbAuditWorker(ActorRolloutRefWorker):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.audited_batches = 0

    def compute_log_prob(self, data: DataProto) -> DataProto:
        output = super().compute_log_prob(data)
        self.audited_batches += 1
        log_probs, mask = output.batch["old_log_probs"], data.batch["response_mask"]
        low = (log_probs < math.log(LOW_PROB)).float()
        output.meta_info["metrics"] = {
            "custom/low_prob_token_frac": masked_mean(low, mask).item(),
            "custom/old_log_prob_mean": masked_mean(log_probs, mask).item(),
            "custom/audited_batches": float(self.audited_batches),  # calls of this override so far
        }
        return output


class AuditTaskRunner(TaskRunner):
    def add_actor_rollout_worker(self, config):
        self.role_worker_mapping[Role.ActorRollout] = LogProbAuditWorker
        return LogProbAuditWorker
