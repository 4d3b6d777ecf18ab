"""Typed records at the rollout boundary: what a request asks for and what it gets back.

`SamplingParams` is what an agent loop passes to `LLMServerClient.generate`; agent loops written
for verl pass plain dicts, so `SamplingParams.from_dict` accepts verl's keys and aliases and
rejects anything it would otherwise have to ignore. `TokenOutput` is the one result record every
engine returns.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping

from core_v1.errors import UserError

StopReason = Literal["stop", "length", "aborted"]
STOP_REASONS: tuple[str, ...] = ("stop", "length", "aborted")


class SamplingParamsError(UserError, ValueError):
    """A sampling-parameter key or value the rollout cannot honour; the message names the fix."""


class RolloutError(RuntimeError):
    """A rollout request or replica operation that cannot proceed as asked."""


@dataclass(frozen=True)
class SamplingParams:
    """How one request samples. Frozen: partial rollout derives new params with `replace`."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy (argmax), and then log-probs are of the untempered logits."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p (1.0 = off)."""
    top_k: int = -1
    """Keep the k most likely tokens (-1 = off; 0 is accepted as off, as in transformers)."""
    max_tokens: int | None = None
    """Most tokens to generate; None = until a stop token or the engine's context limit."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end the request (the sampled stop token is kept in the output)."""
    seed: int | None = None
    """Per-request seed: token t is drawn from a generator seeded by (seed, seed_offset + t), so the
    same seed and weights give the same tokens whatever else is batched with the request."""
    seed_offset: int = 0
    """Index, within the whole response, of the first token this request generates; partial rollout
    sets it to the number of tokens already generated so a resumed request continues the stream."""
    logprobs: bool = True
    """Return the sampling policy's log-prob of each generated token."""
    ignore_eos: bool = False
    """Do not stop at the model's EOS ids (explicit stop_token_ids still stop)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))
        if self.top_k == 0:
            object.__setattr__(self, "top_k", -1)
        _check(
            _is_number(self.temperature) and self.temperature >= 0,
            f"temperature must be a number >= 0 (0 = greedy), got {self.temperature!r}",
        )
        _check(_is_number(self.top_p) and 0 < self.top_p <= 1, f"top_p must be in (0, 1], got {self.top_p!r}")
        _check(
            _is_int(self.top_k) and (self.top_k == -1 or self.top_k > 0),
            f"top_k must be a positive int or -1 (off), got {self.top_k!r}",
        )
        _check(
            self.max_tokens is None or (_is_int(self.max_tokens) and self.max_tokens >= 0),
            f"max_tokens must be an int >= 0 or None (no limit), got {self.max_tokens!r}",
        )
        _check(self.seed is None or _is_int(self.seed), f"seed must be an int or None, got {self.seed!r}")
        _check(
            _is_int(self.seed_offset) and self.seed_offset >= 0,
            f"seed_offset must be an int >= 0, got {self.seed_offset!r}",
        )
        _check(isinstance(self.logprobs, bool), f"logprobs must be a bool, got {self.logprobs!r}")
        _check(isinstance(self.ignore_eos, bool), f"ignore_eos must be a bool, got {self.ignore_eos!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def replace(self, **changes: Any) -> "SamplingParams":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_dict(cls, params: Mapping[str, Any] | "SamplingParams" | None) -> "SamplingParams":
        """Build from a verl/vLLM-style dict.

        Aliases: `max_new_tokens` and `response_length` mean `max_tokens`. verl's habits are
        accepted where they are no-ops or have one meaning here: `do_sample=False` means greedy,
        `logprobs` may be 0/1 or None, `repetition_penalty` must be 1.0 and `n` must be 1 (GRPO
        groups are separate sessions). Any other key is an error listing the known ones.
        """
        if params is None:
            return cls()
        if isinstance(params, SamplingParams):
            return params
        if not isinstance(params, Mapping):
            raise SamplingParamsError(f"sampling_params must be a dict or SamplingParams, got {type(params).__name__}")
        kwargs: dict[str, Any] = {}
        for key, value in params.items():
            _apply_key(kwargs, key, value)
        if kwargs.pop("_greedy", False):
            kwargs["temperature"] = 0.0
        try:
            return cls(**kwargs)
        except TypeError as err:  # e.g. stop_token_ids=5 (not iterable)
            raise SamplingParamsError(f"bad sampling_params {dict(params)!r}: {err}") from None


_FIELDS = {f.name for f in dataclasses.fields(SamplingParams)}
_ALIASES = {"max_new_tokens": "max_tokens", "response_length": "max_tokens"}
_ACCEPTED_KEYS = sorted(_FIELDS | set(_ALIASES) | {"do_sample", "repetition_penalty", "n"})


def _apply_key(kwargs: dict[str, Any], key: str, value: Any) -> None:
    """Translate one verl-style key into SamplingParams keyword arguments."""
    name = _ALIASES.get(key, key)
    if name in kwargs:
        raise SamplingParamsError(f"sampling_params sets {name!r} twice (through {key!r} and an alias); keep one")
    if name == "do_sample":
        _check(isinstance(value, bool), f"do_sample must be a bool, got {value!r}")
        kwargs["_greedy"] = not value
    elif name == "repetition_penalty":
        _check(
            value is None or value == 1.0,
            f"repetition_penalty={value!r} is not supported by the rollout engines; drop it (1.0 = off)",
        )
    elif name == "n":
        _check(
            value is None or value == 1,
            f"n={value!r}: one request generates one sample; set actor_rollout_ref.rollout.n for GRPO groups",
        )
    elif name == "logprobs":
        _check(
            value is None or value in (0, 1, True, False),
            f"logprobs={value!r}: only the sampled token's log-prob is returned; pass True or False",
        )
        kwargs["logprobs"] = value is not None and value is not False
    elif name == "stop_token_ids":
        kwargs["stop_token_ids"] = () if value is None else value
    elif name in _FIELDS:
        kwargs[name] = value
    else:
        raise SamplingParamsError(f"unknown sampling parameter {key!r}; known: {', '.join(_ACCEPTED_KEYS)}")


@dataclass
class TokenOutput:
    """What one generate request produced."""

    token_ids: list[int] = field(default_factory=list)
    """Generated token ids (a sampled stop token is included)."""
    log_probs: list[float] = field(default_factory=list)
    """Log-prob of each token under the (temperature-scaled) distribution it was sampled from, by
    the weights that sampled it; empty when the request asked for logprobs=False."""
    stop_reason: StopReason = "length"
    """"stop" (a stop/EOS token), "length" (max_tokens or context limit) or "aborted" (abort_all)."""
    min_weight_version: int = 0
    """Oldest weight version that produced any of the tokens (the current one if there are none)."""
    max_weight_version: int = 0
    """Newest weight version that produced any of the tokens."""

    def __post_init__(self) -> None:
        if self.stop_reason not in STOP_REASONS:
            raise ValueError(f"stop_reason must be one of {STOP_REASONS}, got {self.stop_reason!r}")


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SamplingParamsError(message)


def _is_number(value: Any) -> bool:  # numbers.* so numpy scalars from parquet/OmegaConf pass
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)
