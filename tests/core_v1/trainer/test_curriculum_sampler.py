"""verl's prompt samplers on V1 (`data.sampler.{class_path,class_name}`): the trainer draws its prompts
from the user's sampler, a curriculum sampler's `update(batch=...)` sees every step's batch, and a
resumed run keeps the sampler's state. The sampler is examples/curriculum_sampler, as shipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tensordict import NonTensorStack, TensorDict

from core_v1.config import load_config
from core_v1.data import PromptDataset
from core_v1.data.samplers import StepBatch, build_custom_sampler_feed, step_batch
from core_v1.main_ppo import main, run_v1
from core_v1.utils.loading import load_object
from tests.conftest import quickstart_overrides

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "curriculum_sampler" / "difficulty_sampler.py"
# 8 prompts of the quickstart's 25 a step: a pass is 3 steps (the 25th prompt is the ragged tail,
# drawn and dropped), so step 4 starts a pass ordered by the scores of steps 1-3.
SMALL = (
    "data.train_batch_size=8",
    "actor_rollout_ref.actor.ppo_mini_batch_size=8",
    "actor_rollout_ref.rollout.n=2",
    "trainer.test_freq=-1",
    "trainer.save_freq=3",
)

RECORDER = f'''
from core_v1.utils.loading import load_object

DifficultySampler = load_object("{EXAMPLE}:DifficultySampler")
DRAWN, UPDATES = [], []


class Recorder(DifficultySampler):
    """The example's sampler, recording every index it yields and every batch it is told about."""

    def __iter__(self):
        return Recorded(super().__iter__())

    def update(self, batch):
        UPDATES.append({{"step": batch.meta_info["global_steps"], "rows": len(batch), "kind": type(batch).__name__,
                        "prompts": sorted({{self.position[e["index"]] for e in batch.non_tensor_batch["extra_info"]}}),
                        "scored": "token_level_scores" in batch.batch.keys()}})
        super().update(batch)


class Recorded:
    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        return self

    def __next__(self):
        DRAWN.append(next(self.inner))
        return DRAWN[-1]

    def state_dict(self):
        return self.inner.state_dict()

    def load_state_dict(self, state):
        self.inner.load_state_dict(state)
