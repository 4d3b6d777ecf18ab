"""Prompts with images: verl's multimodal rows -> prompt token ids plus the model's image inputs.

A row of verl's multimodal format holds the chat `prompt` with `<image>` and `<video>`
placeholders in its text, the images under `data.image_key` (default `images`): a list of
PIL images or of `{"bytes": ...}` / `{"path": ...}` dicts (what `datasets` writes to parquet for
an image feature, e.g. verl's geo3k preprocessing), and the videos under `data.video_key`
(default `videos`, lists of frames: `core_v1.agent_loop.video`). As verl's
`RLHFDataset._build_messages` does, each message's text is split at the placeholders into
`{"type": "image"}`, `{"type": "video"}` and `{"type": "text"}` parts, one image or video per
placeholder in order; the processor's chat template renders the parts and each image or video is
expanded to its token count.

`encode_vision_prompt` returns the prompt ids and the row's `multi_modal_inputs` (the
processor's tensors other than the token ids: `pixel_values`, `image_grid_thw`, ...), which go
to the rollout engine with the request and into the trajectory for the training forwards
(`core_v1.utils.vision`).
"""

from __future__ import annotations

import hashlib
import json
import re
import weakref
from collections import OrderedDict
from pathlib import Path
from typing import Any, Optional, Sequence

import torch

from core_v1.agent_loop.media import VisionDataError, load_image
from core_v1.agent_loop.video import Video, encode_with_videos
from core_v1.utils.vision import is_vision_config

_PLACEHOLDER = re.compile(r"(<image>|<video>)")
_TOKEN_FIELDS = ("input_ids", "attention_mask", "mm_token_type_ids")


def trusts_remote_code(config: Any) -> bool:
    """Whether the policy's tokenizer and processor may run code their folder ships:
    `actor_rollout_ref.model.trust_remote_code`, or `data.trust_remote_code`, the key verl's driver
    loads them with."""
    return bool(config.actor_rollout_ref.model.trust_remote_code or config.data.trust_remote_code)


def load_policy_processor(config: Any, path: Optional[str] = None) -> Any:
    """The policy's HF processor (`AutoProcessor` from the model path, as verl loads it beside the
    tokenizer) when the model is a vision-language model; None for a text model."""
    from transformers import AutoConfig

    model = config.actor_rollout_ref.model
    path = str(Path(str(path or model.path)).expanduser())
    try:
        model_config = AutoConfig.from_pretrained(path, trust_remote_code=trusts_remote_code(config))
    except (OSError, ValueError):
        return None  # a path that does not load fails where the model and tokenizer are loaded, with its key
    if not is_vision_config(model_config):
        return None
    from transformers import AutoProcessor  # only here: importing it costs a text run's worker 2 s of CPU

    try:
        processor = AutoProcessor.from_pretrained(path, trust_remote_code=trusts_remote_code(config))
    except ImportError as error:
        if "torchvision" not in str(error).lower():
            raise
        processor = _image_only_processor(path)
    if model.custom_chat_template:
        processor.chat_template = model.custom_chat_template
    return processor


def _image_only_processor(path: str) -> Any:
    """The checkpoint's processor class without its video processor. transformers builds a Qwen-VL
    processor's video processor, or checks its type when it is None, only with torchvision
    installed; images need neither, so a machine without torchvision can still take images."""
    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    name = json.loads((Path(path) / "processor_config.json").read_text())["processor_class"]
    base = getattr(transformers, name)

    class ImageOnlyProcessor(base):
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            return None if argument is None else super().check_argument_for_proper_class(argument_name, argument)

    template = Path(path) / "chat_template.jinja"
    tokenizer = AutoTokenizer.from_pretrained(path)
    return ImageOnlyProcessor(
        image_processor=AutoImageProcessor.from_pretrained(path),
        tokenizer=tokenizer,
        video_processor=None,
        chat_template=template.read_text() if template.is_file() else tokenizer.chat_template,
    )


