"""`single_turn_agent`: one prompt, one generation; the V0 behaviour as an agent loop."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from core_v1.agent_loop.base import AgentLoopBase, AgentLoopOutput, register


@register("single_turn_agent")
class SingleTurnAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        prompt_ids, images = await self.encode_prompt(kwargs)
        with_images = {"multi_modal_inputs": images} if images else {}
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params=sampling_params, **with_images
        )
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=list(output.token_ids),
            response_mask=[1] * len(output.token_ids),
            response_logprobs=list(output.log_probs) if output.log_probs is not None else None,
            num_turns=2,
            multi_modal_inputs=images,
        )
