"""How the two trainers read one launch's arguments, for `--verify`: nothing is started or written.

`read_as_v0(argv)` is what `trainer.use_v1=false` does with the old arguments up to the first
step (`legacy_v0.config.compose_v0`, the typed config, the class paths V0 imports at start-up,
the dry run's checks); `read_as_v1(argv)` is what `python -m core_v1.main_ppo` does with the
migrated ones (the V0 path when they ask for it, as a script the codemod keeps on V0 does). Each
gives the normalised view (`codemods.verify_view`) or the one error line the run would end with.
What the readings print (warnings, notes) is swallowed: the verdict speaks for them.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from dataclasses import dataclass
from typing import Any, Optional, Sequence


@dataclass(frozen=True)
class Reading:
    """One trainer's reading of a launch: `trainer` is "V0" or "V1"; `view` the normalised view,
    or None with `refused`, the run's one `error:` line."""

    trainer: str
    view: Optional[dict[str, Any]] = None
    refused: Optional[str] = None


def read_as_v0(argv: Sequence[str]) -> Reading:
    """The old arguments as the V0 trainer reads them (`trainer.use_v1=false`)."""
    return _quietly(lambda: _v0(argv), "V0")


def read_as_v1(argv: Sequence[str]) -> Reading:
    """The arguments as `python -m core_v1.main_ppo` reads them: V1, or V0 when they ask for it."""
    from core_v1.main_ppo import parse_args, requests_v0

    asks_for_v0 = _quietly(lambda: requests_v0(*parse_args(list(argv))), "V1")
    if asks_for_v0 is True:
        return read_as_v0(argv)
    return _quietly(lambda: _v1(*parse_args(list(argv))), "V1")


def _v0(argv: Sequence[str]) -> Reading:
    from core_v1.main_ppo import parse_args
    from codemods.verify_view import view_of_v0
    from legacy_v0.config import compose_v0
    from legacy_v0.entry import check_class_paths
    from legacy_v0.trainer import refuse_agent_loops

    name, path, overrides = parse_args(list(argv))
    v0 = compose_v0(name, path, overrides)
    config = v0.ppo_config()
    check_class_paths(config, v0.settings)
    _check(config)
    refuse_agent_loops(config, [])  # what the V0 trainer refuses as it starts, before reading any data
    return Reading("V0", view_of_v0(v0, config))


def _v1(name: str, path: Optional[str], overrides: list[str]) -> Reading:
    from core_v1.config import to_config
    from core_v1.main_ppo import compose_v1
    from codemods.verify_view import view_of_v1

    raw, _ = compose_v1(name, path, overrides)
    config = to_config(raw)
    _check(config)
    return Reading("V1", view_of_v1(config))


def _check(config: Any) -> None:
    """What the dry run refuses before anything starts (it imports the run's plug-ins first)."""
    from core_v1.config import ConfigError
    from core_v1.trainer.constraints import config_problems

    problems = config_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))


def _quietly(read, trainer: str) -> Any:
    """Run `read` with its output swallowed; a user error becomes a refused `Reading` (its first
    line). Anything else is a bug of ours and propagates."""
    from core_v1.main_ppo import is_user_error

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return read()
        except Exception as error:  # noqa: BLE001 - a user error is the reading's answer; a bug propagates
            if not is_user_error(error):
                raise
            text = str(error).strip()
            return Reading(trainer, refused=text.splitlines()[0] if text else type(error).__name__)
