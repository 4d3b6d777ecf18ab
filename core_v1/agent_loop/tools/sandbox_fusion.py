"""`SandboxFusionTool`: the model's code runs in a Sandbox Fusion service and the model reads its output.

verl's ReTool recipe and the projects built on it name `verl.tools.sandbox_fusion_tools.
SandboxFusionTool` and subclass it (a custom `execute` that cleans the code up, then
`await self.execution_pool.execute.remote(self.execute_code, instance_id, code, timeout,
language)`). This is the same tool for the `tool_agent` loop, with verl's config fields,
attributes, request and answer text, so that such a subclass and its tool YAML run unchanged once
`verl.*` names are served (`shims/verl_imports.py`) or rewritten (`python -m codemods.migrate`).

Config (the tool YAML's `config:`):

- `sandbox_fusion_url` (required): the service's `run_code` endpoint, e.g.
  `http://localhost:8080/run_code`;
- `default_timeout` (30): seconds the code may compile and then run, when the call gives no
  `timeout`; `default_language` ("python"): when the call gives no `language`;
- `memory_limit_mb` (1024): the run's memory limit, sent to the service;
- `num_workers` (10): calls of one process in flight at once (a thread each);
- `rate_limit` (10): calls in flight at once across every agent-loop worker of the Ray cluster,
  through one named Ray actor per URL, when `enable_global_rate_limit` (true) holds; without Ray
  the limit holds within the process; with `enable_global_rate_limit: false` there is none (the
  pool is `service.CallPool`, shared with `SearchTool`);
- `max_retries` (3) and `retry_delay_s` (1): not verl keys (verl fixes these values): attempts when
  the service answers 504 Gateway Timeout (the only answer verl tries again), and the wait after
  attempt k (`k * retry_delay_s`);
- `timeout_s`: the loop's bound on one call (see `BaseTool`); by default the worst case of the
  attempts at `default_timeout` plus a second, so that the tool, not the loop, answers.

Request. One call is one POST of `{"code", "language", "compile_timeout": timeout, "run_timeout":
timeout, "memory_limit_MB", "stdin": null, "files": {}, "fetch_files": []}`, waiting at most
`2 * timeout + 10` s; the service answers `{"status": "Success" | "Failed" | "SandboxError",
"message", "compile_result", "run_result": {"status": "Finished" | "TimeLimitExceeded" | ...,
"return_code", "stdout", "stderr", ...}}`.

Answer. The model reads what verl shows it when the run finished: stdout then stderr, as they are
(a traceback included, with the exit code not shown). Where verl answers every other case with
"no stdout here", this tool says what happened, and counts it in the call's metrics (summed per
trajectory as `<tool name>/<count>` by the loop, reported as `agent/<tool name>/<count>/mean`):

- the run passed its time limit: its partial output, then `Error: the code did not finish within
  T s.` (`timeouts`);
- it did not compile: `Error: the code did not compile:` and the compiler's output (`run_errors`,
  which also counts a finished run whose exit code is not 0);
- the service could not be reached, timed out, kept answering 504, answered another HTTP error,
  something that is not its JSON, or `SandboxError`: `Error: the code sandbox failed: ...`
  (`api_errors`); an unsupported language is said without a request (`run_errors`).

A call never raises for these: it is answered, logged (the first failure as a warning) and counted.
A subclass whose `execute` returns no metrics (verl's ReTool returns `None`) still gets the counts
of the `execute_code` calls it made: they are added to what its `execute` returns.

Departures from verl: `execution_pool` (like the pool verl's `init_execution_pool(num_workers,
enable_global_rate_limit, rate_limit, mode)` gives tools that keep their own) is a pool of threads
in the agent-loop worker rather than a Ray actor (its `execute.remote(fn, *args)` starts the call
at once and returns an awaitable, as Ray's does; `ray.get` of it is not supported: `await` it); an
exception raised by `fn` reaches the caller (verl logs it and returns None), and the tool session
answers the model with it; `calc_reward` is 0.0 (verl returns an empty list, which is no reward).

Network: as for every `BaseTool`, the calls leave from the agent-loop worker, not from the
function-tool sandbox, so `multi_turn.tool_sandbox.network=false` does not apply to this tool.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable, Optional
from uuid import uuid4

from core_v1.agent_loop.tools.base_tool import BaseTool, ToolConfigError
from core_v1.agent_loop.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from core_v1.agent_loop.tools.service import CallPool, ServiceError, ServiceToolConfig, post_json
from core_v1.utils.rollout_trace import rollout_trace_op

logger = logging.getLogger(__name__)

# The languages Sandbox Fusion runs (verl's list); a call naming another is answered without a request.
SUPPORTED_LANGUAGES = (
    "python",
    "cpp",
    "nodejs",
    "go",
    "go_test",
    "java",
    "php",
    "csharp",
    "bash",
    "typescript",
    "sql",
    "rust",
    "cuda",
    "lua",
    "R",
    "perl",
    "D_ut",
    "ruby",
    "scala",
    "julia",
    "pytest",
    "junit",
    "kotlin_script",
    "jest",
    "verilog",
    "python_gpu",
    "lean",
    "swift",
    "racket",
)
RETRIED_STATUSES = frozenset({504})
HTTP_MARGIN_S = 10.0  # the HTTP wait beyond compile and run time (verl's)
COUNTS = ("api_errors", "timeouts", "run_errors")


@dataclass(frozen=True)
class SandboxFusionConfig(ServiceToolConfig):
    """The tool's `config:` mapping, validated (see the module docstring for each field)."""

    sandbox_fusion_url: Optional[str] = None
    num_workers: int = 10
    rate_limit: int = 10
    enable_global_rate_limit: bool = True
    default_timeout: float = 30.0
    default_language: str = "python"
    memory_limit_mb: int = 1024
    max_retries: int = 3
    retry_delay_s: float = 1.0

    def __post_init__(self) -> None:
        tool = "SandboxFusionTool"
        self.check_url(
            tool, "sandbox_fusion_url", "the sandbox's run_code endpoint (e.g. http://localhost:8080/run_code)"
        )
        self.check_counts(tool, "num_workers", "rate_limit", "max_retries", "memory_limit_mb")
        self.check_seconds(tool, "default_timeout")
        self.check_seconds(tool, "retry_delay_s", allow_zero=True)
        if self.default_language not in SUPPORTED_LANGUAGES:
            raise ToolConfigError(
                f"{tool} config.default_language {self.default_language!r} is not one "
                f"the sandbox runs: {', '.join(SUPPORTED_LANGUAGES)}"
            )

    def worst_case_s(self, timeout: float) -> float:
        """How long one call of `timeout` takes when every attempt gets a 504 at the last moment."""
        waits = self.retry_delay_s * sum(range(1, self.max_retries))
        return self.max_retries * (2 * timeout + HTTP_MARGIN_S) + waits


