"""A V0 worker run inside V1's ranks (`trainer.v1.worker_class`): what its `compute_log_prob`
returns reaches the old-log-prob stage, `sum_pi_squared` included (`actor.calculate_sum_pi_squared`)."""

import torch
from tensordict import TensorDict

from legacy_v0.protocol import DataProto
from shims.worker import V0ActorRole


class _Worker:
    """Stands in for an `ActorRolloutRefWorker`: returns fixed outputs for any rows."""

    def __init__(self, tensors):
        self.tensors = tensors

    def compute_log_prob(self, data):
        return DataProto.from_dict(tensors=self.tensors)


def _batch():
    return TensorDict({"responses": torch.zeros(2, 3, dtype=torch.long)}, batch_size=[2])


def test_sum_pi_squared_from_the_worker_is_the_third_output():
    tensors = {
        "old_log_probs": torch.full((2, 3), -1.0),
        "entropys": torch.ones(2, 3),
        "sum_pi_squared": torch.full((2, 3), 0.25),
    }
    log_probs, entropy, sum_pi_squared = V0ActorRole(_Worker(tensors)).compute_log_prob(
        _batch(), calculate_entropy=True
    )
    assert torch.equal(log_probs, tensors["old_log_probs"]) and torch.equal(entropy, tensors["entropys"])
    assert torch.equal(sum_pi_squared, tensors["sum_pi_squared"])


def test_a_worker_without_it_gives_two_outputs():
    outputs = V0ActorRole(_Worker({"old_log_probs": torch.zeros(2, 3)})).compute_log_prob(_batch())
    assert len(outputs) == 2 and outputs[1] is None
