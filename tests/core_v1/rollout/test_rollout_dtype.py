"""What actor_rollout_ref.rollout.dtype's no-op line promises (`shims.verl_keys.verdicts.ROLLOUT_DTYPE`):
the hf engine loads model.path in the dtype it was saved in, the synced weights are cast to that
dtype, and a dtype in rollout.engine_kwargs (passed to the engine as is) chooses another."""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForCausalLM

from core_v1.rollout.engines.hf import HFEngine


def _saved_in_bfloat16(tiny_model_path: str, folder) -> str:
    AutoModelForCausalLM.from_pretrained(tiny_model_path).to(torch.bfloat16).save_pretrained(folder)
    return str(folder)


def test_the_engine_loads_the_saved_dtype_and_casts_synced_weights_to_it(tiny_model_path, tmp_path):
    engine = HFEngine(_saved_in_bfloat16(tiny_model_path, tmp_path), device="cpu")
    try:
        assert {p.dtype for p in engine.model.parameters()} == {torch.bfloat16}
        name, parameter = next(iter(engine.model.named_parameters()))
        trained = torch.full(parameter.shape, 0.123456789, dtype=torch.float32)  # as a float32 trainer sends it
        asyncio.run(engine.update_weights([(name, trained)], version=1))
        synced = dict(engine.model.named_parameters())[name]
        assert synced.dtype == torch.bfloat16 and torch.equal(synced, trained.to(torch.bfloat16))
    finally:
        engine.shutdown()


def test_engine_kwargs_dtype_chooses_another(tiny_model_path, tmp_path):
    engine = HFEngine(_saved_in_bfloat16(tiny_model_path, tmp_path), device="cpu", dtype="float32")
    try:
        assert {p.dtype for p in engine.model.parameters()} == {torch.float32}
    finally:
        engine.shutdown()
