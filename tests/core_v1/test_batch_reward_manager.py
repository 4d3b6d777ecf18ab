"""verl's `batch` reward manager on V1 (`reward.reward_manager.name=batch`): the responses that finish
together (one engine step) are scored by one call with lists; each sample gets its own entry; a call
that raises, returns the wrong number of scores or runs past `reward.timeout_s` fails its samples
only; ReMax's greedy baselines are scored the same way; the config and its legacy key are accepted.

Sessions run in the real `AgentLoopWorker` on a real event loop and store; the replicas are a
stand-in that answers in engine steps (`SteppedLLM`), and the batch function logs each call it gets.
"""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from uuid import uuid4

import pytest

from core_v1.agent_loop.manager import sampling_params_for
from core_v1.agent_loop.worker import AgentLoopWorker
from core_v1.config import ConfigError, load_config
from core_v1.reward.managers import reward_manager_policy
from core_v1.transfer_store import TransferStore
from examples.quickstart.prepare import NUMBER_WORDS
from examples.tiny_model import make_tokenizer
from tests.core_v1.agent_loop.scripted_llm import ScriptedLLM

JUDGE = """
import json, time

def judge(data_sources, solution_strs, ground_truths, extra_infos, log, bonus):  # no **kwargs: nothing else may arrive
    with open(log, "a") as f:
        f.write(json.dumps({"data_sources": list(data_sources), "solution_strs": list(solution_strs),
                            "ground_truths": list(ground_truths), "extra_infos": list(extra_infos)}) + "\\n")
    if "raise" in ground_truths:
        raise RuntimeError("judge unavailable")
    if "hang" in ground_truths:
        time.sleep(30)
    scores = [{"score": float(s.strip() == g) + bonus, "index": float(e["index"])}
              for s, g, e in zip(solution_strs, ground_truths, extra_infos)]
    return scores[:-1] if "short" in ground_truths else scores
"""


class SteppedLLM:
    """The replicas as a batch sees them: requests wait for an engine step, and each step returns up
    to `step_size` of them at once (turn k of any session answers `script[k]`, as `ScriptedLLM`)."""

    def __init__(self, tokenizer, script: list[str], step_size: int):
        self.scripted = ScriptedLLM(tokenizer, script)
        self.step_size = step_size
        self.waiting: list[tuple[asyncio.Future, object]] = []

    async def generate(self, request_id, prompt_ids, sampling_params):
        output = await self.scripted.generate(request_id, prompt_ids, sampling_params)
        future = asyncio.get_running_loop().create_future()
        self.waiting.append((future, output))
        return await future

    async def run_steps(self, requests: int) -> None:
        while requests:
            await asyncio.sleep(0.01)
            step, self.waiting = self.waiting[: self.step_size], self.waiting[self.step_size :]
            for future, output in step:
                future.set_result(output)
            requests -= len(step)


@pytest.fixture(scope="module")
def tokenizer():
    return make_tokenizer(NUMBER_WORDS)


@pytest.fixture
def batch_config(tmp_path):
    judge = tmp_path / "judge.py"
    judge.write_text(JUDGE)
    log = tmp_path / "calls.jsonl"

    def build(*extra: str):
        return load_config(
            [
                f"reward.custom_reward_function.path={judge}",
                "reward.custom_reward_function.name=judge",
                "reward.reward_manager.name=batch",
                f"+reward.reward_kwargs.log={log}",
                "+reward.reward_kwargs.bonus=0.5",
                *extra,
            ],
            config_name="quickstart",
        )

    build.judge, build.log = judge, log
    return build


