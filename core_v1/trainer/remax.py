"""ReMax on V1: the greedy-baseline stage that the `remax` advantage estimator needs.

ReMax (arXiv 2310.10505) subtracts, from each sample's return, the reward of a greedy
(temperature 0) response to the same prompt. `compute_remax_outcome_advantage` reads that
baseline from the batch field `reward_baselines` [B]; this module is what writes it:
`greedy_baseline_rewards`, called from the reward stage when `algorithm.adv_estimator=remax`,

1. takes the prompt of each group in the batch (the left-padded `prompts`, unpadded),
2. generates one greedy response per group on the rollout replicas (current weights),
3. scores it with the run's reward function (`core_v1.reward.RewardScorer`, as the agent loops
   score samples) and, when a reward model is on, with that model as the reward stage scores
   the samples (`core_v1.reward.reward_model`), and
4. gives every row of the group that score as its `reward_baselines`.

The greedy requests go straight to the replicas, not through the agent-loop manager: they are
not trajectories to train on, they take no submission number (so they leave the uids and seeds
of later batches alone), and V0's baseline generation does the same, so V0 and V1 ReMax agree.

Wiring: `PPOTrainer._compute_reward_colocate` calls `greedy_baseline_rewards` when the estimator
is `remax`, in every mode; `PPOTrainer.check_config` refuses `remax` in a mode with partial
rollout: there the replicas are paused with requests in flight while the trainer trains, so a
greedy request would wait for the next weight update.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

import torch
from tensordict import TensorDict

from core_v1.agent_loop.manager import sampling_params_for
from core_v1.reward.loop import RewardScorer
from core_v1.reward.reward_model import combine_sequence_scores
from core_v1.batch.layout import column

REMAX_OBJECTS = ("data_source", "reward_model", "extra_info", "raw_prompt")
"""The row fields a greedy baseline's scoring reads (the trainer reads them from the store)."""


def greedy_baseline_rewards(
    batch: TensorDict, *, config: Any, components: Any, reward_model: Optional[Any]
) -> torch.Tensor:
    """The reward of a greedy response to each row's prompt, [B] (one generation per prompt group),
    generated on the run's replicas (`components`: `TrainerComponents`) and scored by the run's
    reward function and `reward_model` (None: no reward model)."""
    uids = column(batch, "uid")
    first_rows = first_row_of_each_group(uids)
    prompt_width = batch["prompts"].shape[1]
    prompts = [batch["prompts"][row][batch["attention_mask"][row, :prompt_width].bool()].tolist() for row in first_rows]
    keys = (*REMAX_OBJECTS, config.data.reward_fn_key)
    columns = {key: column(batch, key) for key in keys if key in batch.keys()}
    rows = [{key: values[row] for key, values in columns.items()} for row in first_rows]
    manager = components.checkpoint_manager
    was_asleep = manager.asleep
    manager.wake_up_replicas()  # sync mode put them to sleep when the batch was complete
    try:
        scores = manager.loop.run(_greedy_scores(config, components, reward_model, prompts, rows))
    finally:
        if was_asleep:
            manager.sleep_replicas()
    return group_score_per_row(uids, first_rows, scores)


def first_row_of_each_group(uids: list) -> list[int]:
    """The first row of each prompt group, in order: the greedy baseline is generated once per group."""
    uids = list(uids)
    return [uids.index(uid) for uid in dict.fromkeys(uids)]


def group_score_per_row(uids: list, first_rows: list[int], scores: list[float]) -> torch.Tensor:
    """[B]: every row gets the baseline score of its group (`scores[i]` belongs to `first_rows[i]`)."""
    uids = list(uids)
    by_uid = {uids[row]: score for row, score in zip(first_rows, scores)}
    return torch.tensor([by_uid[uid] for uid in uids], dtype=torch.float32)


async def _greedy_scores(
    config: Any, components: Any, reward_model: Optional[Any], prompts: list[list[int]], rows: list[dict]
) -> list[float]:
    params = {**sampling_params_for(config, validate=False), "temperature": 0.0}
    limit = config.actor_rollout_ref.rollout.response_length
    outputs = await asyncio.gather(
        *(components.rollout_client.generate(f"remax-baseline-{i}", ids, params) for i, ids in enumerate(prompts))
    )
    scorer = RewardScorer(
        config.reward, experiment_name=config.trainer.experiment_name, source_key=config.data.reward_fn_key
    )
    texts = [components.tokenizer.decode(list(o.token_ids)[:limit], skip_special_tokens=True) for o in outputs]
    results = await asyncio.gather(*(scorer.score(row, text) for row, text in zip(rows, texts)))
    scores = [score for score, _ in results]
    if reward_model is not None:  # the baseline is scored as the samples are
        responses = [list(o.token_ids)[:limit] for o in outputs]
        model_scores = reward_model.score(prompts, responses, [row.get("raw_prompt") for row in rows])
        scores = combine_sequence_scores(
            torch.tensor(scores), model_scores, config.reward.reward_model.combine
        ).tolist()
    return scores
