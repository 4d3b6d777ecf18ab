"""The code scorers verl's `default_compute_score` uses for codecontests/apps/codeforces/taco rows:
`sandbox_fusion` (a Sandbox Fusion service, here the tool tests' stand-in that runs the code) and
`prime_code` (a local child process with limits), their routing, and the config that selects them."""

from __future__ import annotations

import asyncio
import json
import pickle
import socket
import threading
import time

import pytest

from core_v1.config.loader import load_config
from core_v1.errors import UserError
from core_v1.reward import RewardFunctionError, RewardScorer
from core_v1.reward.reward_model import rule_function_for
from core_v1.reward.scorers import default_compute_score, prime_code, sandbox_fusion
from legacy_v0.config import compose_v0
from legacy_v0.reward import BatchRewardManager, reward_function
from shims.config import migrate_overrides
from shims.rename_table import resolve_python_name
from shims.v0_keys import KeyTableOnV0
from tests.core_v1.agent_loop.sandbox_service import SandboxService

ADD = "a, b = map(int, input().split())\nprint(a + b)"
ADD_SMALL_ONLY = "a, b = map(int, input().split())\nprint(a + b if a < 10 else 0)"
CASES = {"inputs": ["1 2\n", "3 4\n", "10 20\n"], "outputs": ["3\n", "7\n", "30\n"]}
CALL_CASES = {"fn_name": "add", "inputs": ["1\n2", "3\n4"], "outputs": ["3", "7"]}
SOLUTION_CLASS = "class Solution:\n    def add(self, a, b):\n        return a + b"


def block(code: str) -> str:
    return f"Here is my program:\n```python\n{code}\n```\nDone."


class CompilingSandbox(SandboxService):
    """The stand-in, plus a compiler: code containing COMPILE_ERROR does not compile."""

    def answer(self, payload: dict) -> tuple[int, bytes]:
        if "COMPILE_ERROR" in payload["code"]:
            return 200, json.dumps(
                {
                    "status": "Failed",
                    "message": "",
                    "run_result": None,
                    "compile_result": {
                        "status": "Finished",
                        "return_code": 1,
                        "stdout": "",
                        "stderr": "error: expected ';'",
                    },
                }
            ).encode()
        return super().answer(payload)


@pytest.fixture(scope="module")
def service():
    service = CompilingSandbox()
    yield service
    service.close()


@pytest.fixture(autouse=True)
def fresh(service):
    service.mode, service.delay_s, service.peak = "run", 0.0, 0
    service.requests.clear()


def free_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}/run_code"


# ------------------------------------------------------------------ sandbox fusion
def test_every_case_runs_with_its_stdin_and_the_memory_limit(service):
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block(ADD), json.dumps(CASES), True)
    assert score == 1.0 and [m["status"] for m in metadata] == ["success"] * 3
    assert sorted(r["stdin"] for r in service.requests) == sorted(CASES["inputs"])
    assert {r["memory_limit_MB"] for r in service.requests} == {256}
    assert {(r["compile_timeout"], r["run_timeout"]) for r in service.requests} == {(10, 10)}


def test_the_continuous_score_is_the_share_of_the_first_ten_cases_that_pass(service):
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block(ADD_SMALL_ONLY), CASES, True)
    assert score == pytest.approx(2 / 3)
    assert [m["status"] for m in metadata] == ["success", "success", "wrong_answer"]
    cases = {"inputs": ["1 1"] * 10 + ["10 10"] * 2, "outputs": ["2"] * 10 + ["20"] * 2}
    assert sandbox_fusion.compute_score(service.url, None, 256, block(ADD_SMALL_ONLY), cases, True)[0] == 1.0
    assert sandbox_fusion.compute_score(service.url, None, 256, block(ADD_SMALL_ONLY), cases, False)[
        0
    ] == pytest.approx(10 / 12)


def test_call_based_cases_call_fn_name_with_the_json_arguments(service):
    assert sandbox_fusion.compute_score(service.url, None, 256, block(SOLUTION_CLASS), CALL_CASES, True)[0] == 1.0
    assert service.requests[0]["stdin"] in CALL_CASES["inputs"]
    wrong = "def add(a, b):\n    return a - b"
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block(wrong), CALL_CASES, True)
    assert score == 0.0 and {m["status"] for m in metadata} == {"wrong_answer"}


