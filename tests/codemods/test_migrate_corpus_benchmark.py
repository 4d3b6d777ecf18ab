"""benchmarks/migrate_corpus.py on a small git repository of ours shaped like verl's (no verl needed)."""

from __future__ import annotations

import subprocess

from benchmarks import migrate_corpus

FILES_AT_FIRST_TAG = {
    "examples/grpo/run.sh": "#!/bin/bash\npython3 -m verl.trainer.main_ppo reward_model.enable=True\n",
    "recipe/mine/run.sh": "#!/bin/bash\npython3 -m recipe.mine.main_mine critic.model.fsdp_config.param_offload=True\n",
    "recipe/mine/reward.py": "from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss\n",
    "verl/trainer/config/ppo_trainer.yaml": "reward_model:\n  enable: False\n  strategy: fsdp\ntrainer:\n  total_epochs: 1\n",
    "verl/trainer/config/actor/dp_actor.yaml": "strategy: fsdp\n",  # not a top-level config: not exported
}


def _repository(tmp_path):
    repo = tmp_path / "verl"
    for path, text in FILES_AT_FIRST_TAG.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    (repo / "examples/grpo/run2.sh").write_text(
        '#!/bin/bash\nTEST=${TEST:-["/t"]}\npython3 verl/trainer/main_ppo.py ray_init.num_cpus=4 \\\n'
    )
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "two"], check=True)
    subprocess.run([*git, "tag", "v2"], check=True)
    return repo


def test_exports_each_distinct_file_once_and_reports_all_targets_met(tmp_path, capsys):
    repo = _repository(tmp_path)
    work = tmp_path / "work"
    assert migrate_corpus.main([str(repo), "--tags", "v1", "v2", "--keep", str(work)]) == 0
    exported = sorted(str(p.relative_to(work)) for p in work.rglob("*") if p.is_file())
    assert exported == [
        "v1/examples/grpo/run.sh",
        "v1/recipe/mine/reward.py",
        "v1/recipe/mine/run.sh",
        "v1/verl/trainer/config/ppo_trainer.yaml",
        "v2/examples/grpo/run2.sh",
    ]
    out = capsys.readouterr().out
    assert "scripts bash accepts but left untouched                  0" in out
    assert "unmarked legacy keys left (files)                        0" in out
    assert "rewritten imports that do not resolve (files)            0" in out
    assert "files a second run changes (idempotency)                 0" in out
    assert (
        "python3 -m core_v1.main_ppo ray_kwargs.ray_init.num_cpus=4" in (work / "v2/examples/grpo/run2.sh").read_text()
    )


def test_fails_when_a_legacy_key_is_left_unmarked(tmp_path, monkeypatch):
    repo = _repository(tmp_path)
    # An engine that changes nothing: every legacy key stays, unmarked, and the benchmark says so.
    from codemods.findings import MigrationResult

    monkeypatch.setattr("codemods.engine.migrate_text", lambda text, kind, selection=None: MigrationResult(text, text))
    assert migrate_corpus.main([str(repo), "--tags", "v1", "v2"]) == 1
