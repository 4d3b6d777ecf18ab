"""The generation pipeline: how prompts become prompt groups generating in the background.

`GenerationPipeline` owns the whole submission side of training, so that neither the trainer nor
the replay buffer has to reach into the other:

- it takes prompts from the prompt feed (`PromptFeed`) and submits them through the agent-loop
  manager (`submit`), a whole batch per step or a few to replace evicted groups;
- it keeps the *group ledger* of the train partition: groups submitted, trained and evicted, so
  the groups in flight are `submitted - trained - evicted` without asking the store (`in_flight`),
  and the async modes top the pipeline up from that count (`top_up`);
- the replay buffer reports what it trained and evicted (`record_trained`, `record_evicted`);
  every evicted group is replaced at once by a fresh prompt, so a batch that lost groups to
  staleness, failure or DAPO filtering can still fill;
- `accounting` proves the ledger against the store's live group rows (an independent count);
- its state (prompt feed position, submission count, ledger) goes into checkpoints
  (`state_dict`), and `reissue_unfinished_sessions` restarts what was generating at a save.

Dependencies run one way: trainer -> pipeline, trainer -> replay buffer -> pipeline.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from core_v1.trainer.prompt_feed import PromptFeed
from core_v1.transfer_store import AccountingError, group_key, parse_key

TRAIN = "train"


@dataclass
class GroupLedger:
    """Prompt groups of the train partition by fate: submitted, trained, evicted (by reason)."""

    submitted: int = 0
    trained: int = 0
    evicted: Counter = field(default_factory=Counter)  # reason -> groups

    @property
    def in_flight(self) -> int:
        return self.submitted - self.trained - sum(self.evicted.values())

    def check(self, live_groups: int) -> dict[str, float]:
        """The ledger as metrics; raises AccountingError unless the groups it has in flight are
        exactly the `live_groups` the store holds (submitted == trained + evicted + live)."""
        evicted = sum(self.evicted.values())
        if self.in_flight != live_groups:
            hint = (
                " (a replay buffer that takes groups without reporting them: a custom sampler's `sample` "
                "calls super().sample(), or self.report_trained for what it takes)"
                if self.in_flight > live_groups
                else ""
            )
            raise AccountingError(
                f"prompt groups do not add up: submitted {self.submitted} != trained {self.trained} "
                f"+ evicted {evicted} {dict(self.evicted)} + in flight {live_groups}{hint}"
            )
        prefix = "training/accounting"
        return {
            f"{prefix}/submitted_groups": float(self.submitted),
            f"{prefix}/trained_groups": float(self.trained),
            f"{prefix}/evicted_groups": float(evicted),
            f"{prefix}/in_flight_groups": float(live_groups),
        }

    def state_dict(self) -> dict:
        return {"submitted": self.submitted, "trained": self.trained, "evicted": dict(self.evicted)}

    def load_state_dict(self, state: dict) -> None:
        self.submitted, self.trained = int(state["submitted"]), int(state["trained"])
        self.evicted = Counter(state["evicted"])


class GenerationPipeline:
    """Submission, the in-flight count and refills of the train partition (module docstring)."""

    def __init__(self, agent_loop_manager: Any, prompts: PromptFeed, store: Any):
        self.agent_loop_manager = agent_loop_manager
        self.prompts = prompts
        self.store = store
        self.ledger = GroupLedger()

    def submit(self, num_groups: int, global_steps: int) -> list[str]:
        """Start generation for the next `num_groups` prompts, tagged as submitted at `global_steps`;
        returns their uids at once."""
        if num_groups <= 0:
            return []
        uids = self.agent_loop_manager.submit(TRAIN, self.prompts.take(num_groups), global_steps)
        self.ledger.submitted += len(uids)
        return uids

    @property
    def in_flight(self) -> int:
        """Prompt groups submitted and not yet trained or evicted."""
        return self.ledger.in_flight

    def top_up(self, depth: int, global_steps: int) -> list[str]:
        """Submit as many prompts as bring the groups in flight up to `depth`."""
        return self.submit(depth - self.in_flight, global_steps)

    def record_trained(self, num_groups: int) -> None:
        self.ledger.trained += num_groups

    def record_evicted(self, groups: Counter, global_steps: int) -> list[str]:
        """Count evicted groups (reason -> groups) and replace each with a fresh prompt."""
        self.ledger.evicted.update(groups)
        return self.submit(sum(groups.values()), global_steps)

    def accounting(self) -> dict[str, float]:
        """The ledger checked against the group rows live in the store, as metrics (raises
        AccountingError when a group was lost or counted twice)."""
        return self.ledger.check(live_group_count(self.store))

    # ------------------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        # The submission count seeds every later uid and sample: restoring it makes a resumed run
        # draw exactly what the uninterrupted run would have.
        return {
            "prompt_feed": self.prompts.state_dict(),
            "submitted_prompts": self.agent_loop_manager.submitted,
            "ledger": self.ledger.state_dict(),
        }

    def load_state_dict(self, state: dict) -> None:
        # Checkpoints written before the prompt feed was saved hold only the sampler's position.
        self.prompts.load_state_dict(state.get("prompt_feed") or {"sampler": state["sampler"], "pending": []})
        self.agent_loop_manager.submitted = int(state.get("submitted_prompts", 0))
        if "ledger" in state:
            self.ledger.load_state_dict(state["ledger"])

    def reissue_unfinished_sessions(self) -> tuple[int, int]:
        """Run again every session of a restored group that had not reported; returns
        (groups in flight, sessions re-issued)."""
        tags = self.store.list(TRAIN)
        missing = unfinished_sessions(tags)
        groups_in_flight = group_count(tags)
        if not missing:
            return groups_in_flight, 0
        keys = [group_key(uid) for uid in missing]
        rows = self.store.get(TRAIN, keys, fields=["row"])["row"].tolist()
        reissued = self.agent_loop_manager.reissue(
            TRAIN, [(uid, row, tags[key], missing[uid]) for uid, key, row in zip(missing, keys, rows)]
        )
        return groups_in_flight, reissued


def live_group_count(store: Any) -> int:
    """Prompt groups the store holds in the train partition (generating, or done and not trained)."""
    return group_count(store.list(TRAIN))


def group_count(tags: dict[str, dict]) -> int:
    """Prompt-group rows in a store listing (the other rows are trajectories)."""
    return sum(1 for key in tags if parse_key(key).is_group)


def unfinished_sessions(tags: dict[str, dict]) -> dict[str, list[int]]:
    """`{uid: session ids that have not reported}` for every live group of a store listing."""
    reported: dict[str, set[int]] = {}
    expected: dict[str, int] = {}
    for key, row_tags in tags.items():
        parsed = parse_key(key)
        if parsed.is_group:
            expected[parsed.uid] = int(row_tags.get("n", 1))
        else:
            reported.setdefault(parsed.uid, set()).add(parsed.session_id)
    missing = {uid: sorted(set(range(n)) - reported.get(uid, set())) for uid, n in expected.items()}
    return {uid: sessions for uid, sessions in missing.items() if sessions}
