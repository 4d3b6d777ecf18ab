"""The search tool that verl's Search-R1 examples name, against a real retrieval service on
127.0.0.1 (`http.server` in a thread) that answers in verl's shape: the request it gets, the
passages as the model reads them, retries, every failure answered and counted, the in-flight
limit, and one run of the real `tool_agent` loop that calls it."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from core_v1.agent_loop.tools import ToolConfigError
from core_v1.agent_loop.tools.search import SearchConfig, SearchTool
from core_v1.agent_loop.tools.tool_registry import initialize_tools_from_config
from tests.json_service import JsonService

FAST_RETRIES = {"max_retries": 3, "retry_delay_s": 0.01}


class Retrieval(JsonService):
    """A retrieval service: POST {"queries", "topk", "return_scores"} -> {"result": [passages per query]}.
    `mode` picks the answer: "ok", "empty", or `JsonService`'s modes ("slow" is past any client timeout)."""

    def __init__(self):
        super().__init__("/retrieve")

    def recorded(self, payload: dict, headers) -> dict:
        return {"payload": payload, "content_type": headers["Content-Type"]}

    def reply(self, payload: dict) -> dict:
        if self.mode == "empty":
            return {"result": [[] for _ in payload["queries"]]}
        return {
            "result": [
                [
                    {
                        "document": {"id": str(i), "contents": f"{query} title {i}\n{query} text {i}\nmore {i}"},
                        "score": 1.0 / i,
                    }
                    for i in range(1, payload["topk"] + 1)
                ]
                for query in payload["queries"]
            ]
        }


@pytest.fixture()
def service():
    retrieval = Retrieval()
    yield retrieval
    retrieval.close()


def make_tool(url: str, **config) -> SearchTool:
    return SearchTool({"retrieval_service_url": url, "type": "native", **config})


def call(tool: SearchTool, parameters: dict) -> tuple[str, float, dict]:
    async def one_call():
        instance = await tool.create()
        response, reward, metrics = await tool.execute(instance, parameters)
        assert await tool.calc_reward(instance) == 0.0  # the answer is scored by the reward function
        await tool.release(instance)
        return response.text, reward, metrics

    return asyncio.run(one_call())


def result_of(text: str) -> str:
    decoded = json.loads(text)
    assert list(decoded) == ["result"]
    return decoded["result"]


def test_the_passages_of_each_query_are_formatted_and_topk_is_sent(service):
    text, reward, metrics = call(make_tool(service.url, topk=2), {"query_list": ["capital of France", "Nile"]})
    assert service.requests == [
        {
            "payload": {"queries": ["capital of France", "Nile"], "topk": 2, "return_scores": True},
            "content_type": "application/json",
        }
    ]
    assert result_of(text) == (
        "Doc 1 (Title: capital of France title 1)\ncapital of France text 1\nmore 1\n\n"
        "Doc 2 (Title: capital of France title 2)\ncapital of France text 2\nmore 2"
        "\n---\n"
        "Doc 1 (Title: Nile title 1)\nNile text 1\nmore 1\n\n"
        "Doc 2 (Title: Nile title 2)\nNile text 2\nmore 2"
    )
    assert reward == 0.0 and metrics == {"query_count": 2.0, "total_results": 4.0, "api_errors": 0.0}


def test_topk_defaults_to_3_and_non_ascii_text_is_kept(service):
    text, _, metrics = call(make_tool(service.url), {"query_list": ["Zürich"]})
    assert service.requests[0]["payload"]["topk"] == 3 and metrics["total_results"] == 3
    assert "Zürich" in text and result_of(text).startswith("Doc 1 (Title: Zürich title 1)")


def test_no_passages_is_said_and_is_no_error(service):
    service.mode = "empty"
    text, _, metrics = call(make_tool(service.url), {"query_list": ["nothing"]})
    assert result_of(text) == "No search results found." and metrics["api_errors"] == 0.0


