"""How `init_ray` hands the workers' variables to a cluster the run starts itself: through the
environment `ray.init` starts it in (no job runtime_env), unless the user gave a runtime_env."""

from __future__ import annotations

import copy
import os

from core_v1.config import load_config
from core_v1.trainer.setup import _environ, _inheritable_env_vars, ray_init_kwargs


def test_the_runs_own_variables_leave_the_runtime_env_for_the_environment():
    kwargs = ray_init_kwargs(load_config([], "quickstart"))
    expected = dict(kwargs["runtime_env"]["env_vars"])

    assert _inheritable_env_vars(kwargs) == expected
    assert "runtime_env" not in kwargs
    assert expected["TOKENIZERS_PARALLELISM"] == "false" and "PYTHONPATH" in expected


def test_a_users_runtime_env_stays_the_jobs():
    config = load_config(["+ray_kwargs.ray_init.runtime_env.py_executable=python"], "quickstart")
    kwargs = ray_init_kwargs(config)
    before = copy.deepcopy(kwargs)

    assert _inheritable_env_vars(kwargs) == {}
    assert kwargs == before and kwargs["runtime_env"]["py_executable"] == "python"


def test_the_environment_is_as_it_was_after_the_block(monkeypatch):
    monkeypatch.setenv("RLBRIDGE_TEST_KEPT", "before")
    monkeypatch.delenv("RLBRIDGE_TEST_NEW", raising=False)

    with _environ({"RLBRIDGE_TEST_KEPT": "inside", "RLBRIDGE_TEST_NEW": "inside"}):
        assert (os.environ["RLBRIDGE_TEST_KEPT"], os.environ["RLBRIDGE_TEST_NEW"]) == ("inside", "inside")

    assert os.environ["RLBRIDGE_TEST_KEPT"] == "before"
    assert "RLBRIDGE_TEST_NEW" not in os.environ
