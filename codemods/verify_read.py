"""How the two trainers read one launch's arguments, for `--verify`: nothing is started or written.

`read_as_v0(argv)` is what `trainer.use_v1=false` does with the old arguments up to the first
step; `read_as_v1(argv)` is what `python -m core_v1.main_ppo` does with the migrated ones (the V0
path when they ask for it, as a script the codemod keeps on V0 does). Each is two parts:

- *reading*: composition (`legacy_v0.config.compose_v0` / `core_v1.main_ppo.compose_v1`), the
  typed config, and the normalised view (`codemods.verify_view`). Arguments that cannot be read
  (a value Hydra's parser cannot parse, a type error such as an empty value, a config that fails
  validation) give no view: `Reading.refused` is the run's one error line.
- *start-up checks*, which refuse to run what was read: the files the config names
  (`shims.config.refuse_named_files`), then on V0 the classes it imports
  (`legacy_v0.startup_checks.check_class_paths`), the dry run's checks (`config_problems`) and the V0
  trainer's check of agent loops (`legacy_v0.startup_checks.refuse_agent_loops`); on V1 the dry run's
  checks. The first that refuses is `Reading.wont_run`, beside the view.

Keys the key table refuses during composition (`shims.config.RefusedKeysError`: `not supported on
rlbridge: KEY=...`) stop composition itself; those the arguments set are taken out and the rest is
read again (`Reading.without`, each with its reason), and the run's refusal is `wont_run`. A
caller may name more keys to read without (`without=`: the other trainer's refusals), matched by
their V1 home. What the readings print (warnings, notes) is swallowed: the verdict speaks for them.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Sequence

from shims.config import RefusedKey, RefusedKeysError

# What one trainer's reading gives: the view, and the start-up checks to run on what was read.
_Read = tuple[dict[str, Any], Callable[[], None]]


@dataclass(frozen=True)
class Reading:
    """One trainer's reading of a launch: `trainer` is "V0" or "V1"; `view` the normalised view
    (None: the arguments cannot be read, and `refused` is the run's one `error:` line);
    `wont_run` the one error line the run ends with when it would not run (None: it passes every
    start-up check read here); `without` the refused keys the view was read without."""

    trainer: str
    view: Optional[dict[str, Any]] = None
    refused: Optional[str] = None
    wont_run: Optional[str] = None
    without: tuple[RefusedKey, ...] = ()

    @property
    def runs(self) -> bool:
        return self.view is not None and self.wont_run is None


def read_as_v0(argv: Sequence[str], without: Sequence[RefusedKey] = ()) -> Reading:
    """The old arguments as the V0 trainer reads them (`trainer.use_v1=false`)."""
    return _read(argv, without, _v0, "V0")


def read_as_v1(argv: Sequence[str], without: Sequence[RefusedKey] = ()) -> Reading:
    """The arguments as `python -m core_v1.main_ppo` reads them: V1, or V0 when they ask for it."""
    from core_v1.main_ppo import parse_args, requests_v0

    try:
        asks_for_v0 = _quietly(lambda: requests_v0(*parse_args(list(argv))))
    except Exception as error:  # noqa: BLE001 - a user error is the reading's answer; a bug propagates
        return Reading("V1", refused=_error_line(error))
    return read_as_v0(argv, without) if asks_for_v0 else _read(argv, without, _v1, "V1")


def _v0(argv: Sequence[str]) -> _Read:
    from core_v1.main_ppo import parse_args
    from codemods.verify_view import view_of_v0
    from legacy_v0.config import compose_v0
    from legacy_v0.startup_checks import check_class_paths, refuse_agent_loops
    from shims.config import refuse_named_files
    from shims.v0_keys import KeyTableOnV0

    v0 = compose_v0(*parse_args(list(argv)), legacy_keys=KeyTableOnV0(judge_named_files=False))
    config = v0.ppo_config()

    def start_up() -> None:
        refuse_named_files(v0.raw)
        check_class_paths(config, v0.settings)
        _check(config)
        refuse_agent_loops(config, [])  # what the V0 trainer refuses as it starts, before reading any data

    return view_of_v0(v0, config), start_up


def _v1(argv: Sequence[str]) -> _Read:
    from core_v1.config import to_config
    from core_v1.main_ppo import compose_v1, parse_args
    from codemods.verify_view import view_of_v1
    from shims.config import refuse_named_files

    raw, _ = compose_v1(*parse_args(list(argv)), judge_named_files=False)
    config = to_config(raw)

    def start_up() -> None:
        refuse_named_files(raw)
        _check(config)

    return view_of_v1(config), start_up


def _check(config: Any) -> None:
    """What the dry run refuses before anything starts (it imports the run's plug-ins first)."""
    from core_v1.config import ConfigError
    from core_v1.trainer.constraints import config_problems

    problems = config_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))


