"""The two batch runners behind the hf engine: how rows are prefilled, decoded and dropped.

Both keep the running rows in the engine's order and expose the same four operations, which the
engine calls only between steps, on its worker thread:

    prefill(requests)        -> first token and log-prob of each; the rows join at the end
    decode(requests, steps)  -> `steps` tokens and log-probs per running row, read back once
    retain(keep)             -> drop rows not in `keep`; returns the new row order (old indices)
    release()                -> drop every row and free the KV storage (sleep)

- `SlotRunner` (CUDA by default; Llama-family models and the Qwen-VL families' language models):
  KV storage allocated once in fixed slots, the model's layers run by `SlotDecoder`, and each decode
  step (forward + sampling) replayed from a CUDA graph captured for a (batch, KV length) bucket.
  Tokens stay on the device within a `decode` call; the host reads them once per call. A
  vision-language model's prompts are prefilled by its own forward (images, mRoPE positions) and
  their K/V copied into the slots; its decode steps are text (`slot_decoder`'s docstring).
- `DynamicRunner` (CPU default, and any other architecture): transformers' own forward over a
  left-padded `DynamicCache` (`kv_batch.KVBatch`).
"""

from __future__ import annotations

import bisect
import os
import threading
from typing import Protocol, Sequence

import torch
from transformers import PreTrainedModel

from core_v1.rollout.engines.fused_decode import decode_forward
from core_v1.rollout.engines.kv_batch import KVBatch
from core_v1.rollout.engines.sampling import SamplingRows, sample
from core_v1.rollout.engines.slot_decoder import SlotDecoder, SlotKVCache
from core_v1.rollout.types import RolloutError, SamplingParams
from core_v1.utils.vision import is_vision_config


class Row(Protocol):
    """What a runner reads from a request (the engine's `_Request`)."""

    params: SamplingParams
    seed: int
    prompt_ids: list[int]
    token_ids: list[int]
    multi_modal_inputs: dict[str, torch.Tensor] | None  # the prompt's images (vision-language models)

    @property
    def sequence(self) -> list[int]: ...

    @property
    def next_position(self) -> int: ...


def sampling_rows(rows: Sequence[Row], vocab_size: int, device: torch.device, ahead: int = 0) -> SamplingRows:
    """Sampling state of `rows` for the token `ahead` steps after each row's next one."""
    return SamplingRows.build(
        [r.params for r in rows], [r.next_position + ahead for r in rows], [r.seed for r in rows], vocab_size, device
    )


class DynamicRunner:
    """transformers' forward over a `KVBatch` (left-padded DynamicCache, concatenated as rows join)."""

    def __init__(self, model: PreTrainedModel, device: torch.device, capacity: int):
        self.model, self.device, self.capacity = model, device, capacity
        self.vocab_size = model.config.get_text_config().vocab_size
        self._batch: KVBatch | None = None

    def kv_bytes(self) -> int:
        if self._batch is None:
            return 0
        return sum(
            t.numel() * t.element_size() for layer in self._batch.cache.layers for t in (layer.keys, layer.values)
        )

    def prefill(self, rows: Sequence[Row]) -> tuple[list[int], list[float]]:
        images = [(len(r.prompt_ids), r.multi_modal_inputs) for r in rows]
        batch, logits = KVBatch.prefill(self.model, [r.sequence for r in rows], images)
        tokens, log_probs = sample(logits, sampling_rows(rows, self.vocab_size, self.device))
        batch.next_tokens = tokens
        if self._batch is None:
            self._batch = batch
        else:
            self._batch.merge(batch)
        return tokens.tolist(), log_probs.tolist()

    def decode(self, rows: Sequence[Row], steps: int) -> tuple[list[list[int]], list[list[float]]]:
        tokens, log_probs = [], []
        for step in range(steps):
            logits = self._batch.decode(self.model)
            next_tokens, next_log_probs = sample(logits, sampling_rows(rows, self.vocab_size, self.device, step))
            self._batch.next_tokens = next_tokens
            tokens.append(next_tokens)
            log_probs.append(next_log_probs)
        return torch.stack(tokens).tolist(), torch.stack(log_probs).tolist()

    def retain(self, keep: list[int]) -> list[int]:
        if keep:
            self._batch.select(keep)
        else:
            self._batch = None
        return keep

    def release(self) -> None:
        self._batch = None


