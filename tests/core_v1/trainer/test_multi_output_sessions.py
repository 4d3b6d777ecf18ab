"""The session is the unit of the advantage: an agent loop that returns several outputs per session
gets one group statistic per session, and every output of a session shares its advantage."""

from __future__ import annotations

import json
import textwrap

import pytest
import torch
from tensordict import TensorDict

from core_v1.algorithms import compute_grpo_outcome_advantage, get_adv_estimator_fn
from core_v1.config import load_config
from core_v1.main_ppo import run_v1
from core_v1.batch.layout import column, session_layout
from core_v1.trainer.stages import advantage_stage, outcome_advantages
from tests.conftest import quickstart_overrides


def _batch(scores, uids, sessions, outputs) -> TensorDict:
    rows = len(scores)
    token_scores = torch.zeros(rows, 3)
    token_scores[:, -1] = torch.tensor(scores)
    batch = TensorDict({"token_level_scores": token_scores, "response_mask": torch.ones(rows, 3)}, batch_size=[rows])
    batch["uid"], batch["session_id"], batch["output_index"] = uids, sessions, outputs
    return batch


class _Config:
    class algorithm:
        adv_estimator, gamma, lam, norm_adv_by_std_in_grpo = "grpo", 1.0, 1.0, True
        gdpo_reward_keys = gdpo_reward_weights = None  # GDPO's options, which every estimator is handed
        kl_penalty = "kl"  # read by the in-reward KL stage, which kl_ctrl=None leaves off


def _advantages(batch: TensorDict) -> torch.Tensor:
    """The advantages of the stage the trainer runs over the step's rows (rank 0's, V0's), checked
    against the per-row path the trainer takes for GRPO (one score per row, in the driver)."""
    sessions, output_index = session_layout(batch)
    uids = column(batch, "uid")
    advantages = advantage_stage(
        batch, {}, algorithm=_Config.algorithm, kl_ctrl=None, uids=uids, sessions=sessions, output_index=output_index
    )["advantages"]
    per_row, _ = outcome_advantages(
        batch["token_level_scores"].sum(-1).tolist(),
        batch["response_mask"].sum(-1).tolist(),
        {},
        algorithm=_Config.algorithm,
        uids=uids,
        sessions=sessions,
        output_index=output_index,
    )
    assert torch.allclose(advantages[:, 0], torch.tensor(per_row))
    return advantages


def test_outputs_of_a_session_share_the_advantage_of_its_last_output():
    # One prompt, two sessions; session 0 has three outputs (only its last is scored), session 1 one.
    batch = _batch(scores=[0.0, 0.0, 1.0, 0.0], uids=["p"] * 4, sessions=[0, 0, 0, 1], outputs=[0, 1, 2, 0])
    advantages = _advantages(batch)[:, 0]
    expected, _ = compute_grpo_outcome_advantage(
        token_level_rewards=torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]),
        response_mask=torch.ones(2, 3),
        index=["p", "p"],
    )
    assert torch.allclose(advantages, torch.stack([expected[0, 0]] * 3 + [expected[1, 0]]))
    assert advantages[0] > 0 > advantages[3]  # counted per row, the zeros of session 0 would pull its mean down


def test_single_output_sessions_are_estimated_as_before():
    batch = _batch(scores=[1.0, 0.0, 0.5, 0.0], uids=["a", "a", "b", "b"], sessions=[0, 1, 0, 1], outputs=[0] * 4)
    plain, _ = get_adv_estimator_fn("grpo")(
        token_level_rewards=batch["token_level_scores"],
        response_mask=batch["response_mask"],
        index=["a", "a", "b", "b"],
    )
    assert torch.equal(_advantages(batch), plain)
    assert session_layout(batch)[0] == ["a_0", "a_1", "b_0", "b_1"]


@pytest.mark.slow
def test_a_two_output_agent_loop_trains_with_the_session_as_unit(tiny_assets, ray_runtime, tmp_path):
    loop_file = tmp_path / "two_outputs.py"
    loop_file.write_text(
        textwrap.dedent("""
        from core_v1.agent_loop import AgentLoopBase, AgentLoopOutput, register

        @register("two_outputs")
        class TwoOutputs(AgentLoopBase):
            async def run(self, sampling_params, **kwargs):
                prompt_ids = await self.apply_chat_template(kwargs["raw_prompt"])
                out = await self.server_manager.generate(request_id=kwargs["uid"] + str(kwargs["session_id"]),
                                                         prompt_ids=prompt_ids, sampling_params=sampling_params)
                ids, log_probs = list(out.token_ids), list(out.log_probs)
                first = AgentLoopOutput(prompt_ids=prompt_ids, response_ids=ids[:1], response_mask=[1] * len(ids[:1]),
                                        response_logprobs=log_probs[:1])
                last = AgentLoopOutput(prompt_ids=prompt_ids, response_ids=ids, response_mask=[1] * len(ids),
                                       response_logprobs=log_probs)
                return [first, last]
    """)
    )
    config = load_config(
        quickstart_overrides(
            tiny_assets,
            tmp_path,
            2,
            f"trainer.v1.plugins=[{loop_file}]",
            "trainer.test_freq=-1",
            "actor_rollout_ref.rollout.agent.default_agent_loop=two_outputs",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.rollout.n=2",
        ),
        config_name="quickstart",
    )
    assert run_v1(config) == 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(r["rollout/failed_samples"] == 0 for r in rows)
