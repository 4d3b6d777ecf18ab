"""Vision-language models on the V1 path, on a tiny Qwen2-VL made locally (examples/tiny_vlm.py):
verl's multimodal rows -> processor -> the hf engine -> the training forwards.

The central check: the engine's sampling log-probs and the actor's forward over the stored row
(`multi_modal_inputs` per row) agree, and both change when the image does.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from core_v1.agent_loop.vision import VisionDataError, encode_vision_prompt, load_policy_processor, vision_messages
from core_v1.batch.layout import build_training_batch
from core_v1.config import load_config
from core_v1.rollout.engines.hf import HFEngine
from core_v1.rollout.types import SamplingParams
from core_v1.transfer_store.batching import rows_to_tensordict
from core_v1.workers import ActorEngine
from core_v1.workers.model import load_causal_lm, response_log_probs
from core_v1.utils.vision import vision_tower
from examples.tiny_vlm import make_tiny_vlm
from tests.core_v1.test_vision_qwen3 import make_tiny_qwen3_vl


@pytest.fixture(scope="module")
def vlm_dir(tmp_path_factory) -> str:
    return str(make_tiny_vlm(tmp_path_factory.mktemp("tiny_vlm"), [str(d) for d in range(10)]))


@pytest.fixture(scope="module")
def qwen2_5_vl_dir(tmp_path_factory) -> str:
    return str(
        make_tiny_vlm(tmp_path_factory.mktemp("tiny_qwen2_5_vl"), [str(d) for d in range(10)], family="qwen2_5_vl")
    )


@pytest.fixture(scope="module")
def qwen3_vl_dir(tmp_path_factory) -> str:
    return str(make_tiny_qwen3_vl(tmp_path_factory.mktemp("tiny_qwen3_vl")))


@pytest.fixture(scope="module")
def processor(vlm_dir):
    return load_policy_processor(_model_config(vlm_dir))


def _model_config(path: str) -> SimpleNamespace:
    return SimpleNamespace(
        actor_rollout_ref=SimpleNamespace(
            model=SimpleNamespace(path=path, trust_remote_code=False, custom_chat_template=None)
        ),
        data=SimpleNamespace(trust_remote_code=False),
    )


def _image(value: int) -> Image.Image:
    return Image.fromarray(np.full((56, 56, 3), value, dtype=np.uint8))


def test_image_placeholders_become_parts_one_image_each():
    messages = vision_messages([{"role": "user", "content": "<image>how many?<image>"}], num_images=2)
    assert messages[0]["content"] == [{"type": "image"}, {"type": "text", "text": "how many?"}, {"type": "image"}]
    with pytest.raises(VisionDataError, match="1 <image> placeholders for 2 images"):
        vision_messages([{"role": "user", "content": "<image>how many?"}], num_images=2)


def test_a_text_model_has_no_processor(tiny_assets):
    assert load_policy_processor(_model_config(str(tiny_assets["model"]))) is None


def test_the_processor_expands_an_image_to_its_tokens(processor):
    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    # 56 x 56 pixels: a 4 x 4 grid of 14-pixel patches, merged 2 x 2 into 4 image tokens.
    assert ids.count(processor.image_token_id) == 4
    assert inputs["image_grid_thw"].tolist() == [[1, 4, 4]] and tuple(inputs["pixel_values"].shape) == (16, 1176)


def test_a_repeated_prompt_is_encoded_once_and_each_caller_gets_its_own_tensors(processor, monkeypatch):
    from core_v1.agent_loop import vision

    calls = []
    encode = vision._encode_vision
    monkeypatch.setattr(vision, "_encode_vision", lambda *args: calls.append(args) or encode(*args))
    chat = [{"role": "user", "content": "<image>count= again"}]
    first, second = (encode_vision_prompt(processor, chat, [_image(7)]) for _ in range(2))
    assert len(calls) == 1 and first[0] == second[0]
    assert torch.equal(first[1]["pixel_values"], second[1]["pixel_values"])
    first[1]["pixel_values"].zero_()  # a caller's copy, not the remembered one
    assert not torch.equal(
        encode_vision_prompt(processor, chat, [_image(7)])[1]["pixel_values"], first[1]["pixel_values"]
    )
    other_image = encode_vision_prompt(processor, chat, [_image(8)])
    assert len(calls) == 2 and not torch.equal(other_image[1]["pixel_values"], second[1]["pixel_values"])


def _generate(vlm_dir: str, prompts: list[tuple[list[int], dict]]) -> list:
    engine = HFEngine(vlm_dir, device="cpu", max_num_seqs=4)
    params = SamplingParams(max_tokens=6, seed=1, logprobs=True, temperature=1.0, ignore_eos=True)

    async def run():
        return await asyncio.gather(
            *(
                engine.generate(str(i), ids, params, multi_modal_inputs=inputs)
                for i, (ids, inputs) in enumerate(prompts)
            )
        )

    try:
        return asyncio.run(run())
    finally:
        engine.shutdown()


def _training_log_probs(vlm_dir: str, prompts: list[tuple[list[int], dict]], outputs: list) -> torch.Tensor:
    """The actor's forward over the rows as the store holds them (jagged, `multi_modal_inputs` per row)."""
    rows = [
        {
            "prompt_ids": torch.tensor(ids),
            "response_ids": torch.tensor(out.token_ids),
            "response_mask": torch.ones(len(out.token_ids), dtype=torch.long),
            "multi_modal_inputs": inputs,
        }
        for (ids, inputs), out in zip(prompts, outputs)
    ]
    batch = build_training_batch(rows_to_tensordict(rows, [str(i) for i in range(len(rows))], list(rows[0])), 0)
    model = load_causal_lm(vlm_dir).eval()
    with torch.no_grad():
        log_probs, _ = response_log_probs(model, batch, temperature=1.0)
    return log_probs


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_engine_and_training_forward_agree_and_both_see_the_image(family, request):
    vlm_dir = request.getfixturevalue("vlm_dir" if family == "qwen2_vl" else f"{family}_dir")
    processor = load_policy_processor(_model_config(vlm_dir))
    chat = [{"role": "user", "content": "<image>count="}]
    prompts = [
        encode_vision_prompt(processor, chat, [_image(0)]),
        encode_vision_prompt(processor, chat, [_image(255)]),
        encode_vision_prompt(processor, [{"role": "user", "content": "count=count="}], []),
    ]
    outputs = _generate(vlm_dir, prompts)
    trained = _training_log_probs(vlm_dir, prompts, outputs)
    for row, out in enumerate(outputs):
        assert torch.allclose(trained[row, : len(out.log_probs)], torch.tensor(out.log_probs), atol=1e-5)
    # Same text, same seed, another image: the distribution moves.
    first_token = [out.log_probs[0] for out in outputs[:2]]
    assert outputs[0].token_ids[0] == outputs[1].token_ids[0] and abs(first_token[0] - first_token[1]) > 1e-3