@dataclass(frozen=True)
class RunOutcome:
    """One call's answer to the model, and which count (if any) it adds to."""

    text: str
    count: Optional[str] = None
    """One of `COUNTS`, or None for a run that finished with exit code 0."""
    error: Optional[str] = None
    """Why the service failed (for the log), when it did."""


def run_code(config: SandboxFusionConfig, code: str, timeout: float, language: str) -> RunOutcome:
    """Run `code` in the sandbox (retrying 504s) and turn its answer into the model's text."""
    if language not in SUPPORTED_LANGUAGES:
        return RunOutcome(
            f"Error: the code sandbox does not run {language!r}; languages: {', '.join(SUPPORTED_LANGUAGES)}.",
            "run_errors",
        )
    reply, error = request_run(config, code, timeout, language)
    if error is not None:
        return RunOutcome(f"Error: the code sandbox failed: {error}", "api_errors", error)
    return _outcome_of(reply, timeout)


def request_run(
    config: SandboxFusionConfig, code: str, timeout: float, language: str, stdin: Optional[str] = None
) -> tuple[Optional[dict], Optional[str]]:
    """One `run_code` request (504s retried): `(the service's answer, None)`, or `(None, why it
    failed)` when it could not be reached, did not answer JSON, or answered `SandboxError`. The
    code scorer (`core_v1.reward.scorers.sandbox_fusion`) sends its test cases' stdin through it."""
    payload = {
        "compile_timeout": timeout,
        "run_timeout": timeout,
        "code": code,
        "stdin": stdin,
        "memory_limit_MB": config.memory_limit_mb,
        "language": language,
        "files": {},
        "fetch_files": [],
    }
    reply, error = _post_with_retries(config, payload, 2 * timeout + HTTP_MARGIN_S)
    if error is None and not isinstance(reply, dict):
        error = f"the answer is not a JSON object: {str(reply)[:200]}"
    if error is None and reply.get("status") == "SandboxError":
        error = f"SandboxError: {reply.get('message') or 'no message'}"
    return (None, error) if error is not None else (reply, None)