def refuse_images_without_processor(row: dict, image_key: str, video_key: str = "videos") -> None:
    """A row with images or videos for a text model (no vision tower, so no processor) is a
    mistake: they would be dropped. verl refuses it too."""
    for key, kind in ((image_key, "image"), (video_key, "video")):
        entries = row.get(key)
        if entries is not None and len(entries):
            raise VisionDataError(
                f"the row has {len(entries)} {kind}(s) under data.{kind}_key={key!r}, but "
                "actor_rollout_ref.model.path is a text model (no vision_config): point it at a "
                f"vision-language model, or drop the {kind}s"
            )


def row_images(row: dict, image_key: str) -> list:
    """The row's images as PIL RGB images (empty for a row without any)."""
    images = row.get(image_key)
    if images is None:
        return []
    return [load_image(image) for image in list(images)]


def vision_messages(messages: list[dict], num_images: int, num_videos: int = 0) -> list[dict]:
    """`messages` with each text split at `<image>` / `<video>` placeholders into image, video and
    text parts (verl's layout); the placeholders must count the row's images and videos exactly."""
    placed = {"image": 0, "video": 0}
    out = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str) or not (num_images or num_videos):
            out.append(dict(message))
            continue
        parts = []
        for segment in (s for s in _PLACEHOLDER.split(content) if s):
            if segment in ("<image>", "<video>"):
                kind = segment[1:-1]
                parts.append({"type": kind})
                placed[kind] += 1
            else:
                parts.append({"type": "text", "text": segment})
        out.append({**message, "content": parts})
    for kind, count in (("image", num_images), ("video", num_videos)):
        if placed[kind] != count:
            raise VisionDataError(
                f"the prompt has {placed[kind]} <{kind}> placeholders for {count} {kind}s; write one "
                f"<{kind}> in the prompt text per entry of the row's {kind} column (data.{kind}_key)"
            )
    return out


