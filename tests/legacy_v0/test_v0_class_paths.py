"""Class paths in a V0 config are imported at start-up and used: `checkpoint_manager_class`, reward
managers (the batch manager needs a function)."""

from __future__ import annotations

from core_v1.main_ppo import main, run_v0_entry
from tests.conftest import quickstart_overrides
from tests.legacy_v0.conftest import small_run_overrides

MANAGER_FILE = """
from core_v1.checkpoint_engine.manager import CheckpointManager

SYNCED = []


class CountingManager(CheckpointManager):
    def update_weights(self, global_steps):
        SYNCED.append(global_steps)
        return {**super().update_weights(global_steps), "custom_manager/syncs": len(SYNCED)}
"""


def test_a_custom_checkpoint_manager_does_every_weight_sync(tiny_assets, tmp_path):
    from core_v1.utils.loading import load_object

    manager = tmp_path / "my_manager.py"
    manager.write_text(MANAGER_FILE)
    overrides = small_run_overrides(
        tiny_assets,
        tmp_path / "run",
        2,
        f"+actor_rollout_ref.rollout.checkpoint_manager_class={manager}:CountingManager",
    )
    assert run_v0_entry("quickstart", None, overrides) == 0
    assert load_object(f"{manager}:SYNCED") == [1, 2]  # once after each of the two updates


def test_a_missing_class_is_one_error_line_and_exit_code_2(tiny_assets, tmp_path, capsys):
    for name in ("no_such_package.sync.Manager", f"{tmp_path}/missing.py:Manager", "collections.OrderedDict"):
        overrides = small_run_overrides(
            tiny_assets, tmp_path, 1, f"actor_rollout_ref.rollout.checkpoint_manager_class={name}"
        )
        assert main(["--config-name=quickstart", *overrides, "trainer.use_v1=false"]) == 2
        errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "checkpoint_manager_class" in errors[0], errors


def test_the_batch_reward_manager_without_a_function_is_one_error_line_at_start_up(tiny_assets, tmp_path, capsys):
    # As V1 refuses it (core_v1.reward.managers), so --verify sees neither launch run.
    overrides = quickstart_overrides(
        tiny_assets, tmp_path, 1, "reward_model.reward_manager=batch", "trainer.dry_run=true"
    )
    assert main(["--config-name=quickstart", *overrides, "trainer.use_v1=false"]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "reward_manager=batch calls a function" in errors[0], errors


PLUGIN_MANAGER_FILE = """
from legacy_v0.reward import NaiveRewardManager, register_reward_manager

CALLS = []


@register_reward_manager("counting_plugin")
class CountingRewardManager(NaiveRewardManager):
    def __call__(self, data, return_dict=False):
        CALLS.append(len(data))
        return super().__call__(data, return_dict=return_dict)
"""


def test_a_reward_manager_registered_by_a_plugin_is_found_at_start_up_and_scores(tiny_assets, tmp_path):
    from core_v1.utils.loading import load_object

    plugin = tmp_path / "my_rewards.py"
    plugin.write_text(PLUGIN_MANAGER_FILE)
    overrides = small_run_overrides(
        tiny_assets,
        tmp_path / "run",
        1,
        f"trainer.v1.plugins=[{plugin}]",
        "reward_model.reward_manager=counting_plugin",
    )
    assert run_v0_entry("quickstart", None, overrides) == 0
    assert load_object(f"{plugin}:CALLS")  # the plug-in's manager scored the step
