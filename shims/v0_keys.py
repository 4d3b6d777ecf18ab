"""verl's moved keys on the V0 trainer: the rename table's part of reading a V0 launch.

`legacy_v0.config.compose_v0` reads V0's own settings and the backends' keys itself, and leaves
the rest of verl's keys to the `legacy_keys` its caller passes, since V0 does not know the key
table. `KeyTableOnV0` is that reader; the command line (`core_v1.main_ppo`) and `--verify`
(`codemods.verify_read`) pass it. It reads the keys as the V1 shim does (`LegacyConfigShim`),
with what differs on V0:

- a key whose home moved moves quietly (no "legacy key" line: on V0 these are the native names);
- a key whose feature V0 lacks as well is refused as `not supported on rlbridge (V0 or V1)`,
  with no codemod suggested;
- the served reward model's own settings under `reward_model` stay with V0 (`V0Settings`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from core_v1.config import ConfigError
from legacy_v0.config import config_leaves, delete_key
from shims.config import LegacyConfigShim, LegacyNote
from shims.refusals import RefusedKeysError
from shims.rename_table import Action, resolve_config_key


@dataclass(frozen=True)
class KeyTableOnV0:
    """`legacy_v0.config.LegacyKeys` through the rename table. `judge_named_files=False` leaves the
    start-up check of the files the config names to the caller (`shims.config.refuse_named_files`)."""

    judge_named_files: bool = True

    def __call__(self, cfg: DictConfig) -> list[str]:
        drop_served_reward_model_settings(cfg)
        return move_shared_keys(cfg, self.judge_named_files)


def drop_served_reward_model_settings(cfg: DictConfig) -> None:
    """The served reward model's V0 settings (`reward_model.strategy`, `.micro_batch_size`,
    `.model.input_tokenizer`, ...) stay in `V0Settings.reward_model` for its worker; the
    shared config keeps only what moves to `reward.reward_model.*`, and nothing of a
    disabled reward model (as in verl, its settings are not read). Reward settings verl kept
    under `reward_model` that are not the model's (`sandbox_fusion.*`, `reward_loop_*`,
    `num_workers`) move on whether or not the model is enabled, so their verdicts apply."""
    section = cfg.get("reward_model")
    if not isinstance(section, DictConfig):
        return
    enabled = OmegaConf.select(cfg, "reward_model.enable", default=False, throw_on_resolution_failure=False)
    for key in [k for k, _ in config_leaves(section, "reward_model.")]:
        action = resolve_config_key(key)
        models_own = (
            action is None or action.action is Action.MANUAL or str(action.new_key).startswith("reward.reward_model.")
        )
        # A disabled reward model's settings are not read (verl's own YAMLs leave some `???`).
        if models_own and (not enabled or action is None or action.action is Action.MANUAL):
            delete_key(cfg, key)


class _QuietShim(LegacyConfigShim):
    def _note(self, note: LegacyNote) -> None:  # V0's own key names are not legacy on V0: no "legacy key" line
        self.notes.append(note)


def move_shared_keys(cfg: DictConfig, judge_named_files: bool = True) -> list[str]:
    """Move verl keys whose home moved (quietly: these are V0's own names), refuse those whose
    feature V0 lacks as well, and say which ones have no effect. Returns the plan's notes."""
    shim = _QuietShim(judge_named_files=judge_named_files)
    try:
        shim.migrate_config(cfg)
    except RefusedKeysError as error:  # the shim speaks of V1; on V0 these are keys V0 cannot run either
        raise RefusedKeysError(_on_v0(error), error.keys) from None
    except ConfigError as error:
        raise ConfigError(_on_v0(error)) from None
    notes = []
    for note in shim.notes:
        if getattr(note, "action", None) is Action.DELETE and note.old_key != "actor_rollout_ref.rollout.mode":
            text = f"{note.old_key} has no effect on rlbridge: {note.message}"
            print(f"warning: {text}", file=sys.stderr)
            notes.append(text)
        elif getattr(note, "action", None) is None:  # a no-op verdict: the shim printed its warning
            notes.append(note.describe())
    return notes


def _on_v0(error: ConfigError) -> str:
    """The shim's refusal as V0 says it: the keys are V0's own, and no codemod is suggested."""
    text = str(error).replace("legacy key(s) with no automatic V1 equivalent", "not supported on rlbridge (V0 or V1)")
    return text.split(" (python -m codemods.migrate")[0]
