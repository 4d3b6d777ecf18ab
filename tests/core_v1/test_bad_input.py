"""A user's mistake ends with one `error:` line and exit code 2 (or, for a reward function that
raises on some samples, a counted failure while the run goes on) — never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core_v1.config import load_config
from core_v1.main_ppo import main, run_v1
from tests.conftest import quickstart_overrides


def _run_main(capsys, overrides):
    code = main(["--config-name=quickstart", *overrides])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


def test_missing_data_file(capsys, tiny_assets, tmp_path):
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={tmp_path}/nope.parquet"])
    assert code == 2
    assert err[-1].startswith("error: data file") and "does not exist" in err[-1]


def test_row_without_prompt_column(capsys, tiny_assets, tmp_path):
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist([{"data_source": "arithmetic", "question": "1 + 1 ="}] * 20), bad)
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={bad}"])
    assert code == 2
    assert "no 'prompt' column" in err[-1] and "data.prompt_key" in err[-1]


def test_unknown_agent_name(capsys, tiny_assets, tmp_path):
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1)
                          + ["actor_rollout_ref.rollout.agent.default_agent_loop=single_turn_agnet"])
    assert code == 2
    assert "unknown agent loop 'single_turn_agnet'" in err[-1] and "Did you mean 'single_turn_agent'" in err[-1]


def test_unknown_agent_name_in_a_data_row(capsys, tiny_assets, tmp_path):
    rows = pq.read_table(tiny_assets["train"]).to_pylist()
    rows[3]["agent_name"] = "no_such_loop"
    for row in rows[:3] + rows[4:]:
        row["agent_name"] = None
    data = tmp_path / "agents.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data)
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + [f"data.train_files={data}"])
    assert code == 2 and "unknown agent loop 'no_such_loop'" in err[-1]


def test_unknown_trainer_mode(capsys, tiny_assets, tmp_path):
    code, err = _run_main(capsys, quickstart_overrides(tiny_assets, tmp_path, 1) + ["trainer.v1.trainer_mode=synk"])
    assert code == 2 and "unknown trainer mode 'synk'" in err[-1] and "Did you mean 'sync'" in err[-1]


def test_cli_error_is_one_line_without_traceback(tiny_assets, tmp_path):
    result = subprocess.run([sys.executable, "-m", "core_v1.main_ppo", "--config-name=quickstart",
                             *quickstart_overrides(tiny_assets, tmp_path, 1), "trainer.total_epochs=abc"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


def test_reward_function_that_raises_is_counted_and_the_run_goes_on(tiny_assets, ray_runtime, tmp_path):
    reward_file = tmp_path / "flaky_reward.py"
    reward_file.write_text(textwrap.dedent("""
        def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
            if ground_truth in ("3", "5"):
                raise ValueError("the grader crashed")
            return 1.0 if solution_str.strip() == ground_truth else 0.0
    """))
    config = load_config(quickstart_overrides(
        tiny_assets, tmp_path, 2, f"reward.custom_reward_function.path={reward_file}", "trainer.test_freq=-1",
        "data.train_batch_size=8", "actor_rollout_ref.actor.ppo_mini_batch_size=8", "actor_rollout_ref.rollout.n=2"),
        config_name="quickstart")
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    failed = sum(r["rollout/failed_samples"] for r in rows)
    assert failed > 0 and failed % 2 == 0  # whole groups of the crashing prompts (n=2 sessions each)


def test_override_hydra_cannot_parse_is_one_line_naming_it(capsys):
    code, err = _run_main(capsys, ["data.train_files=<from the shell>", "trainer.dry_run=true"])
    assert code == 2 and len(err) == 1
    assert err[0].startswith("error: cannot read the override 'data.train_files=<from the shell>'")
    assert "key='value'" in err[0]  # the fix: quote it
