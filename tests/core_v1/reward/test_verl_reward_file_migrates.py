"""A reward file written against verl's scorers migrates with the codemod, then imports and scores."""

from __future__ import annotations

import asyncio
import importlib.util
import io
import sys
import textwrap
import threading

import pytest

from codemods.migrate import main as migrate

VERL_REWARD_FILE = textwrap.dedent('''\
    """A user's reward file, as written for verl 0.5 to 0.7."""
    import math

    from verl.utils.reward_score import default_compute_score, gsm8k, math_dapo
    from verl.utils.reward_score import math_reward
    from verl.utils.reward_score.math import is_equiv
    from verl.utils.reward_score.math_dapo import last_boxed_only_string, normalize_final_answer, remove_boxed
    import verl.utils.reward_score.math_dapo as dapo


    def boxed_answer(text):
        boxed = last_boxed_only_string(text)
        return None if boxed is None else normalize_final_answer(remove_boxed(boxed))


    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        if data_source == "strict":
            return dapo.compute_score(solution_str, ground_truth, strict_box_verify=True)
        if data_source == "dapo":
            return math_dapo.compute_score(solution_str, ground_truth)
        if data_source == "gsm8k":
            return gsm8k.compute_score(solution_str, ground_truth)
        if data_source == "boxed":
            return float(is_equiv(boxed_answer(solution_str), ground_truth))
        if data_source == "hendrycks":
            return math.floor(math_reward.compute_score(solution_str, ground_truth))
        return default_compute_score(data_source, solution_str, ground_truth, extra_info)
''')


def _load(path):
    spec = importlib.util.spec_from_file_location("migrated_reward", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_verl_reward_file_migrates_then_imports_and_scores(tmp_path):
    path = tmp_path / "reward.py"
    path.write_text(VERL_REWARD_FILE)
    out = io.StringIO()
    assert migrate([str(path)], out=out, err=io.StringIO()) == 1, out.getvalue()  # 1: changed
    migrated = path.read_text()
    assert "verl." not in migrated and "TODO(migrate" not in migrated, migrated
    # verl 0.6's name for the MATH module is carried as it is: renaming it to `math` would shadow the stdlib's.
    assert "from core_v1.reward.scorers import math_reward" in migrated

    reward = _load(path)
    assert reward.compute_score("strict", r"so \boxed{42}", "42") == {"score": 1.0, "acc": True, "pred": "42"}
    assert reward.compute_score("dapo", "Answer: 41", "42")["score"] == -1.0
    assert reward.compute_score("gsm8k", "so #### 42", "42") == 1.0
    assert reward.compute_score("boxed", r"\boxed{\dfrac{1}{2}}", "1/2") == 1.0
    assert reward.compute_score("hendrycks", r"\boxed{13}", "12") == 0.0
    assert reward.compute_score("HuggingFaceH4/MATH-500", r"\boxed{12}", "12") == 1.0
    assert reward.compute_score("aime25", "Answer: 12", "12")["acc"] is True


def test_migrating_the_migrated_file_changes_nothing(tmp_path):
    path = tmp_path / "reward.py"
    path.write_text(VERL_REWARD_FILE)
    migrate([str(path)], out=io.StringIO(), err=io.StringIO())
    once = path.read_text()
    assert migrate([str(path)], out=io.StringIO(), err=io.StringIO()) == 0
    assert path.read_text() == once


def test_a_reward_file_using_math_verify_migrates_and_names_the_missing_package(tmp_path, monkeypatch):
    path = tmp_path / "reward.py"
    path.write_text(
        "from verl.utils.reward_score import math_verify\n\n\n"
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n"
        "    return math_verify.compute_score(solution_str, ground_truth)\n"
    )
    assert migrate([str(path)], out=io.StringIO(), err=io.StringIO()) == 1
    assert path.read_text().startswith("from core_v1.reward.scorers import math_verify\n")
    monkeypatch.setitem(sys.modules, "math_verify", None)  # as where math-verify is not installed
    monkeypatch.delitem(sys.modules, "core_v1.reward.scorers.math_verify", raising=False)
    for name in [m for m in sys.modules if m.startswith("math_verify.")]:  # imported by an earlier test
        monkeypatch.delitem(sys.modules, name)
    import core_v1.reward.scorers as scorers

    monkeypatch.delattr(scorers, "math_verify", raising=False)
    with pytest.raises(ModuleNotFoundError, match="needs the math-verify package"):
        _load(path)


ASYNC_VERL_REWARD_FILE = textwrap.dedent("""\
    from verl.utils.ray_utils import get_event_loop
    from verl.utils.reward_score.math_dapo import verify


    async def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        loop = get_event_loop()
        correct, pred = await loop.run_in_executor(None, lambda: verify(solution_str, ground_truth))
        return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": pred}
""")


def test_an_async_reward_file_reaching_its_loop_through_verl_migrates_and_runs(tmp_path):
    path = tmp_path / "async_reward.py"
    path.write_text(ASYNC_VERL_REWARD_FILE)
    assert migrate([str(path)], out=io.StringIO(), err=io.StringIO()) == 1
    assert "from core_v1.reward.event_loop import get_event_loop" in path.read_text()
    reward = _load(path)
    assert asyncio.run(reward.compute_score("aime24", "Answer: 7", "7")) == {"score": 1.0, "acc": True, "pred": "7"}


def test_get_event_loop_is_the_running_loop_else_the_threads_own():
    from core_v1.reward.event_loop import get_event_loop

    async def inside():
        return get_event_loop() is asyncio.get_running_loop()

    assert asyncio.run(inside())

    loops = []
    worker = threading.Thread(target=lambda: loops.extend([get_event_loop(), get_event_loop()]))
    worker.start()
    worker.join()
    assert loops[0] is loops[1] and not loops[0].is_running()  # created once, then reused
    loops[0].close()