def calls_of(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def run_sessions(config, tokenizer, answers: list[str], truths: list[str], step_size: int):
    """Run one session per answer through a real worker; `{ground truth: (tags, row)}` from the store."""
    client = SteppedLLM(tokenizer, answers, step_size)
    store = TransferStore()
    worker = AgentLoopWorker(config, client, store, tokenizer)
    params = sampling_params_for(config, validate=False)
    sessions = [
        {
            "uid": uuid4().hex,
            "session_id": 0,
            "seed": i,
            "global_steps": 1,
            "sampling_params": params,
            "raw_prompt": [{"role": "user", "content": "1+2="}],
            "data_source": "arithmetic",
            "reward_model": {"ground_truth": truth},
            "extra_info": {"index": i},
        }
        for i, truth in enumerate(truths)
    ]

    async def run():
        worker.submit("train", sessions)
        await asyncio.gather(client.run_steps(len(sessions)), worker.drain())

    asyncio.run(run())
    by_key = {key: tags for key, tags in store.list("train").items()}
    rows = {}
    for session in sessions:
        [(key, tags)] = [(k, t) for k, t in by_key.items() if k.startswith(session["uid"])]
        row = store.get("train", [key]) if tags["status"] == "finished" else None
        rows[session["reward_model"]["ground_truth"]] = (tags, row)
    return rows


def test_one_call_with_lists_gives_each_sample_its_own_score(batch_config, tokenizer):
    config = batch_config()
    rows = run_sessions(config, tokenizer, answers=["3", "4", "5", "6"], truths=["3", "7", "5", "1"], step_size=4)
    [call] = calls_of(batch_config.log)  # the four sessions finished in one engine step: one call
    assert call == {
        "data_sources": ["arithmetic"] * 4,
        "solution_strs": ["3", "4", "5", "6"],
        "ground_truths": ["3", "7", "5", "1"],
        "extra_infos": [{"index": i} for i in range(4)],
    }
    for truth, expected, index in (("3", 1.5, 0), ("7", 0.5, 1), ("5", 1.5, 2), ("1", 0.5, 3)):
        tags, row = rows[truth]
        assert tags["status"] == "finished", tags
        assert row["reward_score"].tolist() == [expected]  # its own entry of the list, bonus (a reward_kwarg) added
        assert row["reward_extra"].tolist() == [{"index": float(index)}]  # the dict's extra numbers, per sample


def test_sessions_finishing_together_share_one_call(batch_config, tokenizer):
    answers = [str(i % 9) for i in range(8)]
    rows = run_sessions(batch_config(), tokenizer, answers=answers, truths=[str(i) for i in range(8)], step_size=5)
    calls = calls_of(batch_config.log)
    assert [len(call["solution_strs"]) for call in calls] == [5, 3]  # one call per engine step
    assert all(tags["status"] == "finished" for tags, _ in rows.values())
    assert [rows[str(i)][1]["reward_score"].tolist() for i in range(8)] == [[1.5]] * 8


@pytest.mark.parametrize(
    "trigger, message",
    [
        ("raise", "raised RuntimeError: judge unavailable"),
        ("short", "returned 2 scores for 3 responses"),
        ("hang", "did not return within 0.5 s (reward.timeout_s)"),
    ],
)
def test_a_failing_call_fails_its_samples_and_the_next_call_still_scores(batch_config, tokenizer, trigger, message):
    rows = run_sessions(
        batch_config("reward.timeout_s=0.5"),
        tokenizer,
        answers=["1", "2", "3", "4", "5", "6"],
        truths=[trigger, "2", "3", "4", "5", "6"],
        step_size=3,
    )
    assert len(calls_of(batch_config.log)) == 2
    for truth in (trigger, "2", "3"):  # the first engine step's call: every sample failed, the function named
        tags, _ = rows[truth]
        assert tags["status"] == "failed" and message in tags["error"], tags
        assert f"{batch_config.judge}:judge" in tags["error"]
    for truth in ("4", "5", "6"):  # the next call scores as usual
        tags, row = rows[truth]
        assert tags["status"] == "finished" and row["reward_score"].tolist() == [1.5]


def test_remax_greedy_baselines_are_scored_in_one_batch_call(batch_config, tokenizer):
    from core_v1.trainer.remax import _greedy_scores

    config = batch_config()
    components = SimpleNamespace(rollout_client=ScriptedLLM(tokenizer, ["3", "4", "5"]), tokenizer=tokenizer)
    prompts = [tokenizer.encode("1+2=")] * 3
    rows = [
        {"data_source": "arithmetic", "reward_model": {"ground_truth": truth}, "extra_info": {"index": i}}
        for i, truth in enumerate(["3", "9", "5"])
    ]
    scores = asyncio.run(_greedy_scores(config, components, None, prompts, rows))
    assert scores == [1.5, 0.5, 1.5]
    [call] = calls_of(batch_config.log)
    assert call["solution_strs"] == ["3", "4", "5"] and call["ground_truths"] == ["3", "9", "5"]


def test_batch_config_is_accepted_and_needs_a_function(batch_config, capsys):
    config = batch_config()
    assert config.reward.reward_manager.name == "batch"
    policy = reward_manager_policy(config.reward)
    assert policy.batched and policy.score_kwargs == {"log": str(batch_config.log), "bonus": 0.5}
    without_function = load_config(["reward.reward_manager.name=batch"], config_name="quickstart")
    with pytest.raises(ConfigError, match="set reward.custom_reward_function.path"):
        reward_manager_policy(without_function.reward)


def test_legacy_reward_manager_batch_resolves_to_v1_batch_with_one_warning(batch_config, capsys):
    from core_v1.main_ppo import compose_v1, to_config

    capsys.readouterr()
    raw, _ = compose_v1(
        "quickstart",
        None,
        [
            f"reward.custom_reward_function.path={batch_config.judge}",
            "reward.custom_reward_function.name=judge",
            "reward_model.reward_manager=batch",
        ],
    )
    config = to_config(raw)
    assert config.reward.reward_manager.name == "batch" and reward_manager_policy(config.reward).batched
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(warnings) == 1, warnings
    assert (
        warnings[0].startswith("legacy key reward_model.reward_manager") and "reward.reward_manager.name" in warnings[0]
    )


def test_a_v1_dry_run_accepts_batch_with_a_function_and_refuses_it_without_in_one_line(
    batch_config, tiny_assets, capsys
):
    from core_v1.main_ppo import main

    base = [
        f"actor_rollout_ref.model.path={tiny_assets['model']}",
        f"data.train_files={tiny_assets['train']}",
        "reward.reward_manager.name=batch",
        "trainer.dry_run=true",
    ]
    function = [f"reward.custom_reward_function.path={batch_config.judge}", "reward.custom_reward_function.name=judge"]
    assert main([*base, *function]) == 0, capsys.readouterr().err
    capsys.readouterr()
    code = main(base)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "reward.custom_reward_function.path" in errors[0]


@pytest.mark.slow
def test_a_remax_run_with_validation_scores_every_sample_through_the_batch_function(
    batch_config, tiny_assets, ray_runtime, tmp_path
):
    from core_v1.main_ppo import run_v1
    from tests.conftest import quickstart_overrides

    config = batch_config(
        *quickstart_overrides(
            tiny_assets,
            tmp_path,
            1,
            "algorithm.adv_estimator=remax",
            "trainer.test_freq=1",
            "trainer.val_before_train=false",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
            "trainer.critic_warmup=1",
        )
    )  # the actor's update waits one step (any critic or none), as verl's does
    assert run_v1(config) == 0
    [metrics] = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics["rollout/failed_samples"] == 0 and metrics["val/failed_samples"] == 0
    assert {"actor/pg_loss", "actor/grad_norm"}.isdisjoint(metrics)  # step 1 <= critic_warmup: no actor update
    assert 0.5 <= metrics["val/score/mean"] <= 1.5  # the judge's scores (bonus 0.5), validation included
    sizes = [len(call["solution_strs"]) for call in calls_of(batch_config.log)]
    # 8 samples, 4 greedy baselines (one per prompt group) and the 25 validation prompts, in fewer calls
    assert sum(sizes) == 8 + 4 + 25 and len(sizes) < sum(sizes)
