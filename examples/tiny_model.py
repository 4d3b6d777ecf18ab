"""Make a tiny chat model locally: a byte-level BPE tokenizer with a chat template and a randomly
initialised Qwen2-shaped causal LM, written with `save_pretrained` so that every consumer goes
through the real `from_pretrained` loading. Nothing is downloaded.

    python -m examples.tiny_model OUT_DIR [--hidden 64] [--layers 2] [--words w1 w2 ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterable

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
BASE_WORDS = [
    "system",
    "user",
    "assistant",
    "tool",
    "+",
    "-",
    "=",
    "?",
    ":",
    ",",
    ".",
    "#",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "{",
    "}",
    "[",
    "]",
    '"',
]


def make_tokenizer(words: Iterable[str], vocab_size: int = 96, base_words: Iterable[str] = BASE_WORDS):
    """A byte-level BPE tokenizer (the kind Qwen2 ships: ByteLevel pre-tokenizer, digits split one by
    one) trained on a small corpus of `base_words`, `words` and chat markup, plus the chat special
    tokens. Only the bytes the corpus uses enter the vocabulary, so a task-specific tokenizer keeps a
    random policy's outputs on-topic."""
    base_words = list(base_words)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token=None))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    corpus = [*base_words, *words, " ".join([*base_words, *words]), "user\n", "assistant\n"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    core.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_tiny_model(
    out_dir: str | Path,
    words: Iterable[str] = (),
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    max_positions: int = 256,
    vocab_size: int = 96,
    base_words: Iterable[str] = BASE_WORDS,
) -> Path:
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    tokenizer = make_tokenizer(words, vocab_size, base_words)
    # The embedding holds exactly the tokenizer's ids: padding rows would be sampled as undecodable tokens.
    vocab_size = len(tokenizer)
    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--words", nargs="*", default=[str(i) for i in range(40)])
    args = parser.parse_args()
    print(make_tiny_model(args.out_dir, args.words, args.hidden, args.layers))


if __name__ == "__main__":
    main()
