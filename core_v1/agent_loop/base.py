"""The agent-loop extension point: one `async run()` returning one typed output record.

An agent loop turns one dataset row into one trajectory (or several, for multi-output loops)
by talking to the LLM server replicas through `self.server_manager.generate(...)`. Write one as
a subclass plus one config line:

    @register("my_agent")
    class MyAgentLoop(AgentLoopBase):
        async def run(self, sampling_params, **kwargs) -> AgentLoopOutput: ...

    actor_rollout_ref.rollout.agent.default_agent_loop=my_agent

or list it in a YAML file (`actor_rollout_ref.rollout.agent.agent_loop_config_path`):

    - name: my_agent
      _target_: my_agent_loop.MyAgentLoop

A row's `agent_name` column, when present, picks the loop for that row.
"""

from __future__ import annotations

import abc
import json
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from core_v1.agent_loop.vision import trusts_remote_code
from core_v1.data.truncation import truncate_prompt
from core_v1.errors import UserError
from core_v1.utils.registry import Registry


@dataclass
class AgentLoopOutput:
    """One trajectory, as the trainer will see it.

    prompt_ids: the tokens the first generation request was conditioned on (chat template applied).
    response_ids: everything after the prompt: model tokens and, in multi-turn loops, the
        tool/observation tokens interleaved between turns.
    response_mask: one per response token; 1 = the model generated it (trained on),
        0 = it came from a tool, the environment or a user turn (never trained on).
    response_logprobs: the sampling policy's log-prob of each response token (0.0 for
        tokens with mask 0); None when the loop did not keep them (the trainer recomputes).
    num_turns: user + assistant + tool turns in the conversation (single turn = 2).
    reward_score: set by loops that score themselves; None means the reward loop scores the
        decoded response with the configured scorer.
    metrics: per-trajectory timings/counters, averaged into the step metrics.
    extra_fields: anything else to keep with the row (stored as a non-tensor field).
    multi_modal_inputs: the prompt's image inputs as the processor made them (`pixel_values`,
        `image_grid_thw`, ...); None for a text model. Stored with the row: every training
        forward of the row takes them (`core_v1.utils.vision`).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: Optional[list[float]] = None
    num_turns: int = 2
    reward_score: Optional[float] = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra_fields: dict[str, Any] = field(default_factory=dict)
    multi_modal_inputs: Optional[dict[str, Any]] = None

    def __post_init__(self):
        if len(self.response_mask) != len(self.response_ids):
            raise ValueError(
                f"response_mask has {len(self.response_mask)} entries for "
                f"{len(self.response_ids)} response tokens; they must match one to one"
            )
        if self.response_logprobs is not None and len(self.response_logprobs) != len(self.response_ids):
            raise ValueError(
                f"response_logprobs has {len(self.response_logprobs)} entries for "
                f"{len(self.response_ids)} response tokens; they must match one to one"
            )


class AgentLoopBase(abc.ABC):
    """Base class of every agent loop. Constructed once per trajectory, so it may keep state.

    `config` is the run's typed `PPOConfig`; `server_manager` is the rollout client
    (`generate(request_id, prompt_ids, sampling_params, multi_modal_inputs=None)`); `tokenizer`
    is the model's; `processor` (a keyword) the model's HF processor for a vision-language model.
    """

    def __init__(self, config: Any, server_manager: Any, tokenizer: Any, **kwargs: Any):
        self.config = config
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.processor = kwargs.pop("processor", None)
        self.extra = kwargs

    @abc.abstractmethod
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        """Produce the trajectory for one row; `kwargs` are the row's columns (`raw_prompt`, ...)."""

    async def encode_prompt(
        self, row: dict, tools: Optional[list[dict]] = None
    ) -> tuple[list[int], Optional[dict[str, Any]]]:
        """(prompt ids, multimodal inputs) of a row's `raw_prompt` (with `tools` schemas for the
        template): with a processor (a vision-language model) the row's images (`data.image_key`)
        and videos (`data.video_key`) go in and the inputs are a dict (empty without either); a
        text model's are None."""
        from core_v1.agent_loop.video import row_videos
        from core_v1.agent_loop.vision import encode_vision_prompt, refuse_images_without_processor, row_images

        messages = list(row["raw_prompt"])
        data = self.config.data
        if self.processor is None:
            refuse_images_without_processor(row, data.image_key, data.video_key)
            return await self.apply_chat_template(messages, tools=tools), None

        images, videos = row_images(row, data.image_key), row_videos(row, data.video_key)
        return encode_vision_prompt(
            self.processor, messages, images, self.chat_template_kwargs, tools=tools, videos=videos
        )

    @property
    def chat_template_kwargs(self) -> dict[str, Any]:
        """The run's `data.apply_chat_template_kwargs`: variables of the chat template (`enable_thinking`, ...)."""
        return chat_template_kwargs(self.config)

    async def apply_chat_template(
        self, messages: list[dict], tools: Optional[list[dict]] = None, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of `messages` under the tokenizer's chat template, with the run's template
        variables, cut to `data.max_prompt_length` as `data.truncation` says (where verl's agent
        loop cuts its prompts; core_v1.data.truncation)."""
        ids = encode_chat(
            self.tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            **self.chat_template_kwargs,
        )
        data = getattr(self.config, "data", None)
        return truncate_prompt(ids, getattr(data, "max_prompt_length", None), getattr(data, "truncation", "error"))


def encode_chat(
    tokenizer: Any,
    messages: list[dict],
    tools: Optional[list[dict]] = None,
    add_generation_prompt: bool = True,
    **template_kwargs: Any,
) -> list[int]:
    """Token ids of `messages` under `tokenizer`'s chat template; `template_kwargs` are the template's
    own variables (`data.apply_chat_template_kwargs`, as verl passes them).

    Remembered per tokenizer for the last few thousand distinct inputs: a GRPO step renders each
    prompt once per sample (n times), and rendering the Jinja template took an agent-loop worker
    about as long as its calls to the rollout replica (quickstart profile)."""
    key = _chat_key(tokenizer, messages, tools, add_generation_prompt, template_kwargs)
    cache = _encoded_chats.setdefault(tokenizer, OrderedDict()) if key is not None else None
    if cache is not None and key in cache:
        cache.move_to_end(key)
        return list(cache[key])
    encoded = tokenizer.apply_chat_template(
        list(messages), tools=tools, add_generation_prompt=add_generation_prompt, tokenize=True, **template_kwargs
    )
    # transformers 5 returns a BatchEncoding where 4.x returned the list itself.
    ids = [int(t) for t in (encoded["input_ids"] if hasattr(encoded, "keys") else encoded)]
    if cache is not None:
        cache[key] = tuple(ids)
        if len(cache) > _CHAT_CACHE_SIZE:
            cache.popitem(last=False)
    return ids


_CHAT_CACHE_SIZE = 4096
_encoded_chats: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()


def _chat_key(
    tokenizer: Any, messages: Any, tools: Any, add_generation_prompt: bool, template_kwargs: dict
) -> Optional[str]:
    """The cache key of one rendering (the template itself included: a run may set its own), or
    None when an input is not plain JSON (e.g. an image object): such calls are not remembered."""
    try:
        return json.dumps(
            [getattr(tokenizer, "chat_template", None), messages, tools, add_generation_prompt, template_kwargs],
            sort_keys=True,
        )
    except (TypeError, ValueError):
        return None


def chat_template_kwargs(config: Any) -> dict[str, Any]:
    """`data.apply_chat_template_kwargs` of a run config as a plain dict ({} for a config without it)."""
    data = getattr(config, "data", None)
    return dict(getattr(data, "apply_chat_template_kwargs", None) or {})


def load_policy_tokenizer(config: Any, path: Optional[str] = None) -> Any:
    """The policy's tokenizer: from `path`, else `actor_rollout_ref.model.tokenizer_path`,
    `data.tokenizer` or the model's own; with `actor_rollout_ref.model.custom_chat_template` as its
    chat template when that is set (as verl does). An invalid template fails here, not per sample."""
    from transformers import AutoTokenizer

    model = config.actor_rollout_ref.model
    path = str(Path(str(path or model.tokenizer_path or config.data.tokenizer or model.path)).expanduser())
    tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trusts_remote_code(config))
    if model.custom_chat_template:
        tokenizer.chat_template = model.custom_chat_template
        _check_chat_template(tokenizer, chat_template_kwargs(config))
    return tokenizer


def _check_chat_template(tokenizer: Any, template_kwargs: dict) -> None:
    from jinja2 import TemplateError

    try:
        tokenizer.apply_chat_template(
            [{"role": "user", "content": "1 + 1?"}], add_generation_prompt=True, tokenize=False, **template_kwargs
        )
    except TemplateError as error:
        raise AgentLoopConfigError(
            f"actor_rollout_ref.model.custom_chat_template cannot render a one-message chat "
            f"({type(error).__name__}: {error}); fix the Jinja template"
        ) from None


AGENT_LOOPS: Registry[type[AgentLoopBase]] = Registry(
    "agent loop",
    base=AgentLoopBase,
    config_key="actor_rollout_ref.rollout.agent.default_agent_loop or a row's agent_name",
)


def register(name: str):
    """Class decorator: make an agent loop selectable by `name`."""
    return AGENT_LOOPS.register(name)


class AgentLoopConfigError(UserError, ValueError):
    """An agent-loop YAML file is malformed or names a class that cannot be imported."""


def load_agent_loop_config(path: str | Path) -> list[str]:
    """Register the loops listed in a YAML file of `{name, _target_}` entries; returns their names.

    `_target_` goes through the one loader (`core_v1.utils.loading.load_target`): a module beside
    the YAML (`_target_: my_agent_loop.MyAgentLoop` with `my_agent_loop.py` next to it) is loaded
    from that file, anything else (`my_pkg.loops.MyLoop`, `loops.py:MyLoop`) from its package or path.
    """
    import yaml

    from core_v1.utils.loading import PluginError, load_target

    path = Path(path).expanduser()
    if not path.is_file():
        raise AgentLoopConfigError(
            f"agent loop config {str(path)!r} does not exist (actor_rollout_ref.rollout.agent.agent_loop_config_path)"
        )
    entries = yaml.safe_load(path.read_text()) or []
    if not isinstance(entries, list):
        raise AgentLoopConfigError(f"{path}: expected a list of '- name: ..., _target_: module.Class' entries")
    names = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or "name" not in entry or "_target_" not in entry:
            raise AgentLoopConfigError(f"{path}: entry {i} needs both 'name' and '_target_', got {entry!r}")
        try:
            cls = load_target(entry["_target_"], relative_to=path.resolve().parent)
        except PluginError as error:
            raise AgentLoopConfigError(
                f"{path}: cannot import {entry['_target_']!r} for agent loop {entry['name']!r}: {error}"
            ) from None
        try:
            AGENT_LOOPS.register(entry["name"], cls)
        except (TypeError, ValueError) as error:  # not an AgentLoopBase subclass, or a taken name
            raise AgentLoopConfigError(f"{path}: {error}") from None
        names.append(entry["name"])
    return names
