"""`SearchTool`: the model sends queries to a retrieval HTTP service and reads the passages found.

verl's Search-R1 examples name `verl.tools.search_tool.SearchTool`; this is the same tool for the
`tool_agent` loop, with the same config fields, request, answer format and retry policy, so their
tool config works once `class_name` names this class (the rename table and
`python -m codemods.migrate` write it).

Config (the tool YAML's `config:`):

- `retrieval_service_url` (required): where to POST, e.g. `http://127.0.0.1:8000/retrieve`;
- `topk` (3): passages asked for per query;
- `timeout` (30): seconds one HTTP request may take;
- `num_workers` (120): requests of one process in flight at once (a thread each);
- `rate_limit` (120): requests in flight at once across every agent-loop worker of the Ray
  cluster, through one named Ray actor, when `enable_global_rate_limit` (true) holds; without Ray
  the limit holds within the process; with `enable_global_rate_limit: false` there is none (both
  limits are `service.CallPool`'s, which `SandboxFusionTool` shares);
- `max_retries` (10) and `retry_delay_s` (1): not verl keys (verl fixes these values): attempts per
  call, and the wait after attempt k (`k * retry_delay_s`);
- `timeout_s`: the loop's bound on one call (see `BaseTool`); by default the worst case of the
  attempts above plus a second, so that the tool, not the loop, answers a call that fails. A
  shorter one also stops the attempts (the loop then answers `did not answer within ... s` and
  counts a `tool_timeouts`).

Request and answer. One call is one POST of `{"queries": query_list, "topk": topk,
"return_scores": true}`; the service answers `{"result": [[{"document": {"contents": "Title\\n
text..."}, "score": ...}, ...], ...]}`, one list of passages per query. The model reads a JSON
object `{"result": "..."}` whose text is, per query, `Doc i (Title: <first line>)\\n<rest>`
passages separated by blank lines, and queries separated by `\\n---\\n` (verl's format, which
Search-R1 prompts train on); `"No search results found."` when every list is empty; and
`"Search error: ..."` when the service cannot be reached, keeps failing or answers something else.
A refused connection, a timeout and HTTP 500/502/503/504 are retried; another HTTP error and an
answer that is not JSON are not. A failed call never raises: it is answered, logged (the first
one as a warning) and counted in the call's metrics (`api_errors`, beside `query_count` and
`total_results`), which the loop sums per trajectory as `search/api_errors` (the tool's name
first) and the trainer reports as `agent/search/api_errors/mean`.

The tool gives no reward: `calc_reward` is 0.0 (verl returns the list of texts found, which is not
a number; the answer is scored by the `search_r1_like_qa_em` reward scorer).

Network: `BaseTool` subclasses run in the agent-loop worker, not in the function-tool sandbox, so
`multi_turn.tool_sandbox.network=false` does not apply to this tool: it reaches the service as the
worker process does (the usual `http_proxy` / `no_proxy` variables apply).
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Optional

from core_v1.agent_loop.tools.base_tool import BaseTool
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from core_v1.agent_loop.tools.service import CallPool, ServiceError, ServiceToolConfig, post_json

logger = logging.getLogger(__name__)

RETRIED_STATUSES = frozenset({500, 502, 503, 504})


@dataclass(frozen=True)
class SearchConfig(ServiceToolConfig):
    """The tool's `config:` mapping, validated (see the module docstring for each field)."""

    retrieval_service_url: Optional[str] = None
    topk: int = 3
    timeout: float = 30.0
    num_workers: int = 120
    rate_limit: int = 120
    enable_global_rate_limit: bool = True
    max_retries: int = 10
    retry_delay_s: float = 1.0

    def __post_init__(self) -> None:
        self.check_url(
            "SearchTool", "retrieval_service_url", "the retrieval service (e.g. http://127.0.0.1:8000/retrieve)"
        )
        self.check_counts("SearchTool", "topk", "num_workers", "rate_limit", "max_retries")
        self.check_seconds("SearchTool", "timeout")
        self.check_seconds("SearchTool", "retry_delay_s", allow_zero=True)

    @property
    def worst_case_s(self) -> float:
        """How long one call takes when every attempt times out."""
        waits = self.retry_delay_s * sum(range(1, self.max_retries))
        return self.max_retries * self.timeout + waits


@dataclass(frozen=True)
class SearchOutcome:
    """One call's answer to the model and its counts."""

    text: str
    query_count: int
    total_results: int = 0
    error: Optional[str] = None

    def metrics(self) -> dict[str, float]:
        return {
            "query_count": float(self.query_count),
            "total_results": float(self.total_results),
            "api_errors": float(self.error is not None),
        }