class SlotRunner:
    """Fixed-slot KV storage, `SlotDecoder`, and CUDA-graph decode steps (see the module docstring).

    num_slots: rows that can run at once. slot_length: positions per slot (the context limit plus
    one window of steps a finished row may run on before the host sees it).
    max_num_batched_tokens: padded tokens per prefill forward. cuda_graphs: capture decode steps
    (CUDA only; rows with top-k/top-p run eagerly, since filtering sorts the vocabulary).
    fused_decode: the decode forward, "off", "compile" or "triton" (`fused_decode.py`).

    Several engines in one process (tests, a benchmark) take turns on the device through one lock:
    a graph capture must not overlap another thread's synchronisation.
    """

    PREFILL_PIECE = 1024  # longest piece of one prompt per prefill forward (bounds the attention mask)

    def __init__(
        self,
        model: PreTrainedModel,
        device: torch.device,
        *,
        num_slots: int,
        slot_length: int,
        max_num_batched_tokens: int,
        cuda_graphs: bool,
        fused_decode: str = "off",
    ):
        self.model, self.device = model, device
        self.capacity, self.slot_length = num_slots, slot_length
        self.max_num_batched_tokens = max_num_batched_tokens
        self.cuda_graphs = cuda_graphs and device.type == "cuda"
        self.vocab_size = model.config.get_text_config().vocab_size
        # A vision-language model's rows rotate at their slot position + a rope delta each; a text
        # model has none, and its decode step computes nothing for them.
        self.takes_images = is_vision_config(model.config)
        self._rope_deltas: list[int] = []
        self.batch_ladder = batch_ladder(num_slots)
        self.length_ladder = length_ladder(slot_length)
        self.decoder = SlotDecoder(model, slot_length)
        self.fused_decode = fused_decode
        self._forward = decode_forward(self.decoder, fused_decode)
        self._cache: SlotKVCache | None = None
        self._graphs: dict[tuple[int, int], torch.cuda.CUDAGraph] = {}
        self._graph_pool = None
        self._num_rows = 0
        self._rows_changed = True  # the graph input buffers no longer match the rows
        self._alloc_buffers()

    # ---- storage -----------------------------------------------------------------------------

    def kv_bytes(self) -> int:
        return 0 if self._cache is None else self._cache.kv.numel() * self._cache.kv.element_size()

    def _ensure_cache(self) -> SlotKVCache:
        if self._cache is None:
            self.decoder.prepare()  # the weights may have moved (sleep)
            self._cache = SlotKVCache(self.model.config, self.capacity, self.slot_length, self.model.dtype, self.device)
        return self._cache

    def _alloc_buffers(self) -> None:
        """Decode inputs and outputs a captured graph reads and writes in place ([slots] each)."""
        slots, device = self.capacity, self.device
        self._tokens = torch.zeros(slots, dtype=torch.long, device=device)
        self._positions = torch.zeros(slots, dtype=torch.long, device=device)
        self._rows = SamplingRows.build([SamplingParams()] * slots, [0] * slots, [0] * slots, self.vocab_size, device)
        self._out_tokens = torch.zeros(slots, dtype=torch.long, device=device)
        self._out_log_probs = torch.zeros(slots, dtype=torch.float32, device=device)
        self._rope_offsets = torch.zeros(slots, dtype=torch.long, device=device) if self.takes_images else None

    def release(self) -> None:
        """Drop every row, the KV storage and the graphs (which point into it)."""
        self._num_rows = 0
        self._rope_deltas = []
        self._rows_changed = True
        self._cache = None
        self._graphs.clear()
        self._graph_pool = None
        self.decoder.release()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # ---- prefill -----------------------------------------------------------------------------

    def prefill(self, rows: Sequence[Row]) -> tuple[list[int], list[float]]:
        """Prefill `rows` into the slots after the running rows, in forwards of at most
        `max_num_batched_tokens` padded tokens (long prompts in pieces); sample their first tokens."""
        with _DEVICE_LOCK:
            return self._prefill(rows)

    def _prefill(self, rows: Sequence[Row]) -> tuple[list[int], list[float]]:
        cache = self._ensure_cache()
        self._rows_changed = True
        logits = torch.empty((len(rows), self.vocab_size), dtype=self.model.dtype, device=self.device)
        if self.takes_images:
            self._prefill_with_model(cache, rows, logits)
        else:
            self._prefill_in_pieces(cache, rows, logits)
        tokens, log_probs = sample(logits, sampling_rows(rows, self.vocab_size, self.device))
        self._num_rows += len(rows)
        return tokens.tolist(), log_probs.tolist()

    def _prefill_in_pieces(self, cache: SlotKVCache, rows: Sequence[Row], logits: torch.Tensor) -> None:
        """`SlotDecoder.prefill` of the rows into the slots after the running rows, in forwards of at
        most `max_num_batched_tokens` padded tokens; each row's last logits into `logits`."""
        first_slot = self._num_rows
        sequences = [r.sequence for r in rows]
        for group in _prefill_groups(sequences, self.max_num_batched_tokens, self.PREFILL_PIECE):
            piece = min(max(len(sequences[i]) for i in group), self.PREFILL_PIECE, self.max_num_batched_tokens)
            longest = max(len(sequences[i]) for i in group)
            for start in range(0, longest, piece):
                members = [i for i in group if len(sequences[i]) > start]
                chunks = [sequences[i][start : start + piece] for i in members]
                width = max(len(c) for c in chunks)
                tokens = torch.zeros((len(members), width), dtype=torch.long)
                for row, chunk in enumerate(chunks):
                    tokens[row, : len(chunk)] = torch.tensor(chunk)
                out = self.decoder.prefill(
                    cache,
                    tokens.to(self.device),
                    torch.tensor([len(c) for c in chunks], device=self.device),
                    start,
                    torch.tensor([first_slot + i for i in members], device=self.device),
                    kv_length=start + width,
                )
                done = [row for row, i in enumerate(members) if len(sequences[i]) <= start + piece]
                if done:
                    index = torch.tensor([members[row] for row in done], device=self.device)
                    logits[index] = out[torch.tensor(done, device=self.device)]

    def _prefill_with_model(self, cache: SlotKVCache, rows: Sequence[Row], logits: torch.Tensor) -> None:
        """A vision-language model's rows: the model's own forward (`KVBatch.prefill`: images encoded
        into their slots, mRoPE positions), at most `max_num_batched_tokens` padded tokens a forward
        (a longer prompt alone); the K/V it computed are copied into the slots, and each row's rope
        delta kept for decode. A prompt is not split into pieces: its image tokens need the whole
        image's features at once."""
        first_slot = self._num_rows
        sequences = [r.sequence for r in rows]
        deltas = [0] * len(rows)
        longest = max(len(s) for s in sequences)
        for group in _prefill_groups(sequences, self.max_num_batched_tokens, longest):
            lengths = [len(sequences[i]) for i in group]
            batch, out = KVBatch.prefill(
                self.model,
                [sequences[i] for i in group],
                [(len(rows[i].prompt_ids), rows[i].multi_modal_inputs) for i in group],
            )
            cache.load_left_padded(batch.cache.layers, [first_slot + i for i in group], lengths)
            logits[torch.tensor(group, device=self.device)] = out
            for i, length, next_position in zip(group, lengths, batch.positions.tolist()):
                deltas[i] = next_position - length
        self._rope_deltas += deltas
        # The last slot position a row reaches is slot_length - 1; it rotates by that + its delta.
        if self.decoder.cover(self.slot_length + max(deltas)):
            # A pool whose graphs are all gone is freed: capturing into its handle again trips
            # PyTorch's caching allocator (seen on an H100), so the next capture starts a new one.
            self._graphs.clear()
            self._graph_pool = None

    # ---- decode ------------------------------------------------------------------------------

    def decode(self, rows: Sequence[Row], steps: int) -> tuple[list[list[int]], list[list[float]]]:
        """`steps` decode steps for all rows; one host read at the end. The graphs advance their
        input buffers themselves, so the host rewrites them only after rows joined or left.
        `steps` is at most one window, which the slots have room for past the context limit."""
        with _DEVICE_LOCK:
            return self._decode(rows, steps)

    def _decode(self, rows: Sequence[Row], steps: int) -> tuple[list[list[int]], list[list[float]]]:
        count = len(rows)
        if self._rows_changed:
            self._load_rows(rows)
            self._rows_changed = False
        else:  # padding rows advanced too: put them back at position 0, inside their slots
            self._positions[count:].zero_()
        kv_length = _bucket(self.length_ladder, max(len(r.sequence) for r in rows) + steps - 1)
        graphed = self.cuda_graphs and not self._rows.filtered
        width = _bucket(self.batch_ladder, count) if graphed else count
        tokens = torch.empty((steps, count), dtype=torch.long, device=self.device)
        log_probs = torch.empty((steps, count), dtype=torch.float32, device=self.device)
        for step in range(steps):
            if graphed:
                self._graph(width, kv_length).replay()
            else:
                self._step(width, kv_length)
            tokens[step].copy_(self._out_tokens[:count])
            log_probs[step].copy_(self._out_log_probs[:count])
        return tokens.tolist(), log_probs.tolist()

    def _load_rows(self, rows: Sequence[Row]) -> None:
        """Write the rows' last tokens, positions and sampling state into the graph input buffers;
        the padding rows after them get harmless defaults."""
        count = len(rows)
        state = sampling_rows(rows, self.vocab_size, torch.device("cpu"))
        self._rows.filtered = state.filtered
        self._rows.copy_(state, count)
        self._tokens[:count].copy_(torch.tensor([r.sequence[-1] for r in rows]), non_blocking=True)
        self._positions[:count].copy_(torch.tensor([len(r.sequence) - 1 for r in rows]), non_blocking=True)
        self._positions[count:].zero_()
        self._tokens[count:].zero_()
        if self._rope_offsets is not None:
            self._rope_offsets[:count].copy_(torch.tensor(self._rope_deltas), non_blocking=True)
            self._rope_offsets[count:].zero_()
        self._rows.temperature[count:].fill_(1.0)
        self._rows.top_k[count:].fill_(self.vocab_size)
        self._rows.top_p[count:].fill_(1.0)

    def _step(self, width: int, kv_length: int) -> None:
        """One decode step of the first `width` slots: forward, sample, feed the tokens back."""
        positions = self._positions[:width]
        rope_positions = positions if self._rope_offsets is None else positions + self._rope_offsets[:width]
        logits = self._forward(self._cache, self._tokens[:width], positions, kv_length, rope_positions)
        tokens, log_probs = sample(logits, self._rows.rows(width))
        self._out_tokens[:width].copy_(tokens)
        self._out_log_probs[:width].copy_(log_probs)
        self._tokens[:width].copy_(tokens)
        self._positions[:width] += 1
        self._rows.position[:width] += 1

    def _graph(self, width: int, kv_length: int) -> torch.cuda.CUDAGraph:
        graph = self._graphs.get((width, kv_length))
        if graph is None:
            graph = self._capture(width, kv_length)
            self._graphs[(width, kv_length)] = graph
        return graph

    def _capture(self, width: int, kv_length: int) -> torch.cuda.CUDAGraph:
        # One eager run on a side stream first (lazy cuBLAS/SDPA set-up must not happen during
        # capture); it advances the inputs, so they are put back. Its K/V writes are the values
        # the replay writes again.
        saved = (self._tokens.clone(), self._positions.clone(), self._rows.position.clone())
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            self._step(width, kv_length)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self._tokens.copy_(saved[0])
        self._positions.copy_(saved[1])
        self._rows.position.copy_(saved[2])
        graph = torch.cuda.CUDAGraph()
        # thread_local: another engine in this process (its own worker thread) may synchronise
        # while this one captures; that is safe here, since it never touches this capture's stream.
        with torch.cuda.graph(graph, pool=self._graph_pool, capture_error_mode="thread_local"):
            self._step(width, kv_length)
        if self._graph_pool is None:
            self._graph_pool = graph.pool()
        return graph

    def num_graphs(self) -> int:
        return len(self._graphs)

    # ---- rows leaving ------------------------------------------------------------------------

    def retain(self, keep: list[int]) -> list[int]:
        """Keep rows `keep` (ascending); the last kept rows move into the holes so the running rows
        stay in slots 0..B-1. Returns the new row order as old row indices."""
        count = len(keep)
        kept = set(keep)
        holes = [slot for slot in range(count) if slot not in kept]
        movers = [row for row in keep if row >= count]
        order = _compact_order(keep)
        if holes and self._cache is not None:
            with _DEVICE_LOCK:
                self._cache.move(movers, holes, self.slot_length)
        if self.takes_images:
            self._rope_deltas = [self._rope_deltas[row] for row in order]
        self._rows_changed |= count != self._num_rows
        self._num_rows = count
        return order