def _outcome_of(reply: dict, timeout: float) -> RunOutcome:
    compiled, run = reply.get("compile_result") or {}, reply.get("run_result") or {}
    if compiled.get("status") == "TimeLimitExceeded":
        return RunOutcome(f"Error: the code did not compile within {timeout:g} s.", "timeouts")
    if compiled.get("status") == "Error" or (compiled.get("status") == "Finished" and compiled.get("return_code")):
        output = (compiled.get("stdout") or "") + (compiled.get("stderr") or "")
        return RunOutcome(f"Error: the code did not compile:\n{output}", "run_errors")
    output = (run.get("stdout") or "") + (run.get("stderr") or "")
    status = run.get("status")
    if status == "Finished":
        return RunOutcome(output, "run_errors" if run.get("return_code") else None)
    if status == "TimeLimitExceeded":
        return RunOutcome(f"{output}Error: the code did not finish within {timeout:g} s.", "timeouts")
    if not run:
        error = f"the answer has no run_result (status {reply.get('status')!r}, message {reply.get('message')!r})"
        return RunOutcome(f"Error: the code sandbox failed: {error}", "api_errors", error)
    return RunOutcome(f"{output}Error: the code sandbox could not run the code (run status {status!r}).", "run_errors")


def _post_with_retries(config: SandboxFusionConfig, payload: dict, timeout: float) -> tuple[Any, Optional[str]]:
    """(decoded JSON answer, None) or (None, why it failed)."""
    url = config.sandbox_fusion_url
    for attempt in range(1, config.max_retries + 1):
        try:
            return post_json(url, payload, timeout, service="the sandbox"), None
        except ServiceError as error:
            if error.status not in RETRIED_STATUSES:
                return None, f"{url}: {error}"
            if attempt == config.max_retries:
                return None, f"{url}: {error} (attempt {attempt} of {config.max_retries})"
        time.sleep(config.retry_delay_s * attempt)
    raise AssertionError("unreachable: the last attempt returns")


