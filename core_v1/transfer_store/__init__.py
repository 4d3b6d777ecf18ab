"""Transfer store: the key-value bridge between the generation side and the training side.

Agent loops *put* finished trajectories; the trainer's replay buffer *waits* for enough of
them, *gets* them as one batch, and *consumes* them once trained on (or *evicts* them when it
drops them). Nothing else passes rollout data from generation to training.

Partitions
    Rows live in named partitions, created on first use: `"train"` for training data, `"val"`
    for validation, or any other non-empty name. Keys, counters and waits are per partition.

Key schema
    `{uid}`                        a prompt group (one prompt, `rollout.n` samples)
    `{uid}_{session_id}_{index}`   one trajectory: GRPO sample `session_id` in `[0, n)`,
                                   output `index` of a multi-output agent loop (0 for most)
    `uid` is a hex string without `_` or `-` (`uuid4().hex`), so a key splits unambiguously.
    Build keys with `group_key(uid)` / `trajectory_key(uid, session_id, index)`, split them with
    `parse_key(key) -> RowKey(uid, session_id, index)`. `put` rejects any other key shape.

Row = fields + tags
    *Fields* are the payload, read with `get`: torch tensors of any shape (typically 1-D and
    variable length: `prompt_ids`, `response_ids`, `response_mask`, `response_logprobs`) and
    picklable Python objects (`data_source`, `reward_model`, `extra_info`, `raw_prompt`,
    `reward_score`, ...). Tensors are cloned and objects copied on `put`, and copied again on
    `get`: the store shares no mutable state with its callers.
    *Tags* are a small dict of immutable values (numbers, strings, None, tuples) read with
    `list`, filtered with `where=`, changed with `update_tags`, and seen by wait predicates:
    `status`, lengths, `global_steps` (policy version at submission), `min_global_steps` /
    `max_global_steps` (oldest / newest weights that produced a trajectory), ...

Status lifecycle (the `status` tag; any other value is rejected)
    group row:       pending -> running -> finished | failed
      `pending`  the trainer submitted the prompt; no agent loop has started.
      `running`  its `n` agent loops are generating.
      `finished` all its trajectories are in the store.   `failed` it will produce none.
    trajectory row:  put once, `finished` (or `failed` if its generation or scoring broke).
    A row leaves the store exactly once, by one of:
      `consume(keys)`          it was trained on (or, for `val`, scored) -- counted as consumed;
      `evict(keys, reason)`    it was dropped: e.g. `"stale"` (beyond the off-policy threshold),
                               `"failed"`, or `"cleared"` by `clear(partition)` -- counted by reason.
    Removing a row that is not live (twice, or never put) is an error, never a no-op.

Accounting invariant
    Per partition: `put == consumed + sum(evicted.values()) + live` (`stats(partition)`).
    `put` counts distinct rows: re-putting a live key raises DuplicateKeyError unless
    `overwrite=True`, which replaces the row and counts it under `overwritten` only.
    `check_accounting(require_drained=True)` at the end of a run proves that every row put was
    consumed or evicted exactly once, and raises AccountingError with the counters otherwise.
    `save(path)` / `load(path)` carry rows and counters across a restart (atomic write).

Batches and jagged tensors
    `get(partition, keys, fields=None)` returns a TensorDict with batch size `[len(keys)]`, rows
    in the order of `keys`: a tensor field whose rows share one shape is stacked; one whose first
    dimension varies is a jagged nested tensor (`layout=torch.jagged`, no padding); objects are a
    `NonTensorStack`. `pad_jagged(field, side="left"|"right", pad_value=0, length=None)` pads
    either kind where a consumer needs it and returns `(padded, mask)`.

Waiting
    `wait_for(partition, predicate, timeout=None)` blocks until `predicate({key: tags})` is
    truthy and returns that value; the predicate is re-run on every change to the partition
    (no polling) and a timeout raises StoreTimeoutError naming the partition. `await_rows` is the
    asyncio form. Every method is thread-safe; the `a*` forms (`aput`, `aget`, `alist`,
    `aupdate_tags`, `aconsume`, `aevict`, `aclear`, `astats`) suit asyncio producers.

Backends
    `make_transfer_store("local")` is the in-process `TransferStore`; `make_transfer_store("ray",
    name=...)` starts an async Ray actor and returns a `RayTransferStore` client with the same
    methods, picklable, usable from any process in the cluster.

Example::

    store = make_transfer_store("local")
    key = trajectory_key(uid, session_id=0)
    store.put("train", {key: {"response_ids": ids, "data_source": "gsm8k"}},
              tags={key: {"status": "finished", "global_steps": 3}})

    def eight_finished(rows):  # the wait predicate: {key: tags} -> truthy when satisfied
        keys = [k for k, t in rows.items() if t.get("status") == "finished"]
        return keys[:8] if len(keys) >= 8 else None

    ready = store.wait_for("train", eight_finished, timeout=60)  # -> those 8 keys
    batch = store.get("train", ready, fields=["response_ids"])
    responses, response_mask = pad_jagged(batch["response_ids"], side="right")
    store.consume("train", ready)
"""

from core_v1.transfer_store.batching import pad_jagged, row_lengths, rows_to_tensordict
from core_v1.transfer_store.errors import (AccountingError, DuplicateKeyError, FieldAssemblyError, InvalidKeyError,
                                           InvalidRowError, MissingFieldError, MissingKeyError, StoreStateError,
                                           StoreTimeoutError, TransferStoreError)
from core_v1.transfer_store.ray_store import RayTransferStore, make_transfer_store
from core_v1.transfer_store.schema import RowKey, RowStatus, group_key, parse_key, trajectory_key
from core_v1.transfer_store.store import PartitionStats, TagFilter, TransferStore

AnyTransferStore = TransferStore | RayTransferStore
"""Either backend; callers use the same method names on both."""

__all__ = [
    "AccountingError", "AnyTransferStore", "DuplicateKeyError", "FieldAssemblyError", "InvalidKeyError",
    "InvalidRowError", "MissingFieldError", "MissingKeyError", "PartitionStats", "RayTransferStore", "RowKey",
    "RowStatus", "StoreStateError", "StoreTimeoutError", "TagFilter", "TransferStore", "TransferStoreError",
    "group_key", "make_transfer_store", "pad_jagged", "parse_key", "row_lengths", "rows_to_tensordict",
    "trajectory_key",
]
