"""Training engines in PyTorch: the actor, the reference policy and the critic.

- `ActorEngine`: `compute_log_prob`, `update_policy` (PPO with mini/micro-batches, epochs,
  gradient clipping, AdamW, an LR schedule), `named_parameters_for_sync`, checkpoints.
- `ReferenceEngine`: frozen weights, `compute_ref_log_prob`.
- `CriticEngine`: `compute_values`, `update_critic`, checkpoints.
- LoRA (`lora.py`, peft): `actor_rollout_ref.model.lora_rank > 0` (or `lora_adapter_path`, or verl's
  Megatron-Bridge `model.lora.*`) trains adapters only; the reference is the actor with its
  adapters disabled; weights leave merged; checkpoints keep the adapter in `lora_adapter/`.

Batches are `tensordict.TensorDict`s laid out as in docs/CONTRACTS.md. In one process the model
lives on the device the caller names; under `torch.distributed` with several ranks it is sharded
with FSDP2 (`distributed.py`). A run's ranks are a `group.WorkerGroup` (one `rank.RankWorker` per
rank, fed rows from the transfer store; `sharding.py` decides which). Importing this package
changes no global state (threads, seeds); the caller sets those.
"""

from core_v1.workers.actor import ActorEngine
from core_v1.workers.critic import CriticEngine
from core_v1.workers.errors import BatchLayoutError, WorkerConfigError
from core_v1.workers.reference import ReferenceEngine

__all__ = ["ActorEngine", "CriticEngine", "ReferenceEngine", "BatchLayoutError", "WorkerConfigError"]