class _RemoteMethod:
    """`execution_pool.execute`: `.remote(fn, *args, **kwargs)` starts `fn` in the pool now."""

    def __init__(self, pool: CallPool):
        self._pool = pool

    def remote(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> "PendingCall":
        return PendingCall(self._pool.submit(fn, *args, **kwargs))


class PendingCall:
    """A call started in the pool: `await` it for `fn`'s result (or its exception)."""

    def __init__(self, future: Any):
        self.future = future

    def __await__(self):
        return asyncio.wrap_future(self.future).__await__()


class ExecutionPool:
    """verl's `execution_pool` shape over `CallPool`: `await pool.execute.remote(fn, *args)`."""

    def __init__(self, pool: CallPool):
        self.pool = pool
        self.execute = _RemoteMethod(pool)

    def ping(self) -> bool:
        return True


class PoolMode(enum.Enum):
    """verl's pool kinds; only threads exist (in verl too)."""

    ThreadMode = 1
    ProcessMode = 2


def init_execution_pool(
    num_workers: int,
    enable_global_rate_limit: bool = True,
    rate_limit: int = 10,
    mode: PoolMode = PoolMode.ThreadMode,
    slots_name: str = "rlbridge-execution-pool-slots",
) -> ExecutionPool:
    """verl's helper for tools that keep their own pool: `num_workers` threads of this process,
    `rate_limit` calls in flight across the cluster (one named actor per `slots_name`; verl shares
    one for every such pool, as the default here does)."""
    if mode != PoolMode.ThreadMode:
        raise NotImplementedError(f"execution pool mode {mode}: only PoolMode.ThreadMode is implemented (as in verl)")
    return ExecutionPool(
        CallPool(slots_name, num_workers, rate_limit, enable_global_rate_limit, thread_name_prefix="execution-pool")
    )


class SandboxFusionTool(BaseTool):
    """Runs the model's code in a Sandbox Fusion service (see the module docstring)."""

    def __init__(self, config: Optional[dict] = None, tool_schema: OpenAIFunctionToolSchema | dict | None = None):
        super().__init__(config, tool_schema)
        settings = self.sandbox_config = SandboxFusionConfig.from_tool_config(self.config)
        # verl's attributes, which subclasses read.
        self.sandbox_fusion_url = settings.sandbox_fusion_url
        self.num_workers, self.rate_limit = settings.num_workers, settings.rate_limit
        self.enable_global_rate_limit = settings.enable_global_rate_limit
        self.default_timeout, self.default_language = settings.default_timeout, settings.default_language
        self.memory_limit_mb = settings.memory_limit_mb
        self.execution_pool = init_execution_pool(
            settings.num_workers,
            settings.enable_global_rate_limit,
            settings.rate_limit,
            slots_name=f"rlbridge-sandbox-fusion-slots:{settings.sandbox_fusion_url}",
        )
        self.config.setdefault("timeout_s", settings.worst_case_s(settings.default_timeout) + 1.0)
        self._instance_dict: dict[str, dict] = {}
        self._counts: dict[str, Counter] = {}
        self._counts_lock = threading.Lock()
        self._warned = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "execute" in cls.__dict__:
            cls.execute = _with_counts(cls.__dict__["execute"])

    def default_tool_schema(self) -> OpenAIFunctionToolSchema:
        return OpenAIFunctionToolSchema.model_validate(
            {
                "type": "function",
                "function": {
                    "name": "code_interpreter",
                    "description": "A tool for executing code.",
                    "parameters": {
                        "type": "object",
                        "required": ["code"],
                        "properties": {"code": {"type": "string", "description": "The code to execute."}},
                    },
                },
            }
        )

    async def create(
        self, instance_id: Optional[str] = None, ground_truth: Optional[str] = None, **kwargs: Any
    ) -> tuple[str, ToolResponse]:
        instance_id = instance_id if instance_id is not None else str(uuid4())
        self._instance_dict[instance_id] = {"response": "", "ground_truth": ground_truth, "reward": []}
        return instance_id, ToolResponse()

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        code = parameters.get("code", "")
        timeout = parameters.get("timeout", self.default_timeout)
        language = parameters.get("language", self.default_language)
        result = await self.execution_pool.execute.remote(self.execute_code, instance_id, str(code), timeout, language)
        response = (
            result if isinstance(result, ToolResponse) else ToolResponse(text=None if result is None else str(result))
        )
        return response, 0.0, self.take_counts(instance_id)

    def execute_code(self, instance_id: str, code: str, timeout: Any = 30, language: Any = "python") -> ToolResponse:
        """Run `code` (blocking: call it through `execution_pool`); the model's text as a ToolResponse.
        A `timeout` that is not a positive number is `default_timeout`."""
        try:
            seconds = float(timeout)
        except (TypeError, ValueError):
            seconds = float(self.default_timeout)
        seconds = seconds if seconds > 0 else float(self.default_timeout)
        outcome = run_code(self.sandbox_config, str(code), seconds, str(language))
        self._count(instance_id, outcome)
        return ToolResponse(text=outcome.text)

    def take_counts(self, instance_id: str) -> dict[str, float]:
        """The counts of the `execute_code` calls of this instance since the last take (0.0 for none)."""
        with self._counts_lock:
            counts = self._counts.pop(instance_id, Counter())
        return {name: float(counts[name]) for name in COUNTS}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instance_dict.pop(instance_id, None)
        with self._counts_lock:
            self._counts.pop(instance_id, None)

    def _count(self, instance_id: str, outcome: RunOutcome) -> None:
        with self._counts_lock:
            counts = self._counts.setdefault(instance_id, Counter())
            if outcome.count is not None:
                counts[outcome.count] += 1
        if outcome.error is not None:
            if not self._warned:
                self._warned = True
                logger.warning(
                    "sandbox fusion tool: %s (the model is told; later failures are logged at debug level "
                    "and counted in the agent metrics as %s/api_errors)",
                    outcome.error,
                    self.name,
                )
            else:
                logger.debug("sandbox fusion tool: %s", outcome.error)


def _with_counts(execute: Callable[..., Any]) -> Callable[..., Any]:
    """A subclass's `execute`, with the counts its `execute_code` calls left added to its metrics."""

    @functools.wraps(execute)
    async def execute_with_counts(
        self: SandboxFusionTool, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[Any, Any, dict]:
        response, reward, metrics = await execute(self, instance_id, parameters, **kwargs)
        counts = self.take_counts(instance_id)
        own = dict(metrics or {})
        return response, reward, {**{k: v + float(own.pop(k, 0.0) or 0.0) for k, v in counts.items()}, **own}

    return execute_with_counts
