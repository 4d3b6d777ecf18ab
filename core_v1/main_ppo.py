"""The entrypoint: `python -m core_v1.main_ppo [--config-name=NAME] [--config-path=DIR] key=value ...`.

Composes the config (Hydra grammar, verl's key names), maps legacy V0 keys to their V1 homes
through the shims (saying so, one line per key, on the command line and in YAML), and then
either prints the resolved plan (`trainer.dry_run=true`, for V1 and V0 alike), runs the
deprecated V0 trainer (`trainer.use_v1=false`), or trains on V1 in the mode
`trainer.v1.trainer_mode` names. `trainer.smoke=true` first rewrites the composed config (the
one the chosen trainer reads) into a two-step CPU run on a stand-in model (`core_v1.smoke`). A
user mistake ends with one `error:` line and exit code 2, never a traceback.

This module is the command line: it parses, composes and picks V0 or V1. What a launch does once
composed (`run_v1`, `dry_run`, the smoke test) lives in `core_v1.launch`, which V0's entry calls
too, so no module below the command line imports this one. It is the one part of `core_v1` allowed
to import the layers above it (`shims`, `legacy_v0`), lazily; the import contracts
(`[tool.importlinter]` in pyproject.toml) name those edges and no others.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from core_v1.config import compose_config, to_config
from core_v1.config.loader import SCHEMA_NAME
from core_v1.errors import UserError, is_user_error
from core_v1.launch import dry_run, run_v1, smoke_or_run  # noqa: F401  (run_v1: importable from the entrypoint)

USAGE = """usage: python -m core_v1.main_ppo [--config-name=NAME] [--config-path=DIR] [key=value ...]

  --config-name NAME   a preset in core_v1/config (e.g. quickstart) or in --config-path; default ppo_trainer
  --config-path DIR    a folder of YAML configs that start from `defaults: [ppo_trainer, _self_]`
  key=value            Hydra overrides with verl's key names (+key=value adds, ~key deletes)
  trainer.dry_run=true compose, validate and print the plan without starting anything
  trainer.smoke=true   run your own code for two CPU steps on a tiny stand-in model and a few of your
                       rows, writing only to a temporary directory (docs/smoke.md)
"""


class UsageError(UserError, ValueError):
    pass


def parse_args(argv: Sequence[str]) -> tuple[str, Optional[str], list[str]]:
    name, path, overrides = SCHEMA_NAME, None, []
    args = list(argv)
    while args:
        arg = args.pop(0)
        for flags, setter in ((("--config-name", "-cn"), "name"), (("--config-path", "-cp"), "path")):
            flag = next((f for f in flags if arg == f or arg.startswith(f + "=")), None)
            if flag is None:
                continue
            if arg == flag:
                if not args:
                    raise UsageError(f"{flag} needs a value")
                value = args.pop(0)
            else:
                value = arg[len(flag) + 1 :]
            if setter == "name":
                name = value
            else:
                path = value
            break
        else:
            if arg.startswith("-"):
                raise UsageError(f"unknown option {arg!r}\n{USAGE}")
            overrides.append(arg)
    return name, path, overrides


def load_legacy_shim(config_dir: Optional[str], judge_named_files: bool = True):
    """The legacy-key shim (`shims.config.LegacyConfigShim`) when that layer is installed, else None."""
    try:
        from shims.config import LegacyConfigShim  # lazy: the one allowed upward edge
    except ImportError:
        return None
    return LegacyConfigShim(config_dir=config_dir, judge_named_files=judge_named_files)


_USE_V1_KEY = "trainer.use_v1"


def requests_v0(name: str, path: Optional[str], overrides: Sequence[str]) -> bool:
    """True when the run asks for the V0 trainer: the last `trainer.use_v1=` override decides,
    else the value in the named config (a user's YAML may set it); V1 is the default."""
    from core_v1.config.loader import parse_override

    decided = None
    for token in overrides:
        try:
            override = parse_override(token)
        except Exception:  # noqa: BLE001 - composition reports a token Hydra cannot read
            continue
        if override.key_or_group == _USE_V1_KEY and not override.is_delete():
            decided = override.value()
    if decided is None and (name != SCHEMA_NAME or path is not None):
        decided = _configured_use_v1(name, path)
    return decided is False or (isinstance(decided, str) and decided.strip().lower() == "false")


class _Composed(Exception):
    def __init__(self, value):
        super().__init__(value)
        self.value = value


def _configured_use_v1(name: str, path: Optional[str]):
    """`trainer.use_v1` as the named config sets it (None when it cannot be composed: the V1
    path then reports why, or it does not set it)."""

    def peek(cfg: DictConfig) -> DictConfig:
        raise _Composed(OmegaConf.select(cfg, _USE_V1_KEY, default=None, throw_on_resolution_failure=False))

    try:
        compose_config(name, [], path, migrate=peek)
    except _Composed as composed:
        return composed.value
    except Exception:  # noqa: BLE001 - any composition error is reported by the run itself
        return None
    return None


def compose_v1(name: str, path: Optional[str], overrides: Sequence[str], *, judge_named_files: bool = True):
    """`(raw config, legacy shim or None)`: the run's overrides as V1 reads them (legacy keys moved
    by the shim, on the command line and in YAML). Refusals raise ConfigError.
    `judge_named_files=False` leaves the shim's start-up check of the files the config names
    (verl class paths, verl imports) to the caller (`shims.config.refuse_named_files`)."""
    shim = load_legacy_shim(path, judge_named_files)
    if shim is not None:
        overrides = shim.migrate_overrides(list(overrides))
    return compose_config(name, overrides, path, migrate=shim.migrate_config if shim else None), shim


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return 0
    try:
        name, path, overrides = parse_args(argv)
        if requests_v0(name, path, overrides):  # before any key mapping: V0 reads verl's V0 keys itself
            return run_v0_entry(name, path, overrides)
        raw, shim = compose_v1(name, path, overrides)
        notes = [note.describe() for note in shim.notes] if shim else []
        return smoke_or_run(
            raw, lambda config: dry_run(config, notes) if config.trainer.dry_run else run_v1(to_config(config))
        )
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        if is_user_error(error):
            print(f"error: {error}", file=sys.stderr)
            return 2
        raise


def run_v0_entry(name: str, path: Optional[str], overrides: Sequence[str]) -> int:
    """The deprecated V0 trainer, on the config as V0 reads it (verl's V0 keys)."""
    from legacy_v0 import warn_deprecated  # lazy: the deprecated path
    from legacy_v0.config import compose_v0
    from legacy_v0.entry import run_v0
    from shims.v0_keys import KeyTableOnV0  # verl's moved keys, which V0 reads through the rename table

    warn_deprecated()
    v0 = compose_v0(name, path, overrides, legacy_keys=KeyTableOnV0())
    return smoke_or_run(v0.raw, lambda _: run_v0(v0))  # the smoke rewrite acts on v0.raw, which run_v0 reads


if __name__ == "__main__":
    sys.exit(main())