'''


def _sampler_overrides(path: Path, name: str) -> tuple[str, str]:
    return f"data.sampler.class_path={path}", f"data.sampler.class_name={name}"


def _feed_state(out: Path, step: int) -> dict:
    return torch.load(out / f"global_step_{step}" / "trainer_state.pt", weights_only=False)["prompt_feed"]["sampler"]


# ------------------------------------------------------------------------------ without a model
def test_the_step_batch_has_dataprotos_three_attributes():
    batch = TensorDict({"responses": torch.ones(3, 2, dtype=torch.long)}, batch_size=[3])
    batch["extra_info"] = NonTensorStack({"index": 4}, {"index": 0}, {"index": 4})
    batch["uid"] = NonTensorStack("a", "b", "a")
    view = step_batch(batch, global_steps=7)
    assert isinstance(view, StepBatch) and len(view) == 3 and view.meta_info == {"global_steps": 7}
    assert list(view.batch.keys()) == ["responses"]
    assert view.non_tensor_batch["extra_info"].dtype == object
    assert [row["index"] for row in view.non_tensor_batch["extra_info"]] == [4, 0, 4]  # dicts stay whole
    assert view.non_tensor_batch["uid"].tolist() == ["a", "b", "a"]


def test_a_stateful_pass_resumes_without_skipping_twice(tiny_assets):
    """The example's pass iterator keeps what it drew: a resumed feed loads it and draws on, where a
    sampler whose pass has no state is fast-forwarded (tests/legacy_v0/test_v0_sampler.py)."""
    dataset = PromptDataset(str(tiny_assets["train"]))
    config = load_config(quickstart_overrides(tiny_assets, Path("unused"), 1), config_name="quickstart").data

    def feed():
        return build_custom_sampler_feed(str(EXAMPLE), "DifficultySampler", dataset, config, 8)

    def indices(rows):
        return [row["extra_info"]["index"] for row in rows]

    first = feed()
    drawn = indices(first.next_batch())
    state = first.state_dict()
    assert state["pass"] == {"drawn": drawn} and state["sampler"] == {"scores": {}}
    resumed = feed()
    resumed.load_state_dict(state)
    assert indices(resumed.next_batch()) == indices(first.next_batch())
    assert resumed.state_dict() == first.state_dict()


def test_a_bad_sampler_is_one_error_line_at_start_up(tmp_path, capsys):
    not_a_sampler = tmp_path / "plain.py"
    not_a_sampler.write_text("class Plain:\n    pass\n")
    for path, name, expected in (
        (tmp_path / "missing.py", "Mine", "does not exist"),
        (not_a_sampler, "Plain", "is not a sampler"),
        (not_a_sampler, "Gone", "Gone"),
    ):
        code = main(["--config-name=quickstart", "trainer.dry_run=true", *_sampler_overrides(path, name)])
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert code == 2 and len(errors) == 1 and expected in errors[0] and "data.sampler" in errors[0], errors


def test_the_keys_are_used_on_v1_without_a_line_and_the_plan_names_the_sampler(capsys):
    from shims.verl_keys.verdicts import Verdict, declared

    assert {declared(f"data.sampler.{k}").verdict for k in ("class_path", "class_name")} == {Verdict.USED}
    assert (
        main(["--config-name=quickstart", "trainer.dry_run=true", *_sampler_overrides(EXAMPLE, "DifficultySampler")])
        == 0
    )
    out, err = capsys.readouterr()
    assert f"ordered by DifficultySampler from {EXAMPLE} (data.sampler)" in out
    assert "data.sampler" not in err and "legacy key" not in out


# ----------------------------------------------------------------------------------- real runs
@pytest.fixture(scope="module")
def recorder(tmp_path_factory):
    path = tmp_path_factory.mktemp("sampler") / "recorder.py"
    path.write_text(RECORDER)
    return path, load_object(f"{path}:DRAWN"), load_object(f"{path}:UPDATES")


@pytest.fixture(scope="module")
def three_steps(tiny_assets, ray_runtime, recorder, tmp_path_factory):
    """Three sync steps drawing from the recording sampler, checkpointed at step 3."""
    path, drawn, updates = recorder
    out = tmp_path_factory.mktemp("three_steps")
    config = load_config(
        quickstart_overrides(tiny_assets, out, 3, *SMALL, *_sampler_overrides(path, "Recorder")),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    return out, list(drawn), list(updates)


@pytest.mark.slow
def test_the_trained_prompts_are_the_samplers_and_update_sees_each_step(three_steps, tiny_assets):
    _, drawn, updates = three_steps
    # The trainer asked for exactly a batch a step, and trained on what was drawn for that step.
    assert len(drawn) == 24
    assert [u["step"] for u in updates] == [1, 2, 3]
    for step, update in enumerate(updates):
        assert update["kind"] == "StepBatch" and update["rows"] == 8 * 2 and update["scored"]
        assert update["prompts"] == sorted(drawn[8 * step : 8 * step + 8])
    # Nothing was trained yet when the pass began: the example's tie-break order, as it alone gives it.
    dataset = PromptDataset(str(tiny_assets["train"]))
    config = load_config(quickstart_overrides(tiny_assets, Path("unused"), 1), config_name="quickstart").data
    fresh = build_custom_sampler_feed(str(EXAMPLE), "DifficultySampler", dataset, config, 8)
    assert [row["extra_info"]["index"] for row in fresh.next_batch()] == drawn[:8]


@pytest.mark.slow
def test_a_resumed_run_keeps_the_curriculum(three_steps, recorder, tiny_assets, tmp_path):
    out, drawn_before, _ = three_steps
    path, drawn, updates = recorder
    saved = _feed_state(out, 3)
    assert len(saved["pass"]["drawn"]) == 24 and sum(n for _, n in saved["sampler"]["scores"].values()) == 48

    del drawn[:], updates[:]
    config = load_config(
        quickstart_overrides(
            tiny_assets, out, 4, *SMALL, *_sampler_overrides(path, "Recorder"), "trainer.resume_mode=auto"
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    # Step 4 drew the pass's ragged tail (dropped), then began a new pass: the prompt never trained
    # first, then the lowest mean score first, by the scores the checkpoint kept.
    assert [u["step"] for u in updates] == [4] and len(drawn) == 1 + 8
    tail, step_4 = drawn[0], drawn[1:]
    assert updates[0]["prompts"] == sorted(step_4)
    assert tail not in drawn_before and step_4[0] == tail

    def mean(position):
        total, count = saved["sampler"]["scores"][position]
        return total / count

    assert [mean(p) for p in step_4[1:]] == sorted(mean(p) for p in step_4[1:])

    # The example, unchanged and run through the entrypoint for 4 steps without a stop, trained the
    # same prompts as often, with the same scores.
    fresh = tmp_path / "uninterrupted"
    overrides = quickstart_overrides(tiny_assets, fresh, 4, *SMALL, *_sampler_overrides(EXAMPLE, "DifficultySampler"))
    assert main(["--config-name=quickstart", *overrides]) == 0
    resumed_scores, uninterrupted_scores = (_feed_state(o, 4)["sampler"]["scores"] for o in (out, fresh))
    assert {p: n for p, (_, n) in resumed_scores.items()} == {p: n for p, (_, n) in uninterrupted_scores.items()}
    for position, (total, _) in resumed_scores.items():
        assert total == pytest.approx(uninterrupted_scores[position][0], abs=1e-6)


@pytest.mark.slow
def test_an_async_mode_draws_from_the_sampler_and_updates_it_after_each_step(
    recorder, tiny_assets, ray_runtime, tmp_path
):
    path, drawn, updates = recorder
    del drawn[:], updates[:]
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            *SMALL,
            *_sampler_overrides(path, "Recorder"),
            "trainer.v1.trainer_mode=colocate_async",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    # The warm-up batch, then one batch a step to keep two in flight; each step trains the oldest
    # complete groups, all of them prompts the sampler gave, and the sampler hears of each step.
    assert len(drawn) == 3 * 8
    assert [(u["step"], u["rows"]) for u in updates] == [(1, 16), (2, 16)]
    trained = [p for u in updates for p in u["prompts"]]
    assert len(set(trained)) == 16 and set(trained) <= set(drawn)


# ------------------------------------------------------------ verl's test sampler (RandomCurriculumSampler)
VERL_TEST_SAMPLER = (
    "data.sampler.class_path=pkg://tests.utils.dataset.test_create_rl_sampler_on_cpu",
    "data.sampler.class_name=RandomCurriculumSampler",
)
RANDOM_CURRICULUM = ("pkg://core_v1.data.random_curriculum", "RandomCurriculumSampler")


def test_random_curriculum_draws_a_fresh_permutation_each_pass_and_resumes_inside_one(tiny_assets):
    dataset = PromptDataset(str(tiny_assets["train"]))
    config = load_config(quickstart_overrides(tiny_assets, Path("unused"), 1), config_name="quickstart").data

    def feed():
        return build_custom_sampler_feed(*RANDOM_CURRICULUM, dataset, config, 8)

    def indices(rows):
        return [row["extra_info"]["index"] for row in rows]

    first = feed()
    assert first.curriculum and first.batches_per_epoch == len(dataset) // 8
    passes = [[i for _ in range(first.batches_per_epoch) for i in indices(first.next_batch())] for _ in range(2)]
    assert all(len(set(p)) == len(p) == 8 * first.batches_per_epoch for p in passes)
    assert passes[0] != passes[1]  # a new order each pass
    assert indices(feed().next_batch()) == passes[0][:8]  # the same seed, the same order
    first.update(batch=None)  # the curriculum hook changes nothing

    state = first.state_dict()
    resumed = feed()
    resumed.load_state_dict(state)
    assert [indices(resumed.next_batch()) for _ in range(4)] == [indices(first.next_batch()) for _ in range(4)]


def test_verls_test_sampler_keys_move_with_one_warning(capsys):
    assert main(["--config-name=quickstart", "trainer.dry_run=true", *VERL_TEST_SAMPLER]) == 0
    out, err = capsys.readouterr()
    moved = [line for line in err.splitlines() if "data.sampler" in line]
    assert len(moved) == 1 and moved[0].startswith(
        "legacy key data.sampler.class_path -> data.sampler.class_path="
        "pkg://core_v1.data.random_curriculum (it was pkg://tests.utils."
    )
    assert "ordered by RandomCurriculumSampler from pkg://core_v1.data.random_curriculum (data.sampler)" in out


@pytest.mark.slow
def test_verls_test_sampler_trains_on_v1(tiny_assets, ray_runtime, tmp_path):
    """verl's curriculum scripts as written: the keys move to rlbridge's sampler, which feeds two
    sync steps of whole passes' prompts; its state is checkpointed."""
    assert (
        main(
            [
                "--config-name=quickstart",
                *quickstart_overrides(tiny_assets, tmp_path, 2, *SMALL, *VERL_TEST_SAMPLER, "trainer.save_freq=2"),
            ]
        )
        == 0
    )
    state = _feed_state(tmp_path, 2)
    assert state["epoch"] == 0 and state["position"] == 16 and "generator" in state["sampler"]
    dataset = PromptDataset(str(tiny_assets["train"]))
    config = load_config(quickstart_overrides(tiny_assets, Path("unused"), 1), config_name="quickstart").data
    fresh = build_custom_sampler_feed(*RANDOM_CURRICULUM, dataset, config, 8)
    fresh.next_batch(), fresh.next_batch()  # what the run drew: two batches of the first pass
    assert torch.equal(state["sampler"]["generator"], fresh.state_dict()["sampler"]["generator"])
    steps = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2]
