"""compose_config's memo of Hydra compositions watches the YAML files of the config folder; a folder
too large to watch (`--config-path=.` in a project with a data or outputs tree) is composed each time
instead of being walked and hashed on every call."""

from __future__ import annotations

from core_v1.config import loader


def _folder(tmp_path, value: int, other_files: int):
    (tmp_path / "run.yaml").write_text(f"a: {value}\n")
    for i in range(other_files):
        (tmp_path / f"data_{i}.txt").write_text("x")
    return tmp_path


def test_a_small_folder_is_remembered_and_an_edit_is_read_again(tmp_path):
    folder = _folder(tmp_path, 1, other_files=2)
    assert loader._composed(folder, "run", ["+b=2"]).a == 1
    before = len(loader._COMPOSED)
    assert loader._composed(folder, "run", ["+b=2"]).b == 2
    assert len(loader._COMPOSED) == before  # the repeat was the memo's
    (folder / "run.yaml").write_text("a: 3\n")
    assert loader._composed(folder, "run", ["+b=2"]).a == 3


def test_a_folder_too_large_to_watch_is_composed_each_time(tmp_path, monkeypatch):
    monkeypatch.setattr(loader, "_WATCHED_FILES_MAX", 3)
    folder = _folder(tmp_path, 1, other_files=4)
    assert loader._yaml_files_state(folder) is None
    before = list(loader._COMPOSED)
    assert loader._composed(folder, "run", []).a == 1
    assert list(loader._COMPOSED) == before  # nothing kept for it
    (folder / "run.yaml").write_text("a: 2\n")
    assert loader._composed(folder, "run", []).a == 2
