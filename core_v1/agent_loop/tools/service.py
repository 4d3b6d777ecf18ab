"""What tools that call an HTTP service share: one JSON POST, and a pool that bounds the calls in flight.

`SearchTool` (search.py) and `SandboxFusionTool` (sandbox_fusion.py) both send blocking HTTP
requests from the agent-loop worker's event loop, so both run them through a `CallPool`:

- at most `num_workers` calls of one process run at once, each in a thread of the pool (made on
  first use: the driver only validates a tool's config and never calls it);
- with `enable_global_rate_limit`, at most `rate_limit` calls run at once across every agent-loop
  worker of the Ray cluster: a named Ray actor (`SlotsActor`, one per `slots_name`, created by the
  first process that asks and found by the others) hands out the slots; without Ray the limit holds
  within the process; with `enable_global_rate_limit: false` there is none.

`post_json` sends one request and sorts what can go wrong into `ServiceError`s the caller can
retry or report: `status` set for an HTTP error, `network` for a refused connection or a timeout.
"""

from __future__ import annotations

import asyncio
import functools
import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Optional, TypeVar

from core_v1.agent_loop.tools.base_tool import ToolConfigError

T = TypeVar("T")


class ServiceToolConfig:
    """Base of a service tool's validated `config:` dataclass: built from the tool YAML's mapping
    (absent or null fields keep their defaults), checked with the helpers below."""

    @classmethod
    def from_tool_config(cls, config: dict):
        return cls(**{name: config[name] for name in cls.__dataclass_fields__ if config.get(name) is not None})

    def check_url(self, tool: str, key: str, what: str) -> None:
        url = getattr(self, key)
        if not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ToolConfigError(f"{tool} needs config.{key}, an http:// or https:// URL of {what}, got {url!r}")

    def check_counts(self, tool: str, *names: str) -> None:
        for name in names:
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ToolConfigError(f"{tool} config.{name} must be an int >= 1, got {value!r}")

    def check_seconds(self, tool: str, name: str, allow_zero: bool = False) -> None:
        value = getattr(self, name)
        if not (isinstance(value, (int, float)) and (value >= 0 if allow_zero else value > 0)):
            raise ToolConfigError(
                f"{tool} config.{name} must be {'>=' if allow_zero else '>'} 0 seconds, got {value!r}"
            )


class ServiceError(Exception):
    """One request that failed: `status` is the HTTP status when the service answered with an
    error, `network` is true when it could not be reached or did not answer in time."""

    def __init__(self, message: str, status: Optional[int] = None, network: bool = False):
        super().__init__(message)
        self.status, self.network = status, network


def post_json(url: str, payload: Any, timeout: float, service: str = "the service") -> Any:
    """POST `payload` as JSON and decode the JSON answer; `service` names it in error messages."""
    request = urllib.request.Request(
        url,
        data=json.dumps(payload).encode("utf-8"),
        method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as error:
        raise ServiceError(f"HTTP {error.code} {error.reason}", status=error.code) from None
    except urllib.error.URLError as error:
        raise ServiceError(describe_network_error(error.reason), network=True) from None
    except (TimeoutError, ConnectionError) as error:
        raise ServiceError(describe_network_error(error), network=True) from None
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ServiceError(f"{service}'s answer is not JSON ({error}): {body[:200]!r}") from None


def describe_network_error(reason: Any) -> str:
    if isinstance(reason, TimeoutError):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    return str(reason) or type(reason).__name__


class _LocalSlots:
    """The in-flight limit within one process (no Ray cluster to share it through)."""

    def __init__(self, slots: int):
        self._semaphore = threading.BoundedSemaphore(slots)

    def acquire(self) -> None:
        self._semaphore.acquire()

    def release(self) -> None:
        self._semaphore.release()


class SlotsActor:
    """The Ray actor behind `_ClusterSlots`: a semaphore that callers in other processes wait on."""

    def __init__(self, slots: int):
        self._semaphore = asyncio.Semaphore(slots)

    async def acquire(self) -> None:
        await self._semaphore.acquire()

    async def release(self) -> None:
        self._semaphore.release()


class _ClusterSlots:
    """The in-flight limit across the Ray cluster: one named actor shared by every process (the
    first to create it sets the number of slots)."""

    # Handles this process created or found, per (cluster node, name). A named actor that is not
    # detached dies when its creator's last handle goes, even while other processes use it by name
    # (a second tool of the same URL then failed with ActorDiedError), so the process keeps them.
    _actors: dict[tuple[str, str], Any] = {}
    _actors_lock = threading.Lock()

    def __init__(self, name: str, slots: int):
        import ray

        self._ray, self._name, self._slots = ray, name, slots

    def _actor(self, fresh: bool = False) -> Any:
        key = (self._ray.get_runtime_context().get_node_id(), self._name)
        with self._actors_lock:
            if fresh or key not in self._actors:
                self._actors[key] = (
                    self._ray.remote(SlotsActor)
                    .options(name=self._name, get_if_exists=True, num_cpus=0)
                    .remote(self._slots)
                )
            return self._actors[key]

    def acquire(self) -> None:
        try:
            self._ray.get(self._actor().acquire.remote())
        except self._ray.exceptions.ActorDiedError:
            # Its creator's process ended: the next process to ask makes a new one.
            self._ray.get(self._actor(fresh=True).acquire.remote())

    def release(self) -> None:
        self._actor().release.remote()


class CallPool:
    """Runs blocking calls in threads under the two limits of the module docstring."""

    def __init__(
        self,
        slots_name: str,
        num_workers: int,
        rate_limit: int,
        enable_global_rate_limit: bool,
        thread_name_prefix: str = "tool-call",
    ):
        self.slots_name, self.num_workers, self.rate_limit = slots_name, num_workers, rate_limit
        self.enable_global_rate_limit = enable_global_rate_limit
        self._thread_name_prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._pool: Optional[ThreadPoolExecutor] = None
        self._slots: Any = None

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in a pool thread, inside a slot; its exception is raised here."""
        return await asyncio.wrap_future(self.submit(fn, *args, **kwargs))

    def submit(self, fn: Callable[..., T], *args: Any, **kwargs: Any):
        """Start the call now; a `concurrent.futures.Future` of its result."""
        return self.executor().submit(functools.partial(self._in_slot, fn, args, kwargs))

    def _in_slot(self, fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
        slots = self._rate_limit()
        if slots is None:
            return fn(*args, **kwargs)
        slots.acquire()
        try:
            return fn(*args, **kwargs)
        finally:
            slots.release()

    def executor(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.num_workers, thread_name_prefix=self._thread_name_prefix)
            return self._pool

    def _rate_limit(self) -> Any:
        if not self.enable_global_rate_limit:
            return None
        with self._lock:
            if self._slots is None:
                import ray

                self._slots = (
                    _ClusterSlots(self.slots_name, self.rate_limit)
                    if ray.is_initialized()
                    else _LocalSlots(self.rate_limit)
                )
            return self._slots
