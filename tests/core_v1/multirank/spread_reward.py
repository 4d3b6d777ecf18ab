"""A reward spread over [0, 1) by the response's text, so every group has a learning signal (the
quickstart's tiny model answers almost nothing right in its first steps: its GRPO advantages are
mostly zero, and a step that pairs them with the wrong rows can look like the right one)."""

import hashlib


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return int(hashlib.sha1(solution_str.encode()).hexdigest(), 16) % 997 / 997
