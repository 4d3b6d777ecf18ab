"""Interactions: a program that plays the user's side of a conversation (verl's `verl.interactions`).

The `tool_agent` loop asks an interaction for the next user turn whenever the model ends a turn
without a tool call: the interaction reads the conversation so far and answers with a message
(mask 0 in the response, like a tool message), a score for the turn, and whether the conversation
is over. A tutor that says "wrong, try again" until the answer is right is the usual example.

Configured as verl configures it: `actor_rollout_ref.rollout.multi_turn.interaction_config_path`
names a YAML file

    interaction:
      - name: tutor                      # optional; default: the class name without "Interaction", lower case
        class_name: my_tutor.TutorInteraction   # module.Class ("file.py:Class" too); the YAML's folder first
        config: {max_tries: 3}          # given to the constructor as `config` (with `name` added)

and each row picks one by `interaction_kwargs["name"]` (the row's `interaction_kwargs` column or,
where verl's data puts it, `extra_info["interaction_kwargs"]`); the other `interaction_kwargs` are
passed to every call. A class keeps verl's method names and signatures, so a verl interaction
runs unchanged; `finalize_interaction` is called when the trajectory ends, so per-session state
can be released. Every interaction's scores go to the trajectory's `turn_scores` (as in verl, the
reward is still the reward function's; a custom reward function can read them from there).
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Optional
from uuid import uuid4

from core_v1.agent_loop.base import AgentLoopConfigError

CONFIG_KEY = "actor_rollout_ref.rollout.multi_turn.interaction_config_path"


class BaseInteraction:
    """One interaction, shared by every trajectory of a process; keep per-session state keyed by
    `instance_id` (the trajectory's request id)."""

    def __init__(self, config: dict[str, Any]):
        self.config = config
        self.name: str = config.get("name", "interaction_agent")

    async def start_interaction(self, instance_id: Optional[str] = None, **kwargs: Any) -> str:
        """A trajectory begins; `kwargs` are its row's `interaction_kwargs`. Returns the instance id."""
        return instance_id or str(uuid4())

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        """The next user turn after `messages` (the model's turn last): `(should_terminate_sequence,
        response_content, current_turn_score, additional_data)`."""
        raise NotImplementedError

    async def calculate_score(self) -> float:
        """verl's hook for a score over the interaction; the loop does not call it."""
        return 0.0

    async def finalize_interaction(self, instance_id: Optional[str] = None, **kwargs: Any) -> None:
        """The trajectory ended: release what `start_interaction` kept for it."""


def row_interaction_kwargs(row: dict[str, Any]) -> dict[str, Any]:
    """A row's `interaction_kwargs`: the column, or `extra_info["interaction_kwargs"]` (verl's place)."""
    from core_v1.agent_loop.tools.tool_registry import row_kwargs

    return row_kwargs(row, "interaction_kwargs")


@functools.lru_cache(maxsize=8)
def configured_interactions(path: Optional[str]) -> dict[str, Any]:
    """`{name: interaction}` from the YAML file `path` (empty without one), built once per process."""
    return load_interactions(path) if path else {}


def load_interactions(path: str | Path) -> dict[str, Any]:
    """New interaction objects for every entry of the file; names must be unique."""
    from core_v1.agent_loop.tools.tool_registry import read_class_list

    file = Path(path).expanduser()
    entries = read_class_list(file, "interaction", "interaction config", CONFIG_KEY, AgentLoopConfigError)
    interactions: dict[str, Any] = {}
    for index, entry in enumerate(entries):
        name, interaction = _build(entry, f"{file}: interaction[{index}]", file.resolve().parent)
        if name in interactions:
            raise AgentLoopConfigError(f"{file}: interaction name {name!r} is defined more than once")
        interactions[name] = interaction
    return interactions


def _build(entry: Any, where: str, folder: Path) -> tuple[str, Any]:
    from core_v1.utils.loading import PluginError, load_target

    if not isinstance(entry, dict) or not isinstance(entry.get("class_name"), str):
        raise AgentLoopConfigError(f"{where} needs 'class_name: module.Class', got {entry!r}")
    class_name = entry["class_name"]
    try:
        cls = load_target(class_name, relative_to=folder, key=CONFIG_KEY)
    except PluginError as error:
        raise AgentLoopConfigError(f"{where}: {error}") from None
    if not (isinstance(cls, type) and callable(getattr(cls, "generate_response", None))):
        raise AgentLoopConfigError(
            f"{where}: {class_name!r} is not an interaction class (subclass "
            "core_v1.agent_loop.interaction.BaseInteraction)"
        )
    name = entry.get("name") or _default_name(class_name)
    config = {**dict(entry.get("config") or {}), "name": name}
    return name, cls(config=config)


def _default_name(class_name: str) -> str:
    simple = class_name.replace(":", ".").rsplit(".", 1)[-1]
    return (simple[: -len("Interaction")] if simple.endswith("Interaction") else simple).lower()


def pick_interaction(interactions: dict[str, Any], interaction_kwargs: dict[str, Any]) -> Any:
    """The interaction a row names (`interaction_kwargs["name"]`); an error names the known ones."""
    name = interaction_kwargs.get("name")
    if name is None:
        raise AgentLoopConfigError(
            f"{CONFIG_KEY} is set, so every row needs interaction_kwargs with a 'name' (the "
            f"row's interaction_kwargs column or extra_info.interaction_kwargs); "
            f"known: {', '.join(sorted(interactions))}"
        )
    if name not in interactions:
        raise AgentLoopConfigError(
            f"a row asks for interaction {name!r}, which {CONFIG_KEY} does not define; "
            f"known: {', '.join(sorted(interactions))}"
        )
    return interactions[name]


async def finalize(interaction: Any, instance_id: str, **kwargs: Any) -> None:
    """`finalize_interaction`, with the instance id when the method takes one (verl's base takes none)."""
    method = interaction.finalize_interaction
    parameters = inspect.signature(method).parameters
    takes_arguments = any(
        p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in parameters.values()
    )
    result = method(instance_id, **kwargs) if takes_arguments else method()
    if inspect.isawaitable(result):
        await result


async def maybe_await(value: Any) -> Any:
    """A user method's result, awaited when it is a coroutine (verl's are async; a plain one works too)."""
    return await value if inspect.isawaitable(value) else value
