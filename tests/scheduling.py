"""How the suite is spread over pytest-xdist's workers (pyproject's addopts: `-n 2`); tests/conftest.py
imports the hooks below.

* Longest first. Each worker takes the next unit of the queue when it runs dry, so the queue is
  ordered longest first (tests/durations.json: seconds per test, setup and teardown included, from
  a `--durations=0` run; a test it lacks counts as short): the learning runs start at once, side by
  side, and the short tests fill in around them. Units under `SHORT_S` keep the collection order,
  so that a module's tests stay together. A stale durations file costs time, never a result.
* Units. Tests that share a module- or package-scoped fixture (a training run that several tests
  read, a tiny reward model) form one unit that one worker runs, so the fixture is made once, not
  once per worker. Fixtures in `CHEAP_TO_REPEAT` cost little enough to make twice, and their tests
  stay free to spread. (xdist's own `--dist loadgroup` cannot do this here: its `xdist_group`
  marks do nothing on pytest 9.2, whose node ids it no longer rewrites; so the workers write the
  units to a file that `UnitScheduling`, in the controller, reads.)
* `@pytest.mark.serial`. Tests whose timing bounds (a retry budget, a deadline, overlapping sleeps)
  do not hold beside another busy worker on a 2-core machine form one unit that runs last, each
  test alone: every other test holds a machine-wide lock shared, a serial test holds it exclusively.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("durations.json")
SHORT_S = 5.0  # units shorter than this keep the collection order
SERIAL = "serial"
RUN_DIR_VARIABLE = "RLBRIDGE_TEST_RUN_DIR"  # set by the controller for its workers

# Module/package-scoped fixtures that may be made once per worker: Ray (one runtime per process,
# tests/conftest.py), tokenizers, the rollout tests' tiny model and its references, the
# quickstart's model and data (3 s; the learning runs that read them must spread), a service stub.
CHEAP_TO_REPEAT = frozenset(
    {
        "ray_runtime",
        "ray_four_cpus",
        "ray_cluster",
        "tokenizer",
        "policy_tokenizer",
        "device",
        "wait_until",
        "vllm_file",
        "tiny_model_path",
        "reference_model",
        "greedy_reference",
        "log_prob_reference",
        "quickstart_model",
        "quickstart_assets",
        "big_local_model",
        "service",
        "recorder",
    }
)


def _durations() -> dict[str, float]:
    try:
        return json.loads(DURATIONS.read_text())
    except FileNotFoundError:
        return {}


def _shared_fixture_keys(item: pytest.Item) -> set[str]:
    """The units `item` must share: its module for a module-scoped fixture, the fixture's package
    for a package-scoped one (only those not in CHEAP_TO_REPEAT)."""
    keys = set()
    for name, definitions in item._fixtureinfo.name2fixturedefs.items():
        if name in CHEAP_TO_REPEAT or not definitions:
            continue
        scope = definitions[-1].scope
        if scope in ("module", "class"):
            keys.add(item.nodeid.split("::")[0])
        elif scope == "package":
            keys.add(f"{definitions[-1].baseid or '.'}/ (package fixture {name})")
    return keys


def _units(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """Items joined into units (union of the shared-fixture keys), in collection order."""
    parent: dict[str, str] = {}

    def find(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    item_key = {}
    for item in items:
        keys = sorted(_shared_fixture_keys(item)) or [item.nodeid]
        if item.get_closest_marker(SERIAL):
            keys.append(SERIAL)
        for key in keys[1:]:
            parent[find(key)] = find(keys[0])
        item_key[item.nodeid] = keys[0]
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(find(item_key[item.nodeid]), []).append(item)
    return list(units.values())


def order(items: list[pytest.Item]) -> dict[str, str]:
    """Reorder `items` in place (longest unit first, serial last); returns each test's unit."""
    seconds = _durations()
    units = _units(items)
    cost = {id(unit): sum(seconds.get(item.nodeid, 0.0) for item in unit) for unit in units}
    serial = {id(unit) for unit in units if any(item.get_closest_marker(SERIAL) for item in unit)}
    rest = [unit for unit in units if id(unit) not in serial]
    long = sorted((unit for unit in rest if cost[id(unit)] >= SHORT_S), key=lambda unit: -cost[id(unit)])
    short = [unit for unit in rest if cost[id(unit)] < SHORT_S]
    last = [unit for unit in units if id(unit) in serial]
    items[:] = [item for unit in long + short + last for item in unit]
    return {item.nodeid: (SERIAL if id(unit) in serial else unit[0].nodeid) for unit in units for item in unit}


def _run_dir() -> Path | None:
    """The folder the controller and its workers share for this run (None outside xdist)."""
    folder = os.environ.get(RUN_DIR_VARIABLE)
    return Path(folder) if folder else None


@contextlib.contextmanager
def machine_share(exclusive: bool):
    """Hold the machine-wide test lock, shared or exclusive, while the enclosed test runs (only on
    xdist workers). A waiting exclusive holder goes first: it holds the turnstile, which every
    shared holder passes through on its way in."""
    root = _run_dir()
    if root is None or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with open(root / "turnstile", "a") as turnstile, open(root / "machine", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(machine, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(machine, fcntl.LOCK_UN)


def pytest_configure(config):
    if not os.environ.get("PYTEST_XDIST_WORKER") and getattr(config.option, "numprocesses", None):
        # The controller: a folder for the units file and the lock, handed to the workers it starts.
        folder = tempfile.mkdtemp(prefix="rlbridge-pytest-")
        os.environ[RUN_DIR_VARIABLE] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_collection_modifyitems(config, items):
    units = order(items)
    root = _run_dir()
    if root is not None and os.environ.get("PYTEST_XDIST_WORKER"):
        # Every worker collects the same tests and writes the same file; the controller reads it once
        # all of them have reported their collection.
        partial = root / f"units.{os.getpid()}.json"
        partial.write_text(json.dumps(units))
        os.replace(partial, root / "units.json")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`UnitScheduling` for xdist's default `--dist load` (an explicit other --dist is kept)."""
    if config.getvalue("dist") != "load" or _run_dir() is None:
        return None
    return make_unit_scheduling(config, log)


def make_unit_scheduling(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        """xdist's scope scheduling with this file's units as the scopes, in collection order: a
        worker gets the next unit when it has at most two tests left."""

        _unit_of: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._unit_of is None:
                self._unit_of = json.loads((_run_dir() / "units.json").read_text())
            return self._unit_of.get(nodeid, nodeid)

        def schedule(self) -> None:
            self.config.option.loadscopereorder = False  # the collection order is already the plan
            super().schedule()

    return UnitScheduling(config, log)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with machine_share(exclusive=item.get_closest_marker(SERIAL) is not None):
        return (yield)
