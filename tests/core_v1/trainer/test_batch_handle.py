"""The trainer's handle (`BatchMeta`) carries keys, tags and scalar objects, never the bulky objects a
row holds (chats, ground truths, tool arguments): those stay in the store and a stage reads them by
name. 1,024 rows of 4k-character chats must not make the driver's handle 4 MB."""

import uuid

import torch

from core_v1.agent_loop.worker import object_tags
from core_v1.batch.meta import describe_rows, is_handle_value
from core_v1.transfer_store import make_transfer_store, trajectory_key

CHAT = [{"role": "system", "content": "x" * 4096}, {"role": "user", "content": "What is 2+3?"}]


def _rows(uid: str, count: int, tagged: bool = True) -> tuple[dict, dict]:
    rows, tags = {}, {}
    for session in range(count):
        row = {
            "prompt_ids": torch.arange(3),
            "response_ids": torch.arange(2),
            "response_mask": torch.ones(2),
            "raw_prompt": CHAT,
            "reward_model": {"ground_truth": "5"},
            "extra_info": {"index": session},
            "data_source": "gsm8k",
            "num_turns": 2,
            "reward_score": float(session % 2),
            "reward_extra": {"acc": session % 2, "pred": "5"},
            "agent_name": "single_turn_agent",
        }
        key = trajectory_key(uid, session)
        rows[key] = row
        tags[key] = {"status": "finished", "prompt_len": 3, "response_len": 2, **(object_tags(row) if tagged else {})}
    return rows, tags


def _handle(tagged: bool):
    store, uid = make_transfer_store("local"), uuid.uuid4().hex
    rows, tags = _rows(uid, 4, tagged)
    store.put("step", rows, tags)
    return store, describe_rows(store, "step", list(rows), tags)


def test_the_handle_carries_scalars_and_the_reward_extras_and_names_the_bulky_objects():
    for tagged in (True, False):  # rows an agent loop tagged, and rows put without the tags
        store, meta = _handle(tagged)
        assert {"data_source", "num_turns", "agent_name", "reward_extra", "score"} <= set(meta.columns)
        assert not {"raw_prompt", "reward_model", "extra_info", "prompt_ids"} & set(meta.columns), tagged
        assert {"raw_prompt", "reward_model", "extra_info"} <= meta.objects
        assert meta.column("score") == [0.0, 1.0, 0.0, 1.0]
        # What a stage reads by name (a reward model's chats, ReMax's ground truths) is the row's own.
        objects = store.get_objects(meta.partition, meta.keys, ["raw_prompt", "reward_model"])
        assert objects["raw_prompt"] == [CHAT] * 4 and objects["reward_model"][0] == {"ground_truth": "5"}
        assert meta.select([3, 0]).objects == meta.objects


def test_what_rides_in_the_handle():
    assert all(is_handle_value("any", value) for value in ("gsm8k", 3, 0.5, True, None))
    assert is_handle_value("reward_extra", {"acc": 1.0}) and is_handle_value("agent_metrics", {"turns": 2})
    assert not any(
        is_handle_value(name, value)
        for name, value in [
            ("raw_prompt", CHAT),
            ("reward_model", {"ground_truth": "5"}),
            ("tools_kwargs", {}),
            ("ids", [1, 2]),
            ("logits", torch.zeros(2)),
        ]
    )
