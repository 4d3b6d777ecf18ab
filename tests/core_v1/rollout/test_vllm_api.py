"""The vllm adapter's calls checked against vLLM's own source, since vLLM cannot run here.

Reads the installed vllm package, or the wheel or source directory named by RLBRIDGE_VLLM_SOURCE:

    pip download vllm==0.33.0 --no-deps --only-binary=:all: --python-version 3.12 \\
        --platform manylinux_2_28_x86_64 -d /tmp/vllm
    RLBRIDGE_VLLM_SOURCE=/tmp/vllm/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl pytest tests/core_v1/rollout/test_vllm_api.py

and skips when neither is there. Every `self._engine.<method>(...)` call in the adapter must name a
method of vLLM's `AsyncLLM` with those keywords; every engine argument the trainer and the adapter
pass must be a field of `AsyncEngineArgs`; every `vllm.SamplingParams` keyword a field of it.

Where vllm imports (and torchvision, for the Qwen2-VL processor), two tests run vLLM's own CPU-side
multimodal code on what the adapter sends for a prompt with images: its prompt replacement, and its
Qwen2-VL processor on a tiny model. Both passed here with the 0.33 and 0.34 wheels' source and their
Python dependencies on PYTHONPATH.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch

from core_v1.config.schema import RolloutConfig
from core_v1.rollout.engines.registry import engine_problems
from core_v1.trainer.setup import rollout_engine_kwargs

ADAPTER = Path(__file__).resolve().parents[3] / "core_v1" / "rollout" / "engines" / "vllm.py"


@pytest.fixture(scope="module")
def vllm_file() -> Callable[[str], str]:
    """`vllm_file("vllm/v1/engine/async_llm.py")` -> that file's text from vLLM's source."""
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.submodule_search_locations:
        root = Path(list(spec.submodule_search_locations)[0]).parent
        return lambda path: (root / path).read_text()
    source = os.environ.get("RLBRIDGE_VLLM_SOURCE")
    if not source:
        pytest.skip("vllm is not installed and RLBRIDGE_VLLM_SOURCE names no wheel or source directory")
    if source.endswith(".whl"):
        wheel = zipfile.ZipFile(source)
        return lambda path: wheel.read(path).decode()
    return lambda path: (Path(source) / path).read_text()


def _class(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == name)


def _methods(cls: ast.ClassDef) -> dict[str, ast.arguments]:
    return {node.name: node.args for node in cls.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _fields(cls: ast.ClassDef) -> set[str]:
    return {
        node.target.id for node in cls.body if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def _typed_dict_keys(tree: ast.Module, name: str) -> set[str]:
    """A TypedDict's keys, those of its bases in the same module included (vLLM declares
    `multi_modal_data` on the base that `TokensPrompt` shares with `TextPrompt`)."""
    cls = _class(tree, name)
    local = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    bases = [base.id for base in cls.bases if isinstance(base, ast.Name) and base.id in local]
    return _fields(cls).union(*(_typed_dict_keys(tree, base) for base in bases))


def _adapter_calls(adapter: ast.Module, owner: str) -> list[ast.Call]:
    """Calls `<owner>.<method>(...)` in the adapter, where owner is e.g. `self._engine` or `vllm`."""
    return [
        node
        for node in ast.walk(adapter)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and ast.unparse(node.func.value) == owner
    ]


def test_async_llm_calls_match_vllms_methods(vllm_file):
    async_llm = _methods(_class(ast.parse(vllm_file("vllm/v1/engine/async_llm.py")), "AsyncLLM"))
    adapter = ast.parse(ADAPTER.read_text())
    calls = _adapter_calls(adapter, "self._engine") + _adapter_calls(adapter, "AsyncLLM")
    assert {call.func.attr for call in calls} >= {
        "generate",
        "abort",
        "sleep",
        "wake_up",
        "collective_rpc",
        "reset_prefix_cache",
        "shutdown",
        "from_engine_args",
    }
    for call in calls:
        name = call.func.attr
        assert name in async_llm, f"vLLM's AsyncLLM has no method {name!r}"
        args = async_llm[name]
        accepted = {a.arg for a in args.args + args.kwonlyargs}
        unknown = {k.arg for k in call.keywords if k.arg is not None} - accepted
        assert not unknown or args.kwarg, f"AsyncLLM.{name} takes no {sorted(unknown)}"
        positional = [a.arg for a in args.args if a.arg not in ("self", "cls")]
        assert len(call.args) <= len(positional) or args.vararg, f"AsyncLLM.{name}: too many positional arguments"


def test_sleep_mode_and_wake_up_tags_are_vllms(vllm_file):
    adapter = ast.parse(ADAPTER.read_text())
    pause_modes = vllm_file("vllm/v1/engine/__init__.py")
    worker = vllm_file("vllm/v1/worker/gpu_worker.py")
    for call in _adapter_calls(adapter, "self._engine"):
        keywords = {k.arg: k.value for k in call.keywords}
        if call.func.attr == "sleep":
            assert "mode" in keywords, "sleep() without mode= aborts the running requests (vLLM's default)"
            mode = ast.literal_eval(keywords["mode"])
            assert f'"{mode}"' in pause_modes.split("PauseMode = Literal[")[1].split("]")[0]
            assert mode == "keep"  # vLLM's default, "abort", would drop the running requests
        if call.func.attr == "wake_up" and isinstance(keywords.get("tags"), ast.List):
            for tag in ast.literal_eval(keywords["tags"]):
                assert f'"{tag}" in tags' in worker or f'"{tag}"' in _deferrable_tags(vllm_file), (
                    f"vLLM does not wake a {tag!r} tag on its own"
                )
    assert "self.model_runner.model" in worker  # what WeightLoadingExtension reaches for


def _deferrable_tags(vllm_file) -> str:
    """The tags a selective wake-up restores on their own, where vLLM's sleep-mode allocator lists
    them (`DEFERRABLE_TAGS` in 0.33 and 0.34; older workers test each tag themselves)."""
    try:
        allocator = vllm_file("vllm/device_allocator/__init__.py")
    except (KeyError, FileNotFoundError):
        return ""
    return allocator.split("DEFERRABLE_TAGS")[1].split(")")[0] if "DEFERRABLE_TAGS" in allocator else ""


def test_engine_arguments_are_fields_of_async_engine_args(vllm_file):
    tree = ast.parse(vllm_file("vllm/engine/arg_utils.py"))
    fields = _fields(_class(tree, "EngineArgs")) | _fields(_class(tree, "AsyncEngineArgs"))
    adapter = ADAPTER.read_text()
    adapter_defaults = {"enable_sleep_mode", "logprobs_mode", "worker_extension_cls"}
    for key in adapter_defaults:
        assert f'"{key}"' in adapter
    trainer_kwargs = set(rollout_engine_kwargs(RolloutConfig(max_model_len=4096)))
    consumed_by_adapter = {"device"}  # vLLM has no device argument (it picks its platform itself)
    passed = {"model"} | adapter_defaults | trainer_kwargs
    assert passed <= fields, f"not vLLM engine arguments: {sorted(passed - fields)}"
    assert "device" not in fields and "device: str | None = None" in adapter
    assert consumed_by_adapter.isdisjoint(passed)
    model_config = vllm_file("vllm/config/model.py")
    assert '"processed_logprobs"' in model_config.split("LogprobsMode = Literal[")[1].split("]")[0]


def test_sampling_params_and_prompt_keywords_are_vllms(vllm_file):
    sampling = _fields(_class(ast.parse(vllm_file("vllm/sampling_params.py")), "SamplingParams"))
    prompts = ast.parse(vllm_file("vllm/inputs/llm.py"))
    adapter = ast.parse(ADAPTER.read_text())
    prompt_keywords = set()
    for call in _adapter_calls(adapter, "vllm"):
        keywords = {k.arg for k in call.keywords}
        if call.func.attr == "SamplingParams":
            assert keywords <= sampling, f"not vLLM sampling params: {sorted(keywords - sampling)}"
        if call.func.attr == "TokensPrompt":
            prompt_keywords |= keywords
            assert keywords <= _typed_dict_keys(prompts, "TokensPrompt"), f"TokensPrompt takes no {keywords}"
    assert prompt_keywords == {"prompt_token_ids", "multi_modal_data"}
    assert "image" in _fields(_class(prompts, "MultiModalDataBuiltins"))  # the key vllm_prompt gives the images
    exports = vllm_file("vllm/__init__.py")
    for name in ("AsyncEngineArgs", "SamplingParams", "TokensPrompt"):
        assert f'"{name}"' in exports


@pytest.mark.parametrize("model", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_vllms_qwen_vl_processors_expand_one_image_placeholder(vllm_file, model):
    # Why vllm_prompt cuts each image's run of placeholder ids to one: vLLM's Qwen-VL processors
    # replace a one-id target with the image's token count.
    tree = ast.parse(vllm_file(f"vllm/model_executor/models/{model}.py"))
    image_targets = [
        keywords["target"]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "PromptReplacement"
        for keywords in [{k.arg: k.value for k in node.keywords}]
        if ast.unparse(keywords["modality"]) != "'video'"  # Qwen2-VL's covers both modalities in one call
    ]
    assert image_targets and all(isinstance(t, ast.List) and len(t.elts) == 1 for t in image_targets)


def test_vllms_prompt_replacement_turns_vllm_prompts_ids_into_the_expanded_prompt():
    # vLLM's own matching code (0.34's signatures), where vllm imports: the ids vllm_prompt sends
    # become the ids the processor made, with each image's range where the hf engine and training
    # put it; the expanded ids themselves would be expanded again.
    processing = pytest.importorskip("vllm.multimodal.processing.processor")
    from core_v1.agent_loop.vision import expand_image_placeholders
    from core_v1.rollout.engines.vllm_images import one_placeholder_per_image

    pad, counts = 90, [4, 8]
    expanded = expand_image_placeholders([1, 91, pad, 92, 2, 91, pad, 92, 3], pad, counts) + [pad, 4]
    replacement = processing.PromptReplacement(modality="image", target=[pad], replacement=lambda i: [pad] * counts[i])
    updates = {"image": [[replacement.resolve(i)] for i in range(len(counts))]}

    ids, _ = processing.apply_token_matches(one_placeholder_per_image(expanded, pad, counts), updates)
    ranges = [(p.start_idx, p.length) for p in processing.find_mm_placeholders(ids, updates)["image"]]

    assert ids == expanded and ranges == [(2, 4), (9, 8)]
    assert len(processing.apply_token_matches(expanded, updates)[0]) == len(expanded) + sum(counts) - len(counts)


def test_vllms_qwen2_vl_processor_takes_the_vllm_prompt_as_rlbridge_encoded_it(tmp_path):
    # vLLM's own multimodal processor for Qwen2-VL (CPU only; no engine, no model forward), where vllm
    # imports: the prompt the vllm engine builds becomes rlbridge's prompt ids, image ranges, grids and
    # pixel values.
    pytest.importorskip("vllm.multimodal")
    pytest.importorskip("torchvision")  # vLLM's Qwen2-VL processor is transformers' torchvision one
    from PIL import Image
    from vllm.config import ModelConfig
    from vllm.multimodal import MULTIMODAL_REGISTRY

    from core_v1.agent_loop.vision import encode_vision_prompt, load_policy_processor
    from core_v1.rollout.engines.vllm_images import load_image_layout, vllm_prompt
    from examples.tiny_vlm import make_tiny_vlm
    from tests.core_v1.test_vision import _model_config

    path = str(make_tiny_vlm(tmp_path / "vlm"))
    processor = load_policy_processor(_model_config(path))
    rng = np.random.default_rng(0)
    images = [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for h, w in [(30, 200), (56, 56)]]
    ids, inputs = encode_vision_prompt(processor, [{"role": "user", "content": "<image>and<image>count"}], images)
    layout = load_image_layout(path)
    fields = vllm_prompt(ids, inputs, layout)

    vllm_processor = MULTIMODAL_REGISTRY.create_processor(ModelConfig(model=path))
    out = vllm_processor(fields["prompt_token_ids"], vllm_processor.info.parse_mm_data(fields["multi_modal_data"]))

    items = out["mm_kwargs"]["image"]
    pixels = torch.cat([item["pixel_values"].data for item in items])
    if pixels.dtype == torch.uint8:  # vLLM 0.34 normalises on the device, as the processor would
        image_processor = vllm_processor.info.get_image_processor()
        mean, std = (torch.tensor(v).view(1, 3, 1) for v in (image_processor.image_mean, image_processor.image_std))
        pixels = ((pixels.float().view(len(pixels), 3, -1) * image_processor.rescale_factor - mean) / std).flatten(1)
    pad = layout.image_token_id
    run_starts = [i for i, token in enumerate(ids) if token == pad and ids[i - 1] != pad]
    assert out["prompt_token_ids"] == ids
    assert [(r.offset, r.length) for r in out["mm_placeholders"]["image"]] == list(
        zip(run_starts, layout.token_counts(inputs["image_grid_thw"]))
    )
    assert torch.equal(torch.stack([item["image_grid_thw"].data for item in items]), inputs["image_grid_thw"])
    torch.testing.assert_close(pixels, inputs["pixel_values"], rtol=0, atol=1e-5)


def test_a_missing_vllm_is_one_startup_problem():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    problems = engine_problems("vllm", "cuda")
    assert len(problems) == 1 and "pip install 'rlbridge[vllm]'" in problems[0] and "rollout.name=hf" in problems[0]
    assert engine_problems("hf", "cpu") == []


def test_a_run_asking_for_a_missing_vllm_ends_with_one_error_line(capsys, tiny_assets, tmp_path):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    from core_v1.main_ppo import main
    from tests.conftest import quickstart_overrides

    code = main(
        [
            "--config-name=quickstart",
            *quickstart_overrides(tiny_assets, tmp_path, 1),
            "actor_rollout_ref.rollout.name=vllm",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith("error: actor_rollout_ref.rollout.name=vllm needs the vllm package")