@pytest.mark.parametrize("status", [500, 503])
def test_a_server_error_is_retried_then_answered_as_a_failure(service, status):
    service.mode = status
    text, reward, metrics = call(make_tool(service.url, **FAST_RETRIES), {"query_list": ["q"]})
    assert len(service.requests) == 3  # max_retries attempts
    assert result_of(text).startswith(f"Search error: the retrieval service did not answer: HTTP {status}")
    assert "(attempt 3 of 3)" in text
    assert reward == 0.0 and metrics == {"query_count": 1.0, "total_results": 0.0, "api_errors": 1.0}


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_a_timeout_is_retried_then_answered_as_a_failure(service):
    service.mode = "slow"
    started = time.perf_counter()
    # Without cluster slots: with Ray up in this worker, starting the slots actor can take most of
    # the call's 1.63 s (its timeout_s) before the first attempt, leaving no time for the third.
    tool = make_tool(service.url, timeout=0.2, enable_global_rate_limit=False, **FAST_RETRIES)
    text, _, metrics = call(tool, {"query_list": ["q"]})
    assert time.perf_counter() - started < 1.9  # three attempts of 0.2 s, not one slow answer
    assert result_of(text) == "Search error: the retrieval service did not answer: timed out (attempt 3 of 3)"
    assert metrics["api_errors"] == 1.0


def test_an_unreachable_service_is_answered_as_a_failure(service):
    url = service.url
    service.close()
    text, _, metrics = call(make_tool(url, **FAST_RETRIES), {"query_list": ["q"]})
    assert result_of(text) == "Search error: the retrieval service did not answer: connection refused (attempt 3 of 3)"
    assert metrics["api_errors"] == 1.0


@pytest.mark.parametrize("mode, message", [(404, "refused the request: HTTP 404"), ("not-json", "is not JSON")])
def test_a_client_error_or_an_answer_that_is_not_json_is_not_retried(service, mode, message):
    service.mode = mode
    text, _, metrics = call(make_tool(service.url, **FAST_RETRIES), {"query_list": ["q"]})
    assert len(service.requests) == 1 and message in result_of(text) and metrics["api_errors"] == 1.0


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_the_call_stops_retrying_at_its_time_budget(service):
    service.mode = 500
    # No cluster-wide slots: the budget starts before a slot is taken, and making the slots' Ray actor
    # (when the worker runs Ray) took 0.9 s of a 1.5 s budget on a loaded CI machine.
    tool = make_tool(service.url, max_retries=10, retry_delay_s=1.0, timeout_s=2.0, enable_global_rate_limit=False)
    started = time.perf_counter()
    text, _, _ = call(tool, {"query_list": ["q"]})
    # Waits 1 s, then the next wait (2 s) is past the budget: it answers at about 1 s instead of sleeping
    # to 3 s and trying a third time (the margin is for a loaded machine).
    assert len(service.requests) == 2 and time.perf_counter() - started < 2.9
    assert "(attempt 2 of 10)" in text


@pytest.mark.parametrize("parameters", [{}, {"query_list": []}, {"query_list": "one string"}])
def test_a_call_without_a_list_of_queries_is_told_so_without_a_request(service, parameters):
    text, _, metrics = call(make_tool(service.url), parameters)
    assert result_of(text) == "Error: query_list must be a non-empty list of query strings."
    assert service.requests == [] and metrics == {}


def test_the_loops_bound_on_a_call_defaults_to_the_worst_case_of_the_retries():
    # verl's defaults: 10 attempts of 30 s and waits of 1..9 s; a user's timeout_s is kept.
    assert make_tool("http://127.0.0.1:1/retrieve").config["timeout_s"] == 10 * 30 + 45 + 1
    assert make_tool("http://127.0.0.1:1/retrieve", timeout_s=5).config["timeout_s"] == 5


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_in_flight_requests_are_limited_by_rate_limit_within_a_process(service):
    service.delay_s = 0.1

    async def three_calls(tool):
        instance = await tool.create()
        return await asyncio.gather(*(tool.execute(instance, {"query_list": [f"q{i}"]}) for i in range(3)))

    limited = make_tool(service.url, num_workers=4, rate_limit=1)
    asyncio.run(three_calls(limited))
    assert service.peak == 1
    service.peak = 0
    unlimited = make_tool(service.url, num_workers=4, rate_limit=1, enable_global_rate_limit=False)
    asyncio.run(three_calls(unlimited))
    assert service.peak == 3


