"""Make a tiny reward model for the quickstart task, locally, in a few seconds of CPU.

The model is a Qwen2-shaped `Qwen2ForSequenceClassification` with one label (the kind of
checkpoint `reward.reward_model.model_path` takes). Its tokenizer has its own vocabulary and its
own chat template (`Q: ... A: ...`), unlike the policy's, so a run with it re-encodes every
response through that template, as a real reward model with another tokenizer needs.

It is trained with the Bradley-Terry loss of reward modelling, `-log sigmoid(r(better) - r(worse))`,
on pairs of responses to the same `a+b=` prompt that the quickstart's rule ranks apart (the right
sum above a near miss above anything else; see `candidate_responses`), so it learns to prefer the
right sum. The inputs are built by `RewardModel.encode` from policy-tokenized responses, exactly
as a training run presents them.

    python -m examples.reward_model.make_reward_model OUT_DIR [--policy models/quickstart-tiny]
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path

RM_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'user' %}Q: {% else %}A: {% endif %}"
    "{{ message['content'] }}\n{% endfor %}"
)


def reward_model_tokenizer():
    from examples.quickstart.prepare import NUMBER_WORDS, TASK_WORDS
    from examples.tiny_model import make_tokenizer

    tokenizer = make_tokenizer(NUMBER_WORDS, vocab_size=44, base_words=[*TASK_WORDS, "Q", "A", ":"])
    tokenizer.chat_template = RM_CHAT_TEMPLATE
    return tokenizer


def candidate_responses(policy_tokenizer, max_operand: int) -> list[tuple[list[dict], list[int], float]]:
    """(chat, response ids in the policy's tokens, the quickstart rule's score): every one-token
    response to every prompt (the example's runs answer in one token), so that no response the
    policy can produce is new to the reward model; a model this small, shown only some of the
    responses, rates unseen ones arbitrarily, and RL finds and exploits exactly those."""
    from core_v1.reward.scorers.arithmetic import compute_score

    tokens = sorted(set(policy_tokenizer.get_vocab().values()) - {policy_tokenizer.pad_token_id})
    candidates = []
    for a in range(max_operand + 1):
        for b in range(max_operand + 1):
            chat = [{"role": "user", "content": f"{a}+{b}="}]
            for token in tokens:
                text = policy_tokenizer.decode([token], skip_special_tokens=True)
                candidates.append((chat, [token], compute_score(text, a + b)["score"]))
    return candidates


def make_reward_model(
    out_dir: str | Path,
    policy_dir: str | Path,
    hidden_size: int = 64,
    num_layers: int = 2,
    steps: int = 250,
    seed: int = 0,
) -> Path:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForSequenceClassification

    from core_v1.agent_loop.base import encode_chat
    from core_v1.reward.reward_model import RewardModel
    from examples.quickstart.prepare import MAX_OPERAND

    torch.manual_seed(seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # Train on the tokenizer as a run will load it (AutoTokenizer picks the model type's class).
    reward_model_tokenizer().save_pretrained(out)
    tokenizer, policy_tokenizer = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(policy_dir)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    reward_model = RewardModel(Qwen2ForSequenceClassification(config), tokenizer, policy_tokenizer)
    assert reward_model.reencode, "the example's reward model is meant to have its own tokenizer"
    groups: dict[str, list[tuple[list[int], float]]] = {}
    for chat, response, rule_score in candidate_responses(policy_tokenizer, MAX_OPERAND):
        ids = reward_model.encode(encode_chat(policy_tokenizer, chat), response, chat)
        groups.setdefault(chat[0]["content"], []).append((ids, rule_score))
    _train_bradley_terry(reward_model, list(groups.values()), steps, random.Random(seed))
    reward_model.model.save_pretrained(out)
    return out


def _train_bradley_terry(
    reward_model, groups: list[list[tuple[list[int], float]]], steps: int, rng: random.Random, pairs_per_step: int = 64
) -> None:
    """Each step: pairs of responses to one prompt that the rule ranks apart, better one first;
    loss `-log sigmoid(r(better) - r(worse))`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # matrices this small run fastest on one thread (and leave the rest alone)
    reward_model.model.train()
    optimizer = torch.optim.AdamW(reward_model.model.parameters(), lr=1e-3, weight_decay=0.0)
    try:
        for _ in range(steps):
            better, worse = [], []
            while len(better) < pairs_per_step:
                (x, x_score), (y, y_score) = rng.sample(rng.choice(groups), 2)
                if x_score != y_score:
                    better.append(x if x_score > y_score else y)
                    worse.append(y if x_score > y_score else x)
            scores = reward_model.score_ids(better + worse)
            loss = -torch.nn.functional.logsigmoid(scores[: len(better)] - scores[len(better) :]).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        reward_model.model.eval()
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--policy", default="models/quickstart-tiny", help="the policy whose tokens it will score")
    parser.add_argument("--steps", type=int, default=250)
    args = parser.parse_args()
    print(make_reward_model(args.out_dir, args.policy, steps=args.steps))


if __name__ == "__main__":
    main()
