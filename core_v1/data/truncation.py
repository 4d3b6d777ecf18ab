"""`data.truncation`: what happens to a prompt longer than `data.max_prompt_length` tokens.

The length is that of the prompt the agent loop sends, the chat messages rendered with the
tokenizer's chat template (and `data.apply_chat_template_kwargs`). As verl's dataset does:

- `error` (verl's default): the run stops at start-up with one line naming the first such prompt
  (its file and row) and how many there are, unless `data.filter_overlong_prompts` drops them;
- `left`: the last `max_prompt_length` tokens are kept (the question at the end survives);
- `right`: the first `max_prompt_length` tokens are kept;
- `middle`: the first half and the last half are kept (`max // 2` and `max - max // 2` tokens).

The dataset refuses (`error`) when it is built; the agent loop cuts (`left`/`right`/`middle`) the
token ids it renders for the first request, where verl's agent loop cuts its prompts too.
"""

from __future__ import annotations

from core_v1.errors import UserError

TRUNCATION_SIDES = ("error", "left", "right", "middle")


class PromptTooLongError(UserError, ValueError):
    """A prompt is longer than `data.max_prompt_length` and `data.truncation=error`."""


def too_long_message(where: str, length: int, max_length: int, count: int = 1) -> str:
    others = f" (and {count - 1} more)" if count > 1 else ""
    return (
        f"{where}: the prompt is {length} tokens (chat template applied){others}, longer than "
        f"data.max_prompt_length={max_length}, and data.truncation=error; drop such prompts with "
        "data.filter_overlong_prompts=true, cut them with data.truncation=left|right|middle, or raise "
        "data.max_prompt_length"
    )


def truncate_prompt(ids: list[int], max_length: int, side: str, where: str = "a prompt") -> list[int]:
    """`ids` cut to `max_length` tokens as `side` says (unchanged when they fit)."""
    if max_length is None or max_length <= 0 or len(ids) <= max_length:
        return ids
    if side == "left":
        return ids[-max_length:]
    if side == "right":
        return ids[:max_length]
    if side == "middle":
        head = max_length // 2
        return ids[:head] + ids[len(ids) - (max_length - head) :]
    raise PromptTooLongError(too_long_message(where, len(ids), max_length))
