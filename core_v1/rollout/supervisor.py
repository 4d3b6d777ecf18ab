"""`ReplicaSupervisor`: brings a dead rollout replica back, or ends the run when it keeps dying.

One watch per replica (on the trainer's control loop) holds a call that never returns
(`RolloutReplica.watch`); it fails the moment the replica's process dies. Ray restarts the actor
(`RolloutReplicaGroup(max_restarts=...)`); the supervisor waits until the new process answers,
then `restore(index)` brings it to the trainer's state -- the current weights through the run's
own weight sync, then asleep or paused if the others are -- and the replica admits requests
again. Clients meanwhile resend the requests it lost (`core_v1.rollout.client`).

A replica that dies more than `max_restarts` times within `window_s` seconds, or that Ray cannot
restart, is given up on: `fail` gets a `ReplicaCrashLoopError` naming the cause found at the end
of the replica's log, and the trainer raises it at its next call (one `error:` line).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import re
import time
from typing import Any, Awaitable, Callable, Optional

from core_v1.errors import UserError

logger = logging.getLogger(__name__)

_POLL_S = 0.2
_ERROR_LINE = re.compile(r"error|exception|killed|fatal|abort|segmentation", re.IGNORECASE)


class ReplicaCrashLoopError(UserError):
    """A rollout replica kept dying (or could not be restarted); the message names the cause."""


class ReplicaSupervisor:
    """Watches `replicas` (Ray handles of `RolloutReplica` started with restarts); see the module
    docstring. `restart_seconds` lists how long each restart took, death to restored."""

    def __init__(
        self,
        replicas: list,
        restore: Callable[[int], Awaitable[None]],
        fail: Callable[[Exception], None],
        *,
        max_restarts: int,
        window_s: float,
    ):
        self.replicas = list(replicas)
        self.restore = restore
        self.fail = fail
        self.max_restarts = max_restarts
        self.window_s = window_s
        self.restart_seconds: list[float] = []
        self._deaths: list[collections.deque[float]] = [collections.deque() for _ in self.replicas]
        self._restarts_seen: list[Optional[int]] = [None] * len(self.replicas)
        self._incident_deaths = [0] * len(self.replicas)  # deaths counted since the watch saw one
        self._watches: list[Any] = []
        self._stopped = False

    def start(self, loop: Any) -> "ReplicaSupervisor":
        """Start the watches on `loop` (a `BackgroundLoop`: the one the trainer's syncs run on)."""
        self._watches = [loop.submit(self._watch(index)) for index in range(len(self.replicas))]
        return self

    def stop(self) -> None:
        """Stop watching (before the replicas are shut down, which would look like deaths)."""
        self._stopped = True
        for watch in self._watches:
            watch.cancel()

    async def _watch(self, index: int) -> None:
        from ray.exceptions import ActorUnavailableError, RayActorError

        replica = self.replicas[index]
        try:
            identity = await replica.identity.remote()
        except RayActorError:  # dead already: the watch call below fails at once and says how
            identity = {}
        self._restarts_seen[index] = await _ray_restart_count(replica)
        while not self._stopped:
            try:
                await replica.watch.remote()
            except RayActorError as death:
                if self._stopped:
                    return
                died = time.monotonic()
                cause = death_cause(identity.get("log_path"), death)
                if not isinstance(death, ActorUnavailableError):
                    return self._give_up(index, f"it died and Ray could not restart it: {cause}")
                logger.warning("rollout replica %d died (%s); restarting it", index, cause)
                identity = await self._bring_back(index, died, cause)
                if identity is None:
                    return

    async def _bring_back(self, index: int, died: float, cause: str) -> Optional[dict]:
        """Wait for Ray's restart, restore the replica; returns its new identity (None: gave up)."""
        from ray.exceptions import ActorUnavailableError, RayActorError

        replica = self.replicas[index]
        self._incident_deaths[index] = 0
        while True:
            if await self._too_many_deaths(index, cause):
                return None
            try:
                identity = await replica.identity.remote()
                break
            except ActorUnavailableError:
                await asyncio.sleep(_POLL_S)
            except RayActorError as error:
                return self._give_up(index, f"Ray could not restart it: {_first_line(error)}")
        try:
            await self.restore(index)
        except RayActorError:
            return identity  # it died again while being restored: the watch sees that death next
        except Exception as error:  # noqa: BLE001 - a replica that cannot be restored ends the run
            return self._give_up(
                index,
                f"it restarted but could not be brought to the trainer's weights: "
                f"{type(error).__name__}: {_first_line(error)}",
            )
        if await self._too_many_deaths(index, cause):
            return None
        seconds = time.monotonic() - died
        self.restart_seconds.append(seconds)
        logger.warning("rollout replica %d is back after %.1f s, on the trainer's weights", index, seconds)
        return identity

    async def _too_many_deaths(self, index: int, cause: str) -> bool:
        """Count the deaths Ray restarted the replica from since last looked (several may pass
        between two looks: one that dies while loading never answers); give up past the budget."""
        now = time.monotonic()
        deaths = self._deaths[index]
        restarts = await _ray_restart_count(self.replicas[index])
        if restarts is None:  # Ray's count unreadable: one death per death the watch saw
            new = 0 if self._incident_deaths[index] else 1
        else:
            new, self._restarts_seen[index] = restarts - (self._restarts_seen[index] or 0), restarts
        self._incident_deaths[index] += new
        deaths.extend([now] * new)
        while deaths and now - deaths[0] > self.window_s:
            deaths.popleft()
        if len(deaths) <= self.max_restarts:
            return False
        self._give_up(
            index,
            f"it died {len(deaths)} times within {self.window_s:g} s, more than "
            f"actor_rollout_ref.rollout.max_restarts={self.max_restarts}; last death: {cause}",
        )
        return True

    def _give_up(self, index: int, why: str) -> None:
        if not self._stopped:
            self.fail(ReplicaCrashLoopError(f"rollout replica {index} was given up: {why}"))


async def _ray_restart_count(replica: Any) -> Optional[int]:
    """How many times Ray has restarted `replica`'s actor, from Ray's actor table (None if it
    cannot be read). The public state API needs Ray's dashboard, which runs start without."""

    def read() -> Optional[int]:
        try:
            from ray._private import state

            return int(state.actors(actor_id=replica._actor_id.hex())["NumRestarts"])
        except Exception:  # noqa: BLE001 - a private API: any change of it means "unknown"
            return None

    return await asyncio.to_thread(read)


def death_cause(log_path: Optional[str], death: BaseException) -> str:
    """What the replica's log says killed it, with where to look."""
    from ray.exceptions import ActorUnavailableError

    line = last_error_line(log_path)
    if line:
        return f"{line} (its log: {log_path})"
    if not isinstance(death, ActorUnavailableError):  # Ray knows why (e.g. ray.kill, a failed start)
        return _first_line(death)
    where = f"its log {log_path} ends without an error" if log_path else "no log of it was found"
    return f"its process ended and {where}: it was killed from outside (a signal such as SIGKILL, or the OOM killer)"


def last_error_line(log_path: Optional[str]) -> Optional[str]:
    """The last line of `log_path` that reports an error (a traceback's last line, a fatal
    message), looking also where Ray's log monitor moves a dead worker's log (`old/`)."""
    if not log_path:
        return None
    for path in (log_path, os.path.join(os.path.dirname(log_path), "old", os.path.basename(log_path))):
        try:
            with open(path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 65536))
                lines = log.read().decode("utf-8", "replace").splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            if _ERROR_LINE.search(line) and "Warning" not in line:
                return line.strip()
        return None
    return None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