def test_verls_tool_yaml_loads_and_a_bad_config_is_one_clear_error(tmp_path):
    config = tmp_path / "search_tool_config.yaml"
    config.write_text(
        "tools:\n  - class_name: core_v1.agent_loop.tools.search.SearchTool\n    config:\n"
        "      retrieval_service_url: http://127.0.0.1:8000/retrieve\n      num_workers: 120\n"
        "      rate_limit: 120\n      timeout: 30\n      type: native\n    tool_schema:\n"
        "      type: function\n      function:\n        name: search\n        parameters:\n"
        "          type: object\n          properties:\n            query_list:\n"
        "              type: array\n              item: {type: string}\n"
        "          required: [query_list]\n"
    )
    [tool] = initialize_tools_from_config(config)
    assert tool.name == "search" and tool.search_config == SearchConfig(
        "http://127.0.0.1:8000/retrieve", topk=3, timeout=30, num_workers=120, rate_limit=120
    )
    # verl's schema spells `item`, not `items`: kept as written, for the chat template to show.
    assert tool.tool_schema.model_dump()["function"]["parameters"]["properties"]["query_list"]["item"] == {
        "type": "string"
    }
    config.write_text(
        "tools:\n  - class_name: core_v1.agent_loop.tools.search.SearchTool\n    config: {type: native}\n"
    )
    with pytest.raises(ToolConfigError, match=r"tools\[0\]: SearchTool needs config.retrieval_service_url"):
        initialize_tools_from_config(config)
    with pytest.raises(ToolConfigError, match="config.topk must be an int >= 1"):
        make_tool("http://127.0.0.1:8000/retrieve", topk=0)


def test_the_tool_agent_loop_calls_the_search_tool_and_counts_its_failures(service):
    from tests.core_v1.agent_loop.scripted_llm import converse_with_tool

    call_text = '<tool_call>{"name": "search", "arguments": {"query_list": ["Nile"]}}</tool_call>'

    def converse(tool: SearchTool) -> tuple[str, dict, str]:
        observation, output = converse_with_tool(tool, call_text, "Where is the Nile?")
        return observation, output.metrics, output.extra_fields["stop_reason"]

    observation, metrics, stop_reason = converse(make_tool(service.url, topk=1))
    assert (
        "<|im_start|>tool\n" + json.dumps({"result": "Doc 1 (Title: Nile title 1)\nNile text 1\nmore 1"}) in observation
    )
    assert metrics["search/total_results"] == 1.0 and metrics["search/api_errors"] == 0.0

    service.mode = 500
    observation, metrics, stop_reason = converse(make_tool(service.url, **FAST_RETRIES))
    assert "Search error: the retrieval service did not answer: HTTP 500" in observation
    assert metrics["search/api_errors"] == 1.0 and metrics["tool_errors"] == 0.0 and stop_reason == "no_tool_call"


@pytest.mark.serial  # timing-bound: runs alone (tests/scheduling.py)
def test_with_ray_the_limit_is_one_named_actor_shared_by_every_tool_object(service):
    from tests.conftest import local_ray

    service.delay_s = 0.1

    async def calls_from_two_processes():
        # Two tool objects stand for two agent-loop workers: each has its own threads, the slots are shared.
        tools = [make_tool(service.url, num_workers=2, rate_limit=1) for _ in range(2)]
        instances = [await tool.create() for tool in tools]
        results = await asyncio.gather(
            *(
                tool.execute(instance, {"query_list": [f"q{i}"]})
                for tool, instance in zip(tools, instances)
                for i in range(2)
            )
        )
        # Looked up while the tools still hold it: a named actor goes with its last handle.
        assert ray.get_actor(f"rlbridge-search-slots:{service.url}") is not None
        return results

    with local_ray():
        import ray

        results = asyncio.run(calls_from_two_processes())
    assert service.peak == 1 and len(service.requests) == 4
    assert all(metrics["api_errors"] == 0.0 for _, _, metrics in results)
