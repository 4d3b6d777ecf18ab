"""`encode_chat` remembers renderings: the same ids as the tokenizer's own, per tokenizer and
template, and a call whose input is not plain JSON is rendered every time."""

from __future__ import annotations

from transformers import AutoTokenizer

from core_v1.agent_loop.base import _encoded_chats, encode_chat

CHAT = [{"role": "user", "content": "2+3="}]


def _rendered(tokenizer, messages, **kwargs):
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, **kwargs)
    return list(encoded["input_ids"] if hasattr(encoded, "keys") else encoded)


def test_a_remembered_rendering_equals_the_tokenizers_and_follows_its_template(tiny_assets):
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets["model"])
    first = encode_chat(tokenizer, CHAT)
    assert first == _rendered(tokenizer, CHAT)
    first.append(-1)  # a caller's edit does not reach the cache
    assert encode_chat(tokenizer, CHAT) == _rendered(tokenizer, CHAT)
    assert len(_encoded_chats[tokenizer]) == 1

    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}|{% endfor %}"
    assert encode_chat(tokenizer, CHAT) == _rendered(tokenizer, CHAT) != first[:-1]

    class Image:  # not JSON: rendered every time, never remembered
        def __str__(self):
            return "image"

    before = len(_encoded_chats[tokenizer])
    encode_chat(tokenizer, [{"role": "user", "content": Image()}])
    assert len(_encoded_chats[tokenizer]) == before