def test_a_sampled_placeholder_token_is_text_in_the_training_forward(vlm_dir, processor):
    """A response may sample the image-pad id; it is not an image slot (transformers' own forward
    would count it as one and fail on the mismatch)."""
    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    response = SimpleNamespace(token_ids=[processor.image_token_id, 5])
    log_probs = _training_log_probs(vlm_dir, [(ids, inputs)], [response])
    assert torch.isfinite(log_probs).all()


def test_freeze_vision_tower_leaves_the_encoder_out_of_training(vlm_dir):
    config = load_config(
        [
            f"actor_rollout_ref.model.path={vlm_dir}",
            "data.train_files=unused.parquet",
            "data.train_batch_size=4",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.freeze_vision_tower=true",
        ]
    )
    actor = ActorEngine(config)
    tower = vision_tower(actor.model)
    assert tower is not None and not any(p.requires_grad for p in tower.parameters())
    trained = {id(p) for group in actor.optimizer.param_groups for p in group["params"]}
    assert trained and not trained & {id(p) for p in tower.parameters()}


def test_filter_overlong_prompts_counts_the_image_tokens(tmp_path, vlm_dir, processor):
    import pyarrow as pa
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from core_v1.data.dataset import PromptDataset
    from examples.vision_count.prepare import image_png

    image = {"bytes": image_png((0,)), "path": None}
    rows = [{"prompt": [{"role": "user", "content": "<image>" * k + "count="}], "images": [image] * k} for k in (1, 2)]
    path = tmp_path / "images.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    lengths = [len(encode_vision_prompt(processor, r["prompt"], [_image(0)] * len(r["images"]))[0]) for r in rows]
    assert lengths[1] - lengths[0] == 6  # the second image: 4 image tokens and 2 vision markers
    kept = PromptDataset(
        str(path),
        max_prompt_length=lengths[0],
        tokenizer=AutoTokenizer.from_pretrained(vlm_dir),
        filter_overlong_prompts=True,
        processor=processor,
    )
    assert [len(row["images"]) for row in kept.rows] == [1]


