"""Make a tiny vision-language model locally: a Qwen2-VL- (or Qwen2.5-VL-) shaped model (a two-block vision tower, a
two-layer language model) with random weights, its tokenizer (byte-level BPE plus Qwen2-VL's
vision markers) and its processor (Qwen2-VL's image processor, sized for small images), all
written with `save_pretrained` so that every consumer loads them with `from_pretrained` and
`AutoProcessor`. Nothing is downloaded.

    python -m examples.tiny_vlm OUT_DIR [--hidden 32] [--layers 2] [--family qwen2_vl|qwen2_5_vl]

An image of 56x56 pixels becomes a 4x4 grid of 14-pixel patches, merged 2x2 into 4 image tokens.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Iterable

from examples.tiny_model import BASE_WORDS, make_tokenizer

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
# Qwen2-VL's template, in short: an image part renders as its vision markers around one image pad,
# which the processor expands to the image's token count.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'video' or 'video' in part %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in part %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
FAMILIES = {
    "qwen2_vl": ("Qwen2VLConfig", "Qwen2VLForConditionalGeneration", "Qwen2VLProcessor"),
    "qwen2_5_vl": ("Qwen2_5_VLConfig", "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor"),
}
IMAGE_SIDE = 56  # pixels: the smallest image the processor keeps at this size is 28 x 28


def make_tiny_vlm(
    out_dir: str | Path,
    words: Iterable[str] = (),
    hidden_size: int = 32,
    num_layers: int = 2,
    seed: int = 0,
    max_positions: int = 512,
    vocab_size: int = 96,
    base_words: Iterable[str] = BASE_WORDS,
    family: str = "qwen2_vl",
) -> Path:
    """`family`: "qwen2_vl" or "qwen2_5_vl" (windowed vision attention in all blocks but the last)."""
    import torch
    import transformers
    from transformers import GenerationConfig, Qwen2VLImageProcessorPil

    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    config_name, model_name, processor_name = FAMILIES[family]
    config_cls, model_cls = getattr(transformers, config_name), getattr(transformers, model_name)

    out = Path(out_dir)
    tokenizer = make_tokenizer(words, vocab_size, base_words)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", *VISION_TOKENS]})
    tokenizer.chat_template = CHAT_TEMPLATE
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in VISION_TOKENS}
    text = dict(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        # mRoPE splits each head's rotary half-dimension (head_dim 8 -> 4) over (t, h, w).
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]},
    )
    vision = dict(depth=2, num_heads=2, patch_size=14, spatial_merge_size=2, temporal_patch_size=2)
    if family == "qwen2_vl":
        vision.update(embed_dim=32, hidden_size=hidden_size, mlp_ratio=2)
    else:
        vision.update(
            hidden_size=32, out_hidden_size=hidden_size, intermediate_size=64, window_size=28, fullatt_block_indexes=[1]
        )
    config = config_cls(
        text_config=text,
        vision_config=vision,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    image_processor = Qwen2VLImageProcessorPil(
        min_pixels=28 * 28, max_pixels=IMAGE_SIDE * IMAGE_SIDE * 4, patch_size=14, merge_size=2, temporal_patch_size=2
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    # The processor's parts, saved one by one: `Qwen2VLProcessor.save_pretrained` needs its video
    # processor, which transformers cannot build without torchvision; AutoProcessor reads these.
    tokenizer.save_pretrained(out)
    image_processor.save_pretrained(out)
    (out / "processor_config.json").write_text(json.dumps({"processor_class": processor_name}))
    (out / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--hidden", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--words", nargs="*", default=[str(i) for i in range(10)])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="qwen2_vl")
    args = parser.parse_args()
    print(make_tiny_vlm(args.out_dir, args.words, args.hidden, args.layers, family=args.family))


if __name__ == "__main__":
    main()
