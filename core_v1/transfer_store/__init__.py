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
    `reward_score`, ...). Tensors are copied and objects pickled on `put`, and `get` builds a
    new batch: the store shares no mutable state with its callers. (One exception: the Ray
    store returns consecutive rows of one put, read in put order, as read-only views of shared
    memory; do not write to those tensors in place.)
    `add_fields(partition, {key: {field: value}}, overwrite=False)` adds fields to live rows (a
    rank writing its per-row outputs back under the same keys): not a put, so tags, counters and
    waiters are untouched; a row that is not live raises MissingKeyError, a field the row already
    has InvalidRowError unless `overwrite=True`. Its values are copied as `put`'s are.
    `add_columns(partition, keys, lengths, {field: [B, L, ...] tensor})` is the same from padded
    tensors: row `keys[i]` gets `[i, :lengths[i]]` of each (a rank's per-token outputs).
    `row_versions(partition, keys)` is a number per live row that changes whenever its fields or
    tags are replaced; `add_fields` and `add_columns` return the rows' new ones, so a reader that
    kept what it read and wrote can tell whether the rows are still as it left them
    (`get_versioned` reads rows and versions together). `add_columns`, `move` and `consume` take
    `wait=False`: the Ray store then sends the write with the calling thread's next call (done
    before it, in order; a failed write raises there) instead of waiting for its reply, and
    `flush()` sends such writes at once. In process every write is done when its call returns.
    *Tags* are a small dict of immutable values (numbers, strings, None, tuples), set on `put`,
    read with `list`, filtered with `where=`, and seen by wait predicates: `status`, lengths,
    `global_steps` (policy version at submission), `min_global_steps` / `max_global_steps`
    (oldest / newest weights that produced a trajectory), ... A row's tags change only when
    the row is put again with `overwrite=True`.

Row lifecycle (the `status` tag takes only the values of `RowStatus`)
    group row `{uid}`:        put `running` by the trainer when it submits the prompt; the group
                              is complete once trajectory rows of all its `n` sessions are in.
    trajectory row:           put once by its agent loop, `finished`, or `failed` (with `error`)
                              if its generation or scoring broke.
    A row leaves the store exactly once, by one of:
      `consume(keys)`          it was trained on (or, for `val`, scored) -- counted as consumed;
      `evict(keys, reason)`    it was dropped: e.g. `"stale"` (beyond the off-policy threshold) or
                               `"failed"` -- counted by reason.
    Removing a row that is not live (twice, or never put) is an error, never a no-op.

