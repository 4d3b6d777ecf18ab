"""Two gloo ranks (FSDP2, data through the store) train as one rank does: same seed, same global
batch, so the same samples (`critic/score/mean` equal) and the same losses up to the float
noise of summing gradients in another order.

The tolerance is 1e-5 relative, or 2e-7 absolute for `actor/pg_loss`: the policy loss is a mean
of advantage-weighted ratios whose advantages nearly cancel (GRPO's are zero-mean per group), so
its float error is the per-token error times mean |A|, not a fraction of its own small value
(measured: at most 8e-8 apart over 5 steps, GRPO and GAE; 1.003e-7 in one CI run of a 2-rank
checkpoint resumed on 1 rank, test_resume.py). Well-conditioned metrics (entropy,
value loss) are held to 1e-5 relative alone."""

from __future__ import annotations

import pytest

from tests.core_v1.multirank.conftest import ESTIMATOR_OVERRIDES, STEPS, train

# pg_loss of an unchanged policy is ~0 (GRPO advantages are zero-mean): there the noise is absolute.
TOLERANCE = dict(rel=1e-5, abs=2e-7)
RELATIVE = dict(rel=1e-5, abs=0)


@pytest.mark.slow
@pytest.mark.parametrize("estimator", ["grpo", "gae"])
def test_two_ranks_train_as_one(estimator, tiny_assets, two_rank_runs, tmp_path):
    one = train(tiny_assets, tmp_path, 1, STEPS, *ESTIMATOR_OVERRIDES[estimator])
    _, two = two_rank_runs(estimator)
    assert [row["step"] for row in two] == list(range(1, STEPS + 1))
    for step, (single, double) in enumerate(zip(one, two), start=1):
        print(
            f"step {step}: score {single['critic/score/mean']} vs {double['critic/score/mean']}, "
            f"pg_loss {single['actor/pg_loss']:.9g} vs {double['actor/pg_loss']:.9g}"
            + (
                f", vf_loss {single['critic/vf_loss']:.9g} vs {double['critic/vf_loss']:.9g}"
                if estimator == "gae"
                else ""
            )
        )
    assert not parity_failures(one, two)


def parity_failures(one: list[dict], two: list[dict]) -> list[str]:
    """The metrics of each step on which a two-rank run is not the one-rank run (beyond the float noise above)."""
    failures = []
    for step, (single, double) in enumerate(zip(one, two), start=1):
        checks = {
            "critic/score/mean": double["critic/score/mean"] == single["critic/score/mean"],
            "actor/pg_loss": double["actor/pg_loss"] == pytest.approx(single["actor/pg_loss"], **TOLERANCE),
            "actor/entropy": double["actor/entropy"] == pytest.approx(single["actor/entropy"], **RELATIVE),
        }
        if "critic/vf_loss" in single:
            checks["critic/vf_loss"] = double["critic/vf_loss"] == pytest.approx(single["critic/vf_loss"], **RELATIVE)
        failures += [f"step {step}: {name}" for name, same in checks.items() if not same]
    return failures


@pytest.mark.slow
def test_a_rank_reading_the_wrong_rows_breaks_parity(tiny_assets, two_rank_runs, tmp_path, monkeypatch):
    """The parity above would catch a data-plane bug: here each rank reads its update rows' tokens one
    row off (the keys of its shard rotated, the per-row advantages not), and the first steps no
    longer train as those of the same run reading its own rows (GRPO's runs, whose reward gives
    every group advantages: with the quickstart's most are zero at first, and a misread pairing of
    zeros changes nothing)."""
    import dataclasses

    from core_v1.workers import group

    _, right = two_rank_runs("grpo")
    misread_tasks = []

    def misread(*args, **kwargs):
        task = group_rank_task(*args, **kwargs)
        if task.method != "update_policy":
            return task
        misread_tasks.append(task.keys)
        return dataclasses.replace(task, keys=task.keys[1:] + task.keys[:1])

    group_rank_task = group.RankTask
    monkeypatch.setattr(group, "RankTask", misread)
    broken = train(tiny_assets, tmp_path / "broken", 2, 2, *ESTIMATOR_OVERRIDES["grpo"])
    assert misread_tasks, "the update's rank tasks were not built through group.RankTask"
    assert parity_failures(right[:2], broken)