def test_a_later_turn_keeps_the_images_and_treats_a_sampled_placeholder_as_text(vlm_dir, processor):
    """A multi-turn request's context is the first prompt (with its images) and the turns so far,
    which may hold a sampled image-pad id: the engine fills only the prompt's own image slots,
    as the training forward does over the whole trajectory."""
    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    earlier_turn = [processor.image_token_id, 5]
    [later] = _generate(vlm_dir, [(ids + earlier_turn, inputs)])
    trajectory = SimpleNamespace(token_ids=earlier_turn + later.token_ids)
    trained = _training_log_probs(vlm_dir, [(ids, inputs)], [trajectory])[0, len(earlier_turn) :]
    assert torch.allclose(trained[: len(later.log_probs)], torch.tensor(later.log_probs), atol=1e-5)


def test_lora_trains_on_image_rows_and_the_reference_is_the_base_model(vlm_dir, processor):
    from core_v1.workers import ReferenceEngine

    config = load_config(
        [
            f"actor_rollout_ref.model.path={vlm_dir}",
            "data.train_files=unused.parquet",
            "data.train_batch_size=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "actor_rollout_ref.rollout.n=1",
            "actor_rollout_ref.model.lora_rank=4",
            "actor_rollout_ref.model.target_modules=all-linear",
            "actor_rollout_ref.actor.optim.lr=1e-2",
        ]
    )
    actor = ActorEngine(config)
    reference = ReferenceEngine(config, actor=actor)
    rows = []
    for value in (0, 255):
        ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(value)])
        rows.append(
            {
                "prompt_ids": torch.tensor(ids),
                "response_ids": torch.tensor([5, 6, 3]),
                "response_mask": torch.ones(3, dtype=torch.long),
                "multi_modal_inputs": inputs,
            }
        )
    batch = build_training_batch(rows_to_tensordict(rows, ["a", "b"], list(rows[0])), 0)
    before = actor.compute_log_prob(batch)[0]
    assert torch.allclose(reference.compute_ref_log_prob(batch), before)  # fresh adapters change nothing
    batch["old_log_probs"], batch["advantages"] = before, torch.tensor([[1.0] * 3, [-1.0] * 3])
    actor.update_policy(batch)
    assert (actor.compute_log_prob(batch)[0] - before).abs().max() > 1e-4
    assert torch.allclose(reference.compute_ref_log_prob(batch), before, atol=1e-6)


def test_images_for_a_text_model_are_refused_not_dropped(tiny_assets):
    from core_v1.agent_loop.single_turn import SingleTurnAgentLoop

    config = load_config([f"actor_rollout_ref.model.path={tiny_assets['model']}", "data.train_files=unused.parquet"])
    loop = SingleTurnAgentLoop(config, server_manager=None, tokenizer=None)
    row = {"raw_prompt": [{"role": "user", "content": "<image>count="}], "images": [{"bytes": b"png"}]}
    with pytest.raises(VisionDataError, match="is a text model"):
        asyncio.run(loop.encode_prompt(row))


def test_a_partial_rollout_resumes_with_its_images(vlm_dir, processor):
    """An image request aborted mid-decode (a weight update in the async modes) is resubmitted with
    its images and ends exactly as an uninterrupted one (same seed, same weights)."""
    import time

    from core_v1.rollout import FullyAsyncLLMServerClient, LLMServer

    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    server = LLMServer(HFEngine(vlm_dir, device="cpu", sync_interval=1))
    client = FullyAsyncLLMServerClient([server])
    params = SamplingParams(max_tokens=40, seed=3, logprobs=True, ignore_eos=True)

    async def interrupted():
        start = server.engine.stats.decode_steps
        task = asyncio.ensure_future(client.generate("p", ids, params, multi_modal_inputs=inputs))
        deadline = time.monotonic() + 30
        while server.engine.stats.decode_steps < start + 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        aborted = await client.abort_all()
        await client.resume()
        return aborted, await task

    try:
        uninterrupted = asyncio.run(client.generate("u", ids, params, multi_modal_inputs=inputs))
        aborted, resumed = asyncio.run(interrupted())
    finally:
        server.shutdown()
    assert aborted == 1 and resumed.token_ids == uninterrupted.token_ids
    assert resumed.log_probs == pytest.approx(uninterrupted.log_probs, abs=1e-5)


