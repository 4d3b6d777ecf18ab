"""The one loader of user code: stable module names across processes, no collisions, one-line errors."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from core_v1.utils.loading import PluginError, load_module, load_object, load_target, module_name_for

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_a_file_is_one_module_imported_once(tmp_path):
    counter = _write(
        tmp_path / "counted.py",
        "import builtins\nbuiltins.LOADS = getattr(builtins, 'LOADS', 0) + 1\nclass Thing: pass\n",
    )
    import builtins

    before = getattr(builtins, "LOADS", 0)
    first = load_object(f"{counter}:Thing")
    again = load_object(f"{tmp_path}/./counted.py:Thing")  # another spelling of the same file
    assert first is again and builtins.LOADS == before + 1
    assert first.__module__ == module_name_for(counter) and sys.modules[first.__module__].__file__ == str(counter)


def test_module_name_is_the_same_in_another_process(tmp_path):
    path = _write(tmp_path / "stable.py", "X = 1\n")
    code = f"from core_v1.utils.loading import module_name_for; print(module_name_for({str(path)!r}))"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}  # hash() would differ; sha1 must not
    other = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert other.stdout.strip() == module_name_for(path)


def test_two_files_with_one_stem_do_not_collide(tmp_path):
    a = _write(tmp_path / "a" / "reward.py", "def score(): return 'a'\n")
    b = _write(tmp_path / "b" / "reward.py", "def score(): return 'b'\n")
    assert load_object(f"{a}:score")() == "a" and load_object(f"{b}:score")() == "b"


def test_dotted_module_and_nested_name():
    assert load_object("core_v1.utils.loading:PluginError") is PluginError
    assert load_object("os.path:join") is os.path.join


def test_target_beside_a_yaml_loads_the_file_without_touching_sys_path(tmp_path):
    _write(tmp_path / "beside_mod.py", "class Loop: pass\n")
    path_before = list(sys.path)
    cls = load_target("beside_mod.Loop", relative_to=tmp_path)
    assert cls.__name__ == "Loop" and cls.__module__ == module_name_for(tmp_path / "beside_mod.py")
    assert sys.path == path_before and "beside_mod" not in sys.modules
    assert load_target("beside_mod.py:Loop", relative_to=tmp_path) is cls


@pytest.mark.parametrize(
    "spec, message",
    [
        ("{tmp}/absent.py:X", r"absent.py' \(plugins\) does not exist"),
        ("{tmp}/ok.py:Missing", r"has no 'Missing'"),
        ("{tmp}/broken.py:X", r"importing .*broken.py \(plugins\) failed: ZeroDivisionError"),
        (
            "{tmp}/needs_sibling.py:X",
            r"No module named 'helper_zz' \(helper_zz is beside needs_sibling.py, but a user "
            r"file is not imported from its own folder: add .* to PYTHONPATH\)$",
        ),
        (
            "{tmp}/needs_package.py:X",
            r"No module named 'absent_pkg_zz' \(no installed package and no PYTHONPATH folder "
            r"provides 'absent_pkg_zz': pip install the package that does",
        ),
        ("no_such_pkg_zz.mod:X", r"cannot import module 'no_such_pkg_zz.mod' \(plugins\)"),
        ("{tmp}/ok.py", r"must be 'path/to/file.py:Name' or 'package.module:Name'"),
    ],
)
def test_every_failure_is_one_plugin_error_line(tmp_path, spec, message):
    _write(tmp_path / "ok.py", "X = 1\n")
    _write(tmp_path / "broken.py", "X = 1 / 0\n")
    _write(tmp_path / "needs_sibling.py", "import helper_zz\nX = 1\n")
    _write(tmp_path / "helper_zz.py", "")
    _write(tmp_path / "needs_package.py", "import absent_pkg_zz.sub\nX = 1\n")
    with pytest.raises(PluginError, match=message) as error:
        load_object(spec.format(tmp=tmp_path), key="plugins")
    assert "\n" not in str(error.value)


def test_a_failed_import_can_be_retried_after_the_fix(tmp_path):
    path = _write(tmp_path / "fixme.py", "raise RuntimeError('not yet')\n")
    with pytest.raises(PluginError, match="not yet"):
        load_module(str(path))
    path.write_text("X = 2\n")
    assert load_module(str(path)).X == 2


def test_a_custom_error_type_is_raised(tmp_path):
    class MyError(ValueError):
        pass

    with pytest.raises(MyError, match="does not exist"):
        load_object(f"{tmp_path}/none.py:f", error=MyError)


def test_samplers_load_through_the_loader_and_the_registry(tmp_path):
    from core_v1.config import ConfigError, load_config
    from core_v1.trainer import SAMPLERS
    from core_v1.trainer.setup import load_custom_sampler
    from core_v1.utils.registry import UnknownNameError

    file = _write(
        tmp_path / "samplers.py",
        "from core_v1.trainer import register_sampler\n"
        "from core_v1.trainer.replay_buffer import ReplayBuffer\n"
        "class ByPath(ReplayBuffer): pass\n"
        "@register_sampler('by_name_zz')\nclass ByName(ReplayBuffer): pass\n"
        "class NotABuffer: pass\n",
    )

    def sampler(*overrides):
        keys = [f"trainer.v1.sampler.custom_sampler.{o}" for o in overrides]
        return load_custom_sampler(
            load_config(["data.train_files=unused.parquet", "actor_rollout_ref.model.path=unused", *keys])
        )

    by_path = sampler(f"path={file}", "name=ByPath")
    assert by_path.__module__ == module_name_for(file) and SAMPLERS.get("ByPath") is by_path
    assert sampler("name=by_name_zz").__name__ == "ByName"  # registered by the file's import above
    with pytest.raises(ConfigError, match="'NotABuffer' is not a ReplayBuffer subclass"):
        sampler(f"path={file}", "name=NotABuffer")
    with pytest.raises(ConfigError, match="has no 'Absent'"):
        sampler(f"path={file}", "name=Absent")
    with pytest.raises(UnknownNameError, match="unknown replay buffer 'nobody_zz'.*by_name_zz"):
        sampler("name=nobody_zz")


def test_a_target_importable_by_name_stays_one_module():
    # A YAML at the repository root naming a module of an installed package gets that package's module,
    # not a second copy loaded from the file beside it.
    assert load_target("core_v1.utils.loading.PluginError", relative_to=ROOT) is PluginError