_DEVICE_LOCK = threading.RLock()


def _compact_order(keep: list[int]) -> list[int]:
    """Row order after moving the kept rows at or past len(keep) into the holes below it, in order."""
    count = len(keep)
    order = [row for row in keep if row < count]
    movers = iter(row for row in keep if row >= count)
    kept_below = set(order)
    return [row if row in kept_below else next(movers) for row in range(count)]


def _prefill_groups(sequences: list[list[int]], token_budget: int, piece_cap: int) -> list[list[int]]:
    """Indices grouped longest first so that rows x min(longest, piece) <= token_budget per group."""
    order = sorted(range(len(sequences)), key=lambda i: -len(sequences[i]))
    groups: list[list[int]] = []
    for index in order:
        if groups:
            group = groups[-1]
            piece = min(len(sequences[group[0]]), piece_cap, token_budget)
            if (len(group) + 1) * piece <= token_budget:
                group.append(index)
                continue
        groups.append([index])
    return groups


def batch_ladder(num_slots: int) -> list[int]:
    """Batch widths captured: 1, 2, 4, 8, then steps of 8 to 64, then of 32 (padding stays < ~12%)."""
    sizes = [1, 2, 4] + list(range(8, 64, 8)) + list(range(64, num_slots, 32))
    return sorted({s for s in sizes if s < num_slots} | {num_slots})


