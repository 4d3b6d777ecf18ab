"""A tutor that plays the user's turn (an interaction, core_v1/agent_loop/interaction.py).

After each of the model's answers it checks the last message against the row's `ground_truth`
(from the row's `interaction_kwargs`): a right answer ends the conversation with score 1; a wrong
one is told to try again (score 0), at most `max_tries` times, after which the tutor gives the
answer and ends it. Written against verl's interaction API (same method names and signatures), so
it runs on verl too once its import says `verl.interactions.base`.
"""

from __future__ import annotations

from typing import Any, Optional

from core_v1.agent_loop.interaction import BaseInteraction


class TutorInteraction(BaseInteraction):
    def __init__(self, config: dict[str, Any]):
        super().__init__(config)
        self.max_tries = int(config.get("max_tries", 2))
        self._sessions: dict[str, dict[str, Any]] = {}  # per trajectory: the answer and the tries so far

    async def start_interaction(self, instance_id: Optional[str] = None, ground_truth: str = "", **kwargs: Any) -> str:
        instance_id = await super().start_interaction(instance_id)
        self._sessions[instance_id] = {"answer": str(ground_truth), "tries": 0}
        return instance_id

    async def generate_response(
        self, instance_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> tuple[bool, str, float, dict[str, Any]]:
        session = self._sessions[instance_id]
        session["tries"] += 1
        said = str(messages[-1]["content"]).strip()
        if said == session["answer"]:
            return True, "Right.", 1.0, {}
        if session["tries"] >= self.max_tries:
            return True, f"No, it is {session['answer']}.", 0.0, {}
        return False, "Not quite, try again.", 0.0, {}

    async def finalize_interaction(self, instance_id: Optional[str] = None, **kwargs: Any) -> None:
        self._sessions.pop(instance_id, None)
