# my_agent_loop.py — the seed note's example, with only its import lines changed
# (and a real request id in place of the note's placeholder `uuid`).
from typing import Any
from uuid import uuid4

from core_v1.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    register,
)


@register("my_agent")
class MyAgentLoop(AgentLoopBase):
    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        prompt_ids = await self.apply_chat_template(messages)

        # 多轮就在这里 while 循环：生成 → 解析工具调用 → 追加观测 → 再生成
        out = await self.server_manager.generate(
            request_id=uuid4().hex,
            prompt_ids=prompt_ids,
            sampling_params=sampling_params,
        )

        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=out.token_ids,
            response_mask=[1] * len(out.token_ids),  # 工具返回段可置 0
            num_turns=2,
        )