def encode_vision_prompt(
    processor: Any,
    messages: list[dict],
    images: list,
    template_kwargs: Optional[dict] = None,
    tools: Optional[list[dict]] = None,
    videos: Sequence[Video] = (),
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """(prompt token ids, multimodal inputs) of a chat with images (and videos), as the processor
    makes them (`core_v1.agent_loop.video` for a chat with videos).

    The last few are remembered per processor (up to `_VISION_CACHE_BYTES` of tensors): a GRPO step
    encodes each prompt once per sample (n times), and the processor's calls were most of an
    agent-loop worker's time in the vision example's profile. Each caller gets its own copies."""
    videos = list(videos)
    key = _vision_key(messages, images, template_kwargs, tools, videos)
    cache = _encoded_vision.setdefault(processor, OrderedDict()) if key is not None else None
    if cache is None or key not in cache:
        encoded = _encode_vision(processor, messages, images, template_kwargs, tools, videos)
        if cache is None:
            return encoded
        cache[key] = encoded
        _evict_over(cache, _VISION_CACHE_BYTES)
    cache.move_to_end(key)
    ids, inputs = cache[key]
    return list(ids), {name: value.clone() for name, value in inputs.items()}


def _encode_vision(
    processor: Any,
    messages: list[dict],
    images: list,
    template_kwargs: Optional[dict],
    tools: Optional[list[dict]],
    videos: Sequence[Video] = (),
) -> tuple[list[int], dict[str, torch.Tensor]]:
    with_tools = {"tools": tools} if tools else {}
    text = processor.apply_chat_template(
        vision_messages(messages, len(images), len(videos)),
        add_generation_prompt=True,
        tokenize=False,
        **with_tools,
        **(template_kwargs or {}),
    )
    if videos:
        return encode_with_videos(processor, text, images, list(videos))
    encoded = processor(text=[text], images=images or None, return_tensors="pt")
    inputs = {key: value for key, value in encoded.items() if key not in _TOKEN_FIELDS}
    return encoded["input_ids"][0].tolist(), inputs


def vision_chat_ids(
    processor: Any,
    messages: list[dict],
    tools: Optional[list[dict]] = None,
    add_generation_prompt: bool = True,
    template_kwargs: Optional[dict] = None,
) -> list[int]:
    """Token ids of a chat under the processor's template, each image or video still ONE placeholder
    token (not expanded to its patches). The messages are a conversation as the tool agent loop
    keeps it: `<image>` / `<video>` placeholders in string contents (the row's prompt) and content
    parts (a tool's images). Comparing two of these renderings finds what a new turn adds."""
    text = processor.apply_chat_template(
        vision_messages(messages, *_placeholders_in(messages)),
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **({"tools": tools} if tools else {}),
        **(template_kwargs or {}),
    )
    return processor.tokenizer(text, add_special_tokens=False)["input_ids"]


def _placeholders_in(messages: list[dict]) -> tuple[int, int]:
    texts = [m["content"] for m in messages if isinstance(m.get("content"), str)]
    return sum(t.count("<image>") for t in texts), sum(t.count("<video>") for t in texts)


def image_inputs(processor: Any, images: list) -> dict[str, torch.Tensor]:
    """The model inputs of `images` alone (`pixel_values`, `image_grid_thw`), as the processor
    makes them for a prompt: they are appended to a trajectory's inputs when a tool shows images."""
    encoded = processor.image_processor(images=images, return_tensors="pt")
    return {key: value for key, value in encoded.items() if isinstance(value, torch.Tensor)}


def image_token_counts(processor: Any, image_grid_thw: torch.Tensor) -> list[int]:
    """How many placeholder tokens each image fills (its patches / merge_size^2)."""
    merge = processor.image_processor.merge_size**2
    return [int(n) // merge for n in torch.as_tensor(image_grid_thw).prod(-1)]


def expand_image_placeholders(ids: list[int], image_token_id: int, counts: list[int]) -> list[int]:
    """`ids` with its i-th image placeholder token repeated `counts[i]` times (what the processor
    does to a prompt's text); the ids must hold exactly one placeholder per count."""
    found = ids.count(image_token_id)
    if found != len(counts):
        raise VisionDataError(
            f"the chat template rendered {found} image placeholders for {len(counts)} images of a tool "
            "message; use a chat template that renders each image part of a message (Qwen-VL's do)"
        )
    expanded, images = [], iter(counts)
    for token in ids:
        expanded += [token] * next(images) if token == image_token_id else [token]
    return expanded


_VISION_CACHE_BYTES = 64 << 20
_encoded_vision: "weakref.WeakKeyDictionary[Any, OrderedDict]" = weakref.WeakKeyDictionary()


def _vision_key(
    messages: Any, images: list, template_kwargs: Any, tools: Any, videos: Sequence[Video] = ()
) -> Optional[str]:
    """The cache key of one encoding: the chat as JSON and each image's (and frame's) pixels by
    digest; None when the chat is not plain JSON or an image is not a PIL image (such calls are not
    remembered)."""
    from PIL import Image

    if not all(isinstance(image, Image.Image) for image in images):
        return None
    pixels = [(image.mode, image.size, hashlib.sha1(image.tobytes()).hexdigest()) for image in images]
    try:
        return json.dumps([messages, pixels, template_kwargs, tools, [v.key() for v in videos]], sort_keys=True)
    except (TypeError, ValueError):
        return None


def _evict_over(cache: OrderedDict, max_bytes: int) -> None:
    """Drop the oldest entries (never the newest) while the cached tensors exceed `max_bytes`."""

    def size(entry) -> int:
        return sum(value.numel() * value.element_size() for value in entry[1].values())

    total = sum(size(entry) for entry in cache.values())
    while len(cache) > 1 and total > max_bytes:
        total -= size(cache.popitem(last=False)[1])
