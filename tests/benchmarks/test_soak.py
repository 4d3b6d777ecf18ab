"""The soak benchmark's logic on a few steps: faults injected through the real mechanisms, and the
accounting invariant checked after every step (and shown to fail loudly when it does not hold)."""

from __future__ import annotations

import pytest

from benchmarks.soak import MODES, GroupLedger, InvariantBroken, check_invariant, run_soak
from core_v1.transfer_store.store import PartitionStats


def test_a_lost_group_breaks_the_invariant_loudly():
    balanced_store = PartitionStats("train", put=10, consumed=6, evicted={"stale": 1}, live=3)
    ledger = GroupLedger(trained=4, evicted=1)
    assert "submitted     7 == trained     4 + evicted   1 + in flight   2" in check_invariant(
        3, 7, ledger, 2, balanced_store
    )
    with pytest.raises(InvariantBroken, match="after step 3.*submitted     8 != trained"):
        check_invariant(3, 8, ledger, 2, balanced_store)  # one group submitted and never seen again
    with pytest.raises(InvariantBroken, match="put=11"):
        check_invariant(3, 7, ledger, 2, PartitionStats("train", put=11, consumed=6, evicted={"stale": 1}, live=3))


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_a_few_soak_steps_hold_the_invariant_under_aborts(tiny_assets, ray_runtime, tmp_path, mode):
    lines: list[str] = []
    ledger = run_soak(tiny_assets, tmp_path, mode, steps=4, abort_rate=1.0, report=lines.append)
    assert len(lines) == 4 and all(" == trained " in line for line in lines)  # checked after every step
    assert ledger.trained == 4 * 4  # four batches of four groups (a wholly failed group is evicted and refilled)
    assert ledger.aborted_requests > 0  # an abort at every step hit requests in flight