def _read(
    argv: Sequence[str], without: Sequence[RefusedKey], read: Callable[[Sequence[str]], _Read], trainer: str
) -> Reading:
    """`read(argv)`, then its start-up checks. Keys the key table refuses are taken out of the
    arguments and the rest read again; a user error while reading is `refused`; anything else is
    a bug of ours and propagates."""
    argv, omitted = _without(argv, without)
    refusal = None
    while True:
        try:
            view, start_up = _quietly(lambda: read(argv))
            break
        except RefusedKeysError as error:
            argv, taken = _without(argv, error.keys)
            if not taken:  # keys the arguments do not set (a YAML file does): nothing to read without
                return Reading(trainer, refused=_error_line(error))
            refusal, omitted = refusal or _error_line(error), [*omitted, *taken]
        except Exception as error:  # noqa: BLE001 - see _error_line
            return Reading(trainer, refused=_error_line(error))
    try:
        _quietly(start_up)
    except Exception as error:  # noqa: BLE001 - see _error_line
        refusal = refusal or _error_line(error)
    return Reading(trainer, view, wont_run=refusal, without=tuple(omitted))


def _without(argv: Sequence[str], keys: Sequence[RefusedKey]) -> tuple[list[str], list[RefusedKey]]:
    """`argv` without the overrides that set one of `keys` (or a section holding one), compared by
    V1 home; and those of `keys` it held, each named as this `argv` writes it."""
    homes = {v1_home(refused.key): refused for refused in keys}
    kept, taken = [], {}
    for token in argv:
        key = override_key(token)
        home = None if key is None else v1_home(key)
        found = (
            None if home is None else next((r for h, r in homes.items() if h == home or h.startswith(home + ".")), None)
        )
        if found is None:
            kept.append(token)
        else:
            taken.setdefault(key, replace(found, key=key))
    return kept, list(taken.values())


@functools.lru_cache(maxsize=None)
def override_key(token: str) -> Optional[str]:
    """The key an override token sets (`+a.b=1` -> `a.b`), or None for an option or a token Hydra
    cannot read. Cached: each launch's tokens are looked at for every reading, and Hydra's parser
    takes a millisecond a token."""
    from codemods.shell import _overrides_parser

    if token.startswith("-"):
        return None
    try:
        return _overrides_parser().parse_override(token).key_or_group
    except Exception:  # noqa: BLE001 - a token Hydra cannot read: the readings report it
        return None


def v1_home(key: str) -> str:
    """Where the rename table sends `key` on V1 (itself when it does not move)."""
    from shims import rename_table

    action = rename_table.resolve_config_key(key)
    return action.new_key if action is not None and action.new_key else key


def _error_line(error: BaseException) -> str:
    """A user error's first line (the run's `error:` line); anything else is a bug of ours: raised."""
    from core_v1.main_ppo import is_user_error

    if not is_user_error(error):
        raise error
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _quietly(read: Callable[[], Any]) -> Any:
    """`read()` with its output and warnings swallowed."""
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        return read()