def test_the_smoke_run_keeps_a_tiny_vlm_and_stands_in_for_a_large_one_with_its_processor(vlm_dir, tmp_path):
    import json
    import shutil

    from core_v1.smoke import build_vision_stand_in, local_vision_config, small_local_model

    assert small_local_model(vlm_dir, False) is not None  # a tiny VLM runs as it is
    large = tmp_path / "large"  # the folder of a 1.5B-shaped Qwen2-VL, its weights not downloaded
    shutil.copytree(vlm_dir, large, ignore=shutil.ignore_patterns("*.safetensors"))
    config = json.loads((large / "config.json").read_text())
    config["text_config"].update(
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=28,
        num_attention_heads=12,
        layer_types=["full_attention"] * 28,
        max_window_layers=28,
    )
    config["text_config"]["rope_parameters"]["mrope_section"] = [16, 24, 24]
    config["vision_config"].update(depth=32, embed_dim=1280, hidden_size=1536, num_heads=16)
    (large / "config.json").write_text(json.dumps(config))
    assert small_local_model(str(large), False) is None
    stand_in = tmp_path / "stand_in"
    assert build_vision_stand_in(str(large), local_vision_config(str(large), False), stand_in) < 1e6
    processor = load_policy_processor(_model_config(str(stand_in)))
    prompt = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    [output] = _generate(str(stand_in), [prompt])
    assert len(output.token_ids) == 6


@pytest.mark.parametrize("use_v1", [True, False])
def test_the_dry_run_plan_says_where_the_images_go(vlm_dir, tmp_path, capsys, use_v1):
    from core_v1.main_ppo import main

    code = main(
        [
            f"actor_rollout_ref.model.path={vlm_dir}",
            f"data.train_files={tmp_path / 'train.parquet'}",
            "trainer.dry_run=true",
            f"trainer.use_v1={str(use_v1).lower()}",
            "data.image_key=pictures",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.actor.freeze_vision_tower=true",
        ]
    )
    [line] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  vision:")]
    assert code == 0
    assert line.startswith(
        "  vision:      a vision-language model: each row's images (data.image_key=pictures) and video "
        f"frames (data.video_key=videos) go through the AutoProcessor of {vlm_dir}"
    )
    assert line.endswith("vision tower frozen (actor.freeze_vision_tower=true)")


def test_the_dry_run_plan_of_a_text_model_has_no_vision_line(tiny_assets, tmp_path, capsys):
    from core_v1.main_ppo import main

    assert (
        main(
            [
                f"actor_rollout_ref.model.path={tiny_assets['model']}",
                "trainer.dry_run=true",
                f"data.train_files={tmp_path / 'train.parquet'}",
            ]
        )
        == 0
    )
    assert "vision:" not in capsys.readouterr().out


def test_verify_compares_the_vision_keys():
    from codemods.verify_view import view_of_v1

    config = load_config(
        [
            "data.train_files=unused.parquet",
            "data.image_key=pictures",
            "actor_rollout_ref.actor.freeze_vision_tower=true",
        ]
    )
    seen = view_of_v1(config)
    assert seen["data.image_key"] == "pictures" and seen["data.video_key"] == "videos"
    assert seen["actor_rollout_ref.actor.freeze_vision_tower"] is True


def test_a_vision_family_without_its_forward_is_refused_as_policy_and_as_critic(vlm_dir, tmp_path, capsys):
    import json
    import shutil

    from core_v1.main_ppo import main

    base = [f"data.train_files={tmp_path / 'train.parquet'}", "trainer.dry_run=true"]
    assert main([*base, f"actor_rollout_ref.model.path={vlm_dir}", "algorithm.adv_estimator=gae"]) == 0
    capsys.readouterr()
    glm4v = tmp_path / "glm4v"  # GLM-4.1V: another vision tower and position scheme
    shutil.copytree(vlm_dir, glm4v)
    config = json.loads((glm4v / "config.json").read_text())
    (glm4v / "config.json").write_text(json.dumps({**config, "model_type": "glm4v"}))
    assert main([*base, f"actor_rollout_ref.model.path={glm4v}", "algorithm.adv_estimator=grpo"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "is a glm4v vision-language model" in line
    critic = [f"actor_rollout_ref.model.path={vlm_dir}", "algorithm.adv_estimator=gae", f"critic.model.path={glm4v}"]
    assert main([*base, *critic]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: critic.model.path={glm4v} is a glm4v vision-language model")


def test_the_forward_refuses_a_vision_family_it_does_not_reproduce(vlm_dir, processor):
    """The forwards check too: a Hub model downloaded after the start-up checks gets no further."""
    from core_v1.utils.vision import UnsupportedVisionModelError, vision_forward

    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>count="}], [_image(0)])
    model = load_causal_lm(vlm_dir).eval()
    model.config.model_type = "glm4v"
    input_ids = torch.tensor([ids])
    with pytest.raises(UnsupportedVisionModelError, match="a glm4v vision-language model cannot take images"):
        vision_forward(
            model, input_ids, torch.ones_like(input_ids), torch.ones_like(input_ids, dtype=torch.bool), [inputs]
        )
