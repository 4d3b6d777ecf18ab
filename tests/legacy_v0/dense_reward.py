"""A dense reward for the tests: every response earns something different, so advantages,
losses and the parity comparison are never trivially zero (the quickstart's exact-sum reward is
almost always 0 for a random tiny model)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    digits = sum(ch.isdigit() for ch in solution_str)
    spread = sum(ord(ch) for ch in solution_str) % 7 / 6.0
    return {"score": 0.5 * spread + 0.5 * min(digits, 3) / 3.0, "digits": float(digits)}
