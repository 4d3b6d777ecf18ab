"""A checkpoint written by 2 ranks resumes on 1 rank and continues as the 2-rank run did."""

from __future__ import annotations

import pytest

from tests.core_v1.multirank.conftest import STEPS, train
from tests.core_v1.multirank.test_parity import RELATIVE, TOLERANCE


@pytest.mark.slow
def test_two_rank_checkpoint_resumes_on_one_rank(tiny_assets, two_rank_runs, tmp_path):
    out, two = two_rank_runs("gae")  # actor and critic both sharded and checkpointed
    checkpoint = out / "global_step_2"
    assert (checkpoint / "actor").is_dir() and (checkpoint / "critic").is_dir()
    resumed = train(
        tiny_assets,
        tmp_path,
        1,
        STEPS,
        "algorithm.adv_estimator=gae",
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={checkpoint}",
    )
    assert [row["step"] for row in resumed] == [3, 4, 5]
    for row in resumed:
        expected = two[row["step"] - 1]
        assert row["critic/score/mean"] == expected["critic/score/mean"], row["step"]
        assert row["actor/pg_loss"] == pytest.approx(expected["actor/pg_loss"], **TOLERANCE), row["step"]
        assert row["critic/vf_loss"] == pytest.approx(expected["critic/vf_loss"], **RELATIVE), row["step"]
