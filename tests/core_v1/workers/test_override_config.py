"""`model.override_config` reaches the Hugging Face config the workers build, as verl applies it:
the nested `model_config` section of verl's Megatron configs, else the whole dict."""

from __future__ import annotations

import pytest

from core_v1.workers.model import load_causal_lm, load_value_model


@pytest.mark.parametrize(
    "override",
    [
        {
            "model_config": {"attention_dropout": 0.1},
            "moe_config": {"freeze_moe_router": False},
        },  # verl's Megatron layout
        {"attention_dropout": 0.1},
    ],
)
def test_override_config_sets_the_model_config(tiny_model_dir, override):
    for load in (load_causal_lm, load_value_model):
        model = load(tiny_model_dir, override_config=override)
        assert model.config.attention_dropout == 0.1
        assert not hasattr(model.config, "model_config")


def test_attn_implementation_reaches_the_loader_and_dict_fields_merge(tiny_model_dir):
    model = load_causal_lm(
        tiny_model_dir,
        override_config={"attn_implementation": "eager", "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    )
    assert model.config._attn_implementation == "eager"
    assert model.config.rope_scaling["factor"] == 2.0 and "rope_theta" in model.config.rope_scaling
