"""The V0 entry points and the deprecation warning (its text is pinned here)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import legacy_v0
from core_v1.utils.tracking import read_metrics
from legacy_v0.main_ppo import main as legacy_main
from tests.legacy_v0.conftest import small_run_overrides

ROOT = Path(__file__).resolve().parents[2]
PINNED_MESSAGE = (
    "the V0 trainer (legacy_v0, trainer.use_v1=false) is deprecated and will be removed in rlbridge 0.3; "
    "its replacement is the V1 trainer: `python -m core_v1.main_ppo` with trainer.v1.trainer_mode=sync "
    "(the same training, number for number). `python -m codemods.migrate <script>` rewrites old scripts."
)


def _python(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_deprecation_message_is_pinned():
    assert legacy_v0.DEPRECATION_MESSAGE == PINNED_MESSAGE
    assert legacy_v0.REMOVAL_VERSION == "rlbridge 0.3"
    assert issubclass(legacy_v0.RLBridgeDeprecationWarning, FutureWarning)  # shown to users by default


def test_the_removal_version_is_still_in_the_future():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    current = tuple(int(part) for part in version.split(".")[:2])
    assert current < (0, 3), f"rlbridge {version} has reached the announced removal of V0"


def test_v1_entry_with_use_v1_false_trains_on_v0_and_warns_once(
    tiny_assets, ray_runtime, tmp_path, capsys, monkeypatch
):
    # In this process, on the shared Ray (a fresh interpreter and Ray cost ~10 CPU s more): the
    # entrypoint's `main` is what `python -m core_v1.main_ppo` runs.
    from core_v1.main_ppo import main as v1_main

    monkeypatch.setattr(legacy_v0, "_warned", False)  # as in a fresh process
    overrides = small_run_overrides(tiny_assets, tmp_path, 1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = v1_main(["--config-name=quickstart", *overrides, "trainer.use_v1=false"])
    assert code == 0, capsys.readouterr().err[-2000:]
    deprecations = [w for w in caught if w.category is legacy_v0.RLBridgeDeprecationWarning]
    assert [str(w.message) for w in deprecations] == [PINNED_MESSAGE]
    assert PINNED_MESSAGE not in capsys.readouterr().err  # not printed a second time some other way
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [1]


def test_legacy_entry_dry_run_prints_the_v0_plan(tiny_assets, tmp_path, capsys):
    overrides = small_run_overrides(tiny_assets, tmp_path, 1)
    assert legacy_main(["--config-name=quickstart", *overrides, "trainer.dry_run=true"]) == 0
    assert re.search(r"trainer:\s+V0\b", capsys.readouterr().out)
    assert not (tmp_path / "metrics.jsonl").exists()  # nothing started


def test_the_warning_is_issued_once_per_process_even_when_all_warnings_show(monkeypatch):
    monkeypatch.setattr(legacy_v0, "_warned", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        legacy_v0.warn_deprecated()
        legacy_v0.warn_deprecated()
        legacy_main(["trainer.use_v1=true"])
    assert [str(w.message) for w in caught] == [PINNED_MESSAGE]
    assert caught[0].category is legacy_v0.RLBridgeDeprecationWarning


def test_legacy_entry_refuses_use_v1_true(capsys):
    assert legacy_main(["trainer.use_v1=true"]) == 2
    assert "drop trainer.use_v1=true" in capsys.readouterr().err


def test_a_config_v0_cannot_run_is_one_error_line(tiny_assets, tmp_path, capsys):
    overrides = small_run_overrides(tiny_assets, tmp_path, 1, "critic.model.lora_rank=8")
    assert legacy_main(["--config-name=quickstart", *overrides]) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "LoRA" in errors[0]


def test_an_old_script_with_v0_reward_keys_runs_on_v0(tiny_assets, tmp_path):
    from tests.legacy_v0.conftest import DENSE_REWARD

    overrides = [
        arg
        for arg in small_run_overrides(tiny_assets, tmp_path, 1)
        if not arg.startswith("reward.custom_reward_function.path=")
    ]
    # verl-era key names: the config shim moves them to their V1 homes, the V0 trainer reads them there.
    old_keys = [
        "reward_model.reward_manager=naive",
        f"custom_reward_function.path={DENSE_REWARD}",
        "custom_reward_function.name=compute_score",
    ]
    assert legacy_main(["--config-name=quickstart", *overrides, *old_keys]) == 0
    assert "reward/digits/mean" in read_metrics(tmp_path / "metrics.jsonl")[0]  # the dense reward's extra


def test_dataproto_alone_does_not_warn():
    # The V1-side shims convert DataProto batches; that is not a use of the deprecated trainer.
    result = _python("-W", "error::FutureWarning", "-c", "import legacy_v0.protocol, shims.data")
    assert result.returncode == 0, result.stderr[-2000:]