Accounting invariant
    Per partition: `put == consumed + sum(evicted.values()) + live` (`stats(partition)`).
    `put` counts distinct rows: re-putting a live key raises DuplicateKeyError unless
    `overwrite=True`, which replaces the row and counts it under `overwritten` only.
    `check_accounting(require_drained=True)` proves that every row put was consumed or evicted
    exactly once, and raises AccountingError with the counters otherwise; validation runs it on
    the `val` partition after every pass. `save(path)` / `load(path)` write and read rows and
    counters (atomic write; either backend reads the other's file).

Batches and jagged tensors
    `get(partition, keys, fields=None)` returns a TensorDict with batch size `[len(keys)]`, rows
    in the order of `keys` (a key named twice comes back twice): a tensor field whose rows share one shape is stacked; one whose first
    dimension varies is a jagged nested tensor (`layout=torch.jagged`, no padding); objects are a
    `NonTensorStack`. `pad_jagged(field, side="left"|"right", pad_value=0, length=None)` pads
    either kind where a consumer needs it and returns `(padded, mask)`.

Traffic
    `core_v1.transfer_store.traffic.snapshot()` gives the torch tensor bytes this process put into
    the store (`put_bytes`: put, aput, add_fields) and got out of it (`got_bytes`), counted by
    either backend's client; `reset()` zeroes them. A driver that only holds keys shows 0.

Waiting
    `wait_for(partition, predicate, timeout=None)` blocks until `predicate({key: tags})` is
    truthy and returns that value; the predicate is re-run on every change to the partition
    (no polling) and a timeout raises StoreTimeoutError naming the partition. On a thread that
    runs an asyncio loop a blocking wait is refused (StoreStateError); the in-process store's
    `await_rows` is the asyncio form (the Ray actor serves `wait_for` with it). Every method is
    thread-safe; `aput` is `put` for asyncio producers (agent loops).

    Group waits cost O(1) per change, not O(live rows): each partition keeps a group index
    (`core_v1.transfer_store.group_index`), updated on put / overwrite / consume / evict / move /
    load: per prompt group its group row's tags, its trajectory rows and sessions, whether it is
    complete (group row live, `n` distinct sessions in), all failed, or orphaned; complete groups
    oldest first by `(global_steps, order)` tags; live groups counted per submit step. The
    predicates of `core_v1.transfer_store.groups` (`oldest_complete_groups`, `plan_sample`,
    `every_group_complete`, `all_complete`), and `functools.partial`s of them, carry an indexed
    form that the store evaluates on that index instead, with the same result (tested against
    the scan). Any other predicate still sees a snapshot of every row's tags on every change; a
    custom one can attach its own indexed form with `group_index.indexed`. Measured
    (`benchmarks/transfer_store.py`): a put that completes a group and wakes a waiting `sample`
    costs the same at 576 and 17,408 live rows.

Backends
    `make_transfer_store("local")` is the in-process `TransferStore`; `make_transfer_store("ray")`
    starts an async Ray actor that holds keys, tags, counters and waits, and returns a picklable
    `RayTransferStore` client with the same methods, usable from any process in the cluster.
    Its tensor payloads go through Ray's shared-memory object store, not through the actor
    (see `core_v1.transfer_store.ray_store`); tensors come back on the CPU. A row's payload there
    is segments (a put's tensors, its objects, one per `add_fields`), and a get fetches only the
    segments holding the fields it names; the `aput`s of one event-loop turn travel as one put.

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

from typing import TYPE_CHECKING

from core_v1.transfer_store.errors import (
    AccountingError,
    DuplicateKeyError,
    FieldAssemblyError,
    InvalidKeyError,
    InvalidRowError,
    MissingFieldError,
    MissingKeyError,
    StoreStateError,
    StoreTimeoutError,
    TransferStoreError,
)
from core_v1.transfer_store.ledger import PartitionStats, TagFilter
from core_v1.transfer_store.schema import RowKey, RowStatus, group_key, parse_key, trajectory_key

if TYPE_CHECKING:
    from core_v1.transfer_store.batching import pad_jagged, row_lengths, rows_to_tensordict, take_rows
    from core_v1.transfer_store.ray_store import RayTransferStore, make_transfer_store
    from core_v1.transfer_store.store import TransferStore

    AnyTransferStore = TransferStore | RayTransferStore
    """Either backend; callers use the same method names on both."""

_BATCHING = ("pad_jagged", "row_lengths", "rows_to_tensordict", "take_rows")


def __getattr__(name: str):
    # The stores and the batch helpers import torch (the helpers tensordict too): loaded on first use,
    # so that the store's actor process, which imports this package on its way to `actor`, never does.
    if name in _BATCHING:
        from core_v1.transfer_store import batching

        return getattr(batching, name)
    if name in ("RayTransferStore", "make_transfer_store"):
        from core_v1.transfer_store import ray_store

        return getattr(ray_store, name)
    if name == "TransferStore":
        from core_v1.transfer_store.store import TransferStore

        return TransferStore
    if name == "AnyTransferStore":
        return __getattr__("TransferStore") | __getattr__("RayTransferStore")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AccountingError",
    "AnyTransferStore",
    "DuplicateKeyError",
    "FieldAssemblyError",
    "InvalidKeyError",
    "InvalidRowError",
    "MissingFieldError",
    "MissingKeyError",
    "PartitionStats",
    "RayTransferStore",
    "RowKey",
    "RowStatus",
    "StoreStateError",
    "StoreTimeoutError",
    "TagFilter",
    "TransferStore",
    "TransferStoreError",
    "group_key",
    "make_transfer_store",
    "pad_jagged",
    "parse_key",
    "row_lengths",
    "rows_to_tensordict",
    "take_rows",
    "trajectory_key",
]
