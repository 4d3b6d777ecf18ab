"""dense_reward.py's score, except that the grader raises on about a third of the responses (chosen by
the response text, so V0 and V1 fail the very same samples): those samples are failed, not scored."""

from pathlib import Path

from core_v1.utils.loading import load_object

dense_score = load_object(f"{Path(__file__).with_name('dense_reward.py')}:compute_score")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    if sum(ord(ch) for ch in solution_str) % 3 == 0:
        raise ValueError("the grader crashed on this response")
    return dense_score(data_source, solution_str, ground_truth, extra_info, **kwargs)