def test_failures_score_zero_with_their_reason(service):
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block("def broken(:"), CASES, True)
    assert score == 0.0 and {m["status"] for m in metadata} == {"runtime_error"}
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block("COMPILE_ERROR"), CASES, True)
    assert score == 0.0 and "compile_error" in {m["status"] for m in metadata}
    started = time.perf_counter()
    score, metadata = sandbox_fusion.compute_score(
        service.url, None, 256, block("while True: pass"), CASES, True, timeout=1
    )
    assert score == 0.0 and {m["status"] for m in metadata} == {"timeout"}
    assert time.perf_counter() - started < 8
    assert sandbox_fusion.compute_score(service.url, None, 256, "no code here", CASES, True) == (
        0.0,
        [{"error": "Invalid completion (missing code block)"}],
    )
    assert sandbox_fusion.compute_score(service.url, None, 256, block(ADD), "{not json", True)[0] == 0.0


def test_a_service_that_is_down_or_failing_scores_zero_and_says_why(service):
    score, metadata = sandbox_fusion.compute_score(free_port_url(), None, 256, block(ADD), CASES, True)
    assert score == 0.0 and {m["status"] for m in metadata} == {"api_error"}
    assert "connection refused" in metadata[0]["api_request_error"]
    service.mode = 500
    score, metadata = sandbox_fusion.compute_score(service.url, None, 256, block(ADD), CASES, True)
    assert score == 0.0 and "HTTP 500" in metadata[0]["api_request_error"]
    service.mode = "sandbox-error"
    assert sandbox_fusion.compute_score(service.url, None, 256, block(ADD), CASES, True)[0] == 0.0
    assert sandbox_fusion.compute_score("not a url", None, 256, block(ADD), CASES, True)[0] == 0.0


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_the_semaphore_bounds_the_requests_in_flight(service):
    service.delay_s = 0.2
    cases = {"inputs": ["1 1"] * 6, "outputs": ["2"] * 6}
    assert sandbox_fusion.compute_score(service.url, threading.Semaphore(2), 256, block(ADD), cases, True)[0] == 1.0
    assert service.peak == 2


# ------------------------------------------------------------------ local (prime_code)
FAST = {"first_run_timeout_s": 1, "case_timeout_s": 1}


def test_local_cases_pass_fail_and_count_as_verl_counts():
    assert prime_code.compute_score(block(ADD), json.dumps(CASES), continuous=True, **FAST) == (True, {})
    score, metadata = prime_code.compute_score(block(ADD_SMALL_ONLY), CASES, continuous=True, **FAST)
    assert score == pytest.approx(2 / 3) and metadata[2]["error_message"] == "Wrong Answer"
    assert prime_code.compute_score(block(ADD_SMALL_ONLY), CASES, continuous=False, **FAST)[0] is False
    score, metadata = prime_code.compute_score(block("def broken(:"), CASES, continuous=True, **FAST)
    assert score == 0.0 and "SyntaxError" in metadata[0]["error"]
    main = (
        "import sys\ndef main():\n    a, b = map(int, sys.stdin.buffer.read().split())\n    print(a + b)\n"
        "if __name__ == '__main__':\n    main()"
    )
    assert prime_code.compute_score(main, CASES, **FAST)[0] is True
    floats = {"inputs": ["1"], "outputs": ["0.3333333\n"]}
    assert prime_code.compute_score("print(1/3)", floats, **FAST)[0] is True
    assert prime_code.compute_score(block(ADD), "{not json", continuous=True)[0] is False


def test_local_call_based_cases():
    assert prime_code.compute_score(block(SOLUTION_CLASS), CALL_CASES, continuous=True, **FAST)[0] is True
    wrapped = {"fn_name": "add", "inputs": ["1\n2"], "outputs": ["[3]"]}  # verl's data wraps an answer in a list
    assert prime_code.compute_score("def add(a, b):\n    return a + b", wrapped, **FAST)[0] is True
    score, _ = prime_code.compute_score("def add(a, b):\n    return a - b", CALL_CASES, continuous=True, **FAST)
    assert score == 0.0


def test_an_infinite_loop_and_a_memory_bomb_are_stopped_by_the_limits():
    started = time.perf_counter()
    score, metadata = prime_code.compute_score(block("while True: pass"), CASES, continuous=True, **FAST)
    assert score == 0.0 and all("time limit" in m["error"] for m in metadata)
    assert time.perf_counter() - started < 15
    bomb = "x = bytearray(8 * 1024 ** 3)\nprint(len(x))"
    score, metadata = prime_code.compute_score(block(bomb), CASES, continuous=True, memory_limit_mb=256, **FAST)
    assert score == 0.0 and "memory limit" in metadata[0]["error"]
    hang = "import time\nwhile True:\n    try:\n        time.sleep(10)\n    except BaseException:\n        pass"
    score, metadata = prime_code.compute_score(block(hang), {"inputs": ["1"], "outputs": ["1"]}, **FAST)
    assert score is False