def format_passages(passages: list[dict]) -> str:
    """One query's passages as the model reads them: `Doc i (Title: ...)` then the text."""
    blocks = []
    for number, passage in enumerate(passages, start=1):
        title, _, body = passage["document"]["contents"].partition("\n")
        blocks.append(f"Doc {number} (Title: {title})\n{body}")
    return "\n\n".join(blocks).strip()


def answer_text(message: str) -> str:
    """The tool's response: verl's `{"result": ...}` JSON object, non-ASCII kept as is."""
    return json.dumps({"result": message}, ensure_ascii=False)


def search(config: SearchConfig, queries: list[str], deadline: Optional[float] = None) -> SearchOutcome:
    """POST the queries (with retries, stopping at the `time.monotonic()` deadline) and format the answer."""
    reply, error = _post_with_retries(
        config, {"queries": queries, "topk": config.topk, "return_scores": True}, deadline
    )
    if error is not None:
        return SearchOutcome(answer_text(f"Search error: {error}"), len(queries), error=error)
    try:
        per_query = reply["result"]
        formatted = [format_passages(passages) for passages in per_query]
        total = sum(len(passages) for passages in per_query)
    except (KeyError, TypeError, AttributeError) as cause:
        error = f"the retrieval service's answer is not a list of passages per query ({type(cause).__name__}: {cause})"
        return SearchOutcome(answer_text(f"Search error: {error}"), len(queries), error=error)
    if total == 0:
        return SearchOutcome(answer_text("No search results found."), len(queries))
    return SearchOutcome(answer_text("\n---\n".join(formatted)), len(queries), total_results=total)


def _post_with_retries(config: SearchConfig, payload: dict, deadline: Optional[float]) -> tuple[Any, Optional[str]]:
    """(decoded JSON answer, None) or (None, why it failed)."""
    deadline = time.monotonic() + config.worst_case_s if deadline is None else deadline
    last_error = "no attempt was made before the call's time ran out"
    for attempt in range(1, config.max_retries + 1):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            return post_json(
                config.retrieval_service_url, payload, min(config.timeout, remaining), service="the retrieval service"
            ), None
        except ServiceError as error:
            if not (error.network or error.status in RETRIED_STATUSES):  # trying again will not help
                refused = error.status is not None
                return None, f"the retrieval service refused the request: {error}" if refused else str(error)
            last_error = f"{error} (attempt {attempt} of {config.max_retries})"
        wait = config.retry_delay_s * attempt
        if attempt == config.max_retries or time.monotonic() + wait >= deadline:
            break
        time.sleep(wait)
    return None, f"the retrieval service did not answer: {last_error}"


class SearchTool(BaseTool):
    """Queries a retrieval service (see the module docstring)."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        self.search_config = SearchConfig.from_tool_config(self.config)
        self.config.setdefault("timeout_s", self.search_config.worst_case_s + 1.0)
        settings = self.search_config
        self._pool = CallPool(
            f"rlbridge-search-slots:{settings.retrieval_service_url}",
            settings.num_workers,
            settings.rate_limit,
            settings.enable_global_rate_limit,
            thread_name_prefix="search-tool",
        )
        self._warned = False

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "search",
                    "description": "Search for passages relevant to each query",
                    "parameters": {
                        "type": "object",
                        "required": ["query_list"],
                        "properties": {
                            "query_list": {
                                "type": "array",
                                "items": {"type": "string"},
                                "description": "Queries, each a complete question or phrase",
                            }
                        },
                    },
                },
            }
        )

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        queries = parameters.get("query_list")
        if not isinstance(queries, list) or not queries:
            text = answer_text("Error: query_list must be a non-empty list of query strings.")
            return ToolResponse(text=text), 0.0, {}
        deadline = time.monotonic() + float(self.config["timeout_s"])
        outcome = await self._pool.run(search, self.search_config, [str(q) for q in queries], deadline)
        if outcome.error is not None:
            self._log_failure(outcome.error)
        return ToolResponse(text=outcome.text), 0.0, outcome.metrics()

    def _log_failure(self, error: str) -> None:
        url = self.search_config.retrieval_service_url
        if not self._warned:
            self._warned = True
            logger.warning(
                "search tool: %s failed: %s (the model is told; later failures are logged at debug "
                "level and counted in the agent metrics as %s/api_errors)",
                url,
                error,
                self.name,
            )
        else:
            logger.debug("search tool: %s failed: %s", url, error)
