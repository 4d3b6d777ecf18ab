"""A vision-language critic (core_v1.workers.model.load_value_model on a tiny Qwen2-VL made locally):
the value head sits on the VLM's body, its forwards take the rows' images from the store field as
the actor's do, so the values depend on the image; an update moves them towards the returns, and
the checkpoint's `model/` export loads back as the same critic."""

from __future__ import annotations

import pytest
import torch

from core_v1.agent_loop.vision import encode_vision_prompt, load_policy_processor
from core_v1.batch.layout import build_training_batch
from core_v1.config import load_config
from core_v1.transfer_store.batching import rows_to_tensordict
from core_v1.workers import CriticEngine
from examples.tiny_vlm import make_tiny_vlm
from tests.core_v1.test_vision import _image, _model_config
from tests.core_v1.test_vision_qwen3 import make_tiny_qwen3_vl


def _config(vlm_dir: str, *extra: str):
    return load_config(
        [
            f"actor_rollout_ref.model.path={vlm_dir}",
            "data.train_files=unused.parquet",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=1",
            "algorithm.adv_estimator=gae",
            "critic.optim.lr=1e-3",
            *extra,
        ]
    )


def _batch(vlm_dir: str, pixel_values: tuple[int, ...]):
    processor = load_policy_processor(_model_config(vlm_dir))
    rows = []
    for value in pixel_values:
        ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(value)])
        rows.append(
            {
                "prompt_ids": torch.tensor(ids),
                "response_ids": torch.tensor([5, 6, 3]),
                "response_mask": torch.ones(3, dtype=torch.long),
                "multi_modal_inputs": inputs,
            }
        )
    names = [str(i) for i in range(len(rows))]
    return build_training_batch(rows_to_tensordict(rows, names, list(rows[0])), 0)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])  # Qwen3-VL: its deepstack features reach the values
def test_a_vision_critic_values_the_image_and_learns_and_its_export_loads_back(family, tmp_path):
    if family == "qwen2_vl":
        vlm_dir = str(make_tiny_vlm(tmp_path / "vlm", [str(d) for d in range(10)]))
    else:
        vlm_dir = str(make_tiny_qwen3_vl(tmp_path / "vlm"))
    critic = CriticEngine(_config(vlm_dir))
    batch = _batch(vlm_dir, (0, 255))
    values = critic.compute_values(batch)
    assert values.shape == (2, 3) and torch.isfinite(values).all()
    # Same tokens, other image: other values (a text critic could not tell the rows apart).
    assert (values[0] - values[1]).abs().max() > 1e-4

    batch["values"], batch["returns"] = values, torch.tensor([[1.0] * 3, [-1.0] * 3])
    errors = []
    for _ in range(3):
        errors.append(float((critic.compute_values(batch) - batch["returns"]).pow(2).mean()))
        critic.update_critic(batch)
    assert errors[-1] < errors[0]

    critic.save_checkpoint(tmp_path / "step")
    reloaded = CriticEngine(_config(vlm_dir), model_path=str(tmp_path / "step" / "model"))
    assert torch.allclose(reloaded.compute_values(batch), critic.compute_values(batch), atol=1e-6)