def test_the_program_has_no_network(service):
    host, port = service.url.split("//")[1].split("/")[0].split(":")
    code = f"import socket\nsocket.create_connection(({host!r}, {port}), timeout=1)\nprint('connected')"
    score, metadata = prime_code.compute_score(code, {"inputs": [""], "outputs": ["connected"]}, **FAST)
    assert score is False and "connected" not in metadata.get("output", "")


# ------------------------------------------------------------------ routing and config
def test_default_compute_score_sends_code_rows_to_the_service_only_with_a_url(service):
    truth = json.dumps(CASES)
    for source in ("codecontests", "apps", "codeforces", "taco"):
        assert default_compute_score(source, block(ADD), truth) == 1.0
    assert service.requests == []
    score = default_compute_score(
        "apps",
        block(ADD_SMALL_ONLY),
        truth,
        sandbox_fusion_url=service.url,
        concurrent_semaphore=None,
        memory_limit_mb=300,
    )
    assert score == pytest.approx(2 / 3) and len(service.requests) == 3
    assert service.requests[0]["memory_limit_MB"] == 300
    # Other rows never see the sandbox settings (verl's gsm8k takes no such argument).
    assert (
        default_compute_score("openai/gsm8k", "#### 4", "4", sandbox_fusion_url=service.url, memory_limit_mb=3) == 1.0
    )


def v1_config(*overrides: str):
    return load_config(migrate_overrides(list(overrides)), config_name="quickstart")


@pytest.mark.parametrize("key", ["reward.sandbox_fusion", "reward_model.sandbox_fusion", "sandbox_fusion"])
def test_the_url_reaches_the_scorer_on_v1(service, key):
    config = v1_config(f"{key}.url={service.url}", f"{key}.memory_limit_mb=512", f"{key}.max_concurrent=2")
    assert (config.reward.sandbox_fusion.url, config.reward.sandbox_fusion.memory_limit_mb) == (service.url, 512)
    row = {"data_source": "apps", "reward_model": {"ground_truth": json.dumps(CASES)}}
    score, _ = asyncio.run(RewardScorer(config.reward).score(row, block(ADD)))
    assert score == 1.0 and len(service.requests) == 3
    assert {r["memory_limit_MB"] for r in service.requests} == {512}


@pytest.mark.parametrize("key", ["reward.sandbox_fusion", "reward_model.sandbox_fusion", "sandbox_fusion"])
def test_the_url_reaches_the_scorer_on_v0(service, key):
    v0 = compose_v0(
        "quickstart", None, [f"{key}.url={service.url}", f"{key}.memory_limit_mb=384"], legacy_keys=KeyTableOnV0()
    )
    # V0's prime reward manager sends the function to its worker processes: it must pickle.
    compute_score = pickle.loads(pickle.dumps(reward_function(v0.raw)))
    assert compute_score(data_source="taco", solution_str=block(ADD), ground_truth=json.dumps(CASES)) == 1.0
    assert len(service.requests) == 3 and service.requests[0]["memory_limit_MB"] == 384


def test_without_a_url_and_with_a_custom_function_nothing_is_sent(service):
    config = v1_config()
    assert config.reward.sandbox_fusion.url is None
    assert rule_function_for(config.reward, None) is default_compute_score
    custom = v1_config(f"reward.sandbox_fusion.url={service.url}").reward
    assert rule_function_for(custom, len) is len  # verl passes the settings to its own scorers only


def test_v0s_batch_manager_still_asks_for_a_function_of_its_own(service):
    scorer = rule_function_for(v1_config(f"reward.sandbox_fusion.url={service.url}").reward, None)
    with pytest.raises(RewardFunctionError, match="custom_reward_function"):
        BatchRewardManager(None, compute_score=scorer)


def test_a_url_that_is_no_url_is_refused_at_start_up():
    with pytest.raises(UserError, match="reward.sandbox_fusion.url must be"):
        RewardScorer(v1_config("reward.sandbox_fusion.url=localhost:8080").reward)
    with pytest.raises(UserError, match="max_concurrent must be"):
        RewardScorer(
            v1_config("reward.sandbox_fusion.url=http://x/run_code", "reward.sandbox_fusion.max_concurrent=0").reward
        )


def test_verl_reward_files_import_both_scorers():
    for module in ("sandbox_fusion", "prime_code"):
        assert (
            resolve_python_name(f"verl.utils.reward_score.{module}.compute_score").new_name
            == f"core_v1.reward.scorers.{module}.compute_score"
        )
