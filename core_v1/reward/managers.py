"""verl's reward managers on V1: what `reward.reward_manager.name` changes in scoring.

V1 scores each trajectory as it finishes (`core_v1.reward.loop.RewardScorer`), so a reward
manager here is a policy around `compute_score`:

- `naive` (default): the score as `compute_score` returns it.
- `dapo`: plus DAPO's soft overlong punishment. With `overlong_buffer_cfg.enable`, a response
  longer than `max_resp_len - len` tokens loses `(length - (max_resp_len - len)) / len *
  penalty_factor`; with `log`, `overlong_reward` and `overlong` are reported. Both come from
  `reward.reward_kwargs` (verl's `reward_kwargs.{max_resp_len, overlong_buffer_cfg}`; `max_resp_len`
  defaults to `data.max_response_length`) and are not passed on to `compute_score`.
- `prime`: verl runs each call in a worker process with a time limit and scores a call that raises
  or runs out of time 0.0; V1 already runs every call off the event loop with `reward.timeout_s`,
  so prime is the per-sample score with verl's failure rule: such a sample scores 0.0 and trains
  (where the other managers mark it failed), counted as `reward/scored_zero_on_failure/mean` (the
  share of prime-scored samples it happened to). verl's limit was a fixed 300 s; V1's is
  `reward.timeout_s`.
- `gdpo` (verl 0.7.1, for `algorithm.adv_estimator=gdpo`): the per-sample score, with the run's
  `trainer.experiment_name` added to the `extra_info` that `compute_score` gets, as verl's GDPO
  manager adds it (verl's GDPO example scorer picks the chat format by that name). The dict's
  reward components reach GDPO as with every manager (the row's `reward_extra`).
- `batch`: verl's one call with lists, `compute_score(data_sources=[...], solution_strs=[...],
  ground_truths=[...], extra_infos=[...], **reward_kwargs)` returning one score (a number, or a
  dict with `score` and extra numbers) per response, in order. It needs
  `reward.custom_reward_function` (the built-in scorers score one sample). The batch is the
  trajectories that finish together (in one event-loop turn of an agent-loop worker: an engine
  step returns many at once), not verl's whole generation batch. A call that raises, runs past
  `reward.timeout_s` or returns a list of the wrong length marks every sample of that call failed.
  Validation scores through the same workers; ReMax's greedy baselines of a step share one call.
  `extra_infos` holds each row's own `extra_info` (verl 0.7.1 also adds `rollout_reward_scores`
  there, which no V1 manager adds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from core_v1.config import ConfigError

PER_SAMPLE = ("naive", "prime", "gdpo")
BATCHED = ("batch",)
_MANAGER_KWARGS = {"dapo": ("max_resp_len", "overlong_buffer_cfg")}


@dataclass(frozen=True)
class OverlongPenalty:
    """DAPO's overlong buffer (verl's `overlong_buffer_cfg`)."""

    max_resp_len: int
    buffer_len: int
    penalty_factor: float = 1.0
    log: bool = False

    def apply(self, score: float, extra: dict[str, float], response_length: Optional[int]) -> float:
        if response_length is None:  # a score without a response (a ReMax greedy baseline): as is
            return score
        expected = self.max_resp_len - self.buffer_len
        penalty = min(-(response_length - expected) / self.buffer_len * self.penalty_factor, 0.0)
        if self.log:
            extra["overlong_reward"] = penalty
            extra["overlong"] = float(penalty < 0)
        return score + penalty


@dataclass(frozen=True)
class RewardManagerPolicy:
    """What the configured reward manager changes: the kwargs `compute_score` gets, the entries it
    adds to each row's `extra_info`, the penalty, and whether one call scores a list of responses."""

    name: str
    score_kwargs: dict
    overlong: Optional[OverlongPenalty] = None
    extra_info: dict = field(default_factory=dict)
    batched: bool = False  # `batch`: one call with lists for the responses that finish together
    zero_on_failure: bool = False  # `prime`: a call that raises or times out scores 0.0 (verl's rule)

    def adjust(self, score: float, extra: dict[str, float], response_length: Optional[int]) -> float:
        return self.overlong.apply(score, extra, response_length) if self.overlong else score

    def extra_info_for(self, row_extra_info: Any) -> Any:
        """The `extra_info` `compute_score` gets for a row (the row's own, untouched, plus ours)."""
        return {**dict(row_extra_info or {}), **self.extra_info} if self.extra_info else row_extra_info


def reward_manager_policy(
    reward_config: Any, max_response_length: Optional[int] = None, experiment_name: Optional[str] = None
) -> RewardManagerPolicy:
    """The policy for `reward.reward_manager.name`; ConfigError for a manager V1 cannot run.
    `experiment_name` is `trainer.experiment_name`, which `gdpo` passes on in `extra_info`."""
    manager = getattr(reward_config, "reward_manager", None)  # absent: a bare reward section, naive
    name = getattr(manager, "name", None) or "naive"
    kwargs = {
        **dict(reward_config.reward_kwargs or {}),
        **dict(reward_config.custom_reward_function.reward_kwargs or {}),
    }
    if name not in (*PER_SAMPLE, *BATCHED, "dapo"):
        raise ConfigError(
            f"unknown reward manager {name!r} (reward.reward_manager.name); V1 runs naive, dapo, "
            "prime, gdpo and batch (write your own scoring in reward.custom_reward_function)"
        )
    if name in BATCHED and not reward_config.custom_reward_function.path:
        raise ConfigError(
            "reward manager 'batch' (reward.reward_manager.name) calls a function that scores lists of "
            "responses; set reward.custom_reward_function.path (and .name) to one: the built-in "
            "scorers score one sample at a time"
        )
    manager_kwargs = {k: kwargs.pop(k) for k in _MANAGER_KWARGS.get(name, ()) if k in kwargs}
    extra_info = {"experiment_name": experiment_name or ""} if name == "gdpo" else {}
    return RewardManagerPolicy(
        name,
        kwargs,
        _overlong(manager_kwargs, max_response_length),
        extra_info,
        batched=name in BATCHED,
        zero_on_failure=name == "prime",
    )


def _overlong(manager_kwargs: dict, max_response_length: Optional[int]) -> Optional[OverlongPenalty]:
    buffer = manager_kwargs.get("overlong_buffer_cfg")
    if not buffer or not _get(buffer, "enable", False):
        return None
    max_resp_len = manager_kwargs.get("max_resp_len") or max_response_length
    buffer_len = int(_get(buffer, "len", 0))
    if not max_resp_len or buffer_len <= 0 or buffer_len > int(max_resp_len):
        raise ConfigError(
            f"reward.reward_kwargs.overlong_buffer_cfg.len={buffer_len} must be > 0 and at most the "
            f"maximum response length ({max_resp_len})"
        )
    return OverlongPenalty(
        int(max_resp_len), buffer_len, float(_get(buffer, "penalty_factor", 1.0)), bool(_get(buffer, "log", False))
    )


def _get(section: Any, key: str, default: Any) -> Any:
    value = section.get(key, default) if hasattr(section, "get") else getattr(section, key, default)
    return default if value is None else value