def length_ladder(max_model_len: int) -> list[int]:
    """KV lengths attended over: 128, 256, 384, 512, 768, 1024, 1536, ... capped at max_model_len."""
    sizes, size = [], 128
    while size < max_model_len:
        sizes += [size, size * 3 // 2] if size >= 256 else [size]
        size *= 2
    return sorted({s for s in sizes if s < max_model_len} | {max_model_len})


def _bucket(ladder: list[int], needed: int) -> int:
    return ladder[bisect.bisect_left(ladder, needed)]


def slot_capacity(
    model: PreTrainedModel,
    device: torch.device,
    *,
    max_num_seqs: int,
    slot_length: int,
    memory_fraction: float,
    max_num_batched_tokens: int,
) -> int:
    """How many fixed slots fit: `memory_fraction` of the device's memory (the host's RAM on CPU),
    less what is allocated now and a reserve for activations, over one slot's K/V bytes."""
    config = model.config.get_text_config()
    per_slot = SlotKVCache.bytes_per_slot(config, slot_length, model.dtype)
    if device.type == "cuda":
        total = torch.cuda.get_device_properties(device).total_memory
        in_use = torch.cuda.memory_allocated(device)
    else:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        in_use = 0
    element = torch.empty((), dtype=model.dtype).element_size()
    reserve = (
        6 * max_num_seqs * config.vocab_size * 4  # logits, softmax, cdf per decode row (float32)
        + max_num_batched_tokens * (3 * config.intermediate_size + 8 * config.hidden_size) * element
    )
    if is_vision_config(model.config):  # a prefill's K/V sit in transformers' cache before the slots
        reserve += SlotKVCache.bytes_per_slot(config, max_num_batched_tokens, model.dtype)
    budget = memory_fraction * total - in_use - reserve
    slots = min(max_num_seqs, int(budget // per_slot))
    if slots < 1:
        raise RolloutError(
            f"the KV storage for one sequence of {slot_length} positions ({per_slot / 2**20:.0f} MiB) does not "
            f"fit in gpu_memory_utilization={memory_fraction} of {total / 2**30:.1f} GiB with "
            f"{in_use / 2**30:.1f} GiB in use; raise actor_rollout_ref.rollout.gpu_memory_utilization or lower "
            f"max_model_len"
        )
    return slots
