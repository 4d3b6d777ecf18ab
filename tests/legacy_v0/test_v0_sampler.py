"""verl's custom samplers (`data.sampler.{class_path,class_name}`, curriculum `update(batch)`) on V0."""

from __future__ import annotations

from pathlib import Path

import pytest

from core_v1.config import ConfigError
from core_v1.data import PromptDataset
from core_v1.data.samplers import CustomSamplerFeed, build_custom_sampler_feed
from core_v1.main_ppo import run_v0_entry
from tests.legacy_v0.conftest import small_run_overrides

SAMPLER_FILE = '''
from core_v1.data.samplers import AbstractCurriculumSampler

UPDATES = []


class Backwards(AbstractCurriculumSampler):
    """Walks the dataset from the end, and records what each finished step trained on."""

    def __init__(self, data_source, data_config):
        self.size = len(data_source)
        self.batch_size = data_config.train_batch_size

    def __iter__(self):
        return iter(range(self.size - 1, -1, -1))

    def __len__(self):
        return self.size

    def update(self, batch):
        rows = batch.non_tensor_batch["extra_info"]
        UPDATES.append((sorted({row["index"] for row in rows}), "token_level_scores" in batch.batch.keys()))
'''


@pytest.fixture
def sampler_file(tmp_path):
    path = tmp_path / "my_sampler.py"
    path.write_text(SAMPLER_FILE)
    return path


def test_a_curriculum_sampler_orders_the_prompts_and_sees_every_step(sampler_file, tiny_assets, tmp_path):
    from core_v1.utils.loading import load_object

    overrides = small_run_overrides(
        tiny_assets, tmp_path / "run", 2, f"data.sampler.class_path={sampler_file}", "data.sampler.class_name=Backwards"
    )
    assert run_v0_entry("quickstart", None, overrides) == 0
    updates = load_object(f"{sampler_file}:UPDATES")
    size = len(PromptDataset(str(tiny_assets["train"])))
    # 4 prompts a step, taken from the end of the dataset; the batch the sampler sees is scored.
    assert updates == [(list(range(size - 4, size)), True), (list(range(size - 8, size - 4)), True)]


def test_the_feed_drops_the_ragged_tail_and_resumes_inside_a_pass(sampler_file, tiny_assets):
    from omegaconf import OmegaConf

    dataset = PromptDataset(str(tiny_assets["train"]))
    data_config = OmegaConf.create({"train_batch_size": 10})
    feed = build_custom_sampler_feed(str(sampler_file), "Backwards", dataset, data_config, 10)
    first = [row["extra_info"]["index"] for row in feed.next_batch()]
    state = feed.state_dict()
    second = [row["extra_info"]["index"] for row in feed.next_batch()]
    resumed = build_custom_sampler_feed(str(sampler_file), "Backwards", dataset, data_config, 10)
    resumed.load_state_dict(state)
    assert [row["extra_info"]["index"] for row in resumed.next_batch()] == second
    assert first == list(range(len(dataset) - 1, len(dataset) - 11, -1))
    feed.next_batch()  # 25 rows: the third batch of 10 starts a new pass
    assert feed.epoch == 1 and isinstance(feed, CustomSamplerFeed)


def test_a_missing_sampler_class_is_one_error_line_at_start_up(sampler_file, tiny_assets, tmp_path, capsys):
    from core_v1.main_ppo import main

    overrides = small_run_overrides(
        tiny_assets, tmp_path, 1, f"data.sampler.class_path={sampler_file}", "data.sampler.class_name=Forwards"
    )
    assert main([*overrides, "--config-name=quickstart", "trainer.use_v1=false", "trainer.dry_run=true"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Forwards" in errors[0]
    with pytest.raises(ConfigError, match="needs both class_path"):
        run_v0_entry("quickstart", None, [*overrides[:-1], "trainer.dry_run=true"])


def test_the_curriculum_example_runs_on_v0_and_its_scores_are_checkpointed(tiny_assets, tmp_path):
    import torch

    from core_v1.main_ppo import main

    example = Path(__file__).resolve().parents[2] / "examples" / "curriculum_sampler" / "difficulty_sampler.py"
    overrides = small_run_overrides(
        tiny_assets,
        tmp_path,
        2,
        f"data.sampler.class_path={example}",
        "data.sampler.class_name=DifficultySampler",
        "trainer.save_freq=2",
    )
    assert main(["--config-name=quickstart", *overrides, "trainer.use_v1=false"]) == 0
    state = torch.load(tmp_path / "global_step_2" / "trainer_state.pt", weights_only=False)["sampler"]
    # 2 steps x 4 prompts x 4 samples, each told to the sampler once; the pass drew those 8 prompts.
    assert sum(count for _, count in state["sampler"]["scores"].values()) == 2 * 4 * 4
    assert sorted(state["sampler"]["scores"]) == sorted(state["pass"]["drawn"]) and len(state["pass"]["drawn"]) == 8
