"""compose_config with a config whose `hydra.searchpath` names another folder (verl's recipes and
multi-turn examples do): overrides that only set values are applied onto the composition without
them, as for any config; a choice of a config group that only the search path's folder has is
still composed by Hydra in full."""

from __future__ import annotations

from omegaconf import OmegaConf

from core_v1.config import loader


def _configs(tmp_path):
    """`main/run.yaml` searching `shared/`, whose `engine` group has two options."""
    main, shared = tmp_path / "main", tmp_path / "shared"
    (shared / "engine").mkdir(parents=True)
    (shared / "engine" / "slow.yaml").write_text("speed: 1\n")
    (shared / "engine" / "fast.yaml").write_text("speed: 9\n")
    main.mkdir()
    (main / "run.yaml").write_text(
        f"defaults:\n  - engine: slow\n  - _self_\nhydra:\n  searchpath:\n    - file://{shared}\nsteps: 3\n"
    )
    return main


def _in_full(folder, overrides):
    """Hydra's own composition, as plain data."""
    _, cfg = loader._hydra_compose(folder, "run", overrides, loader._stored_nodes({}))
    return OmegaConf.to_container(cfg)


def test_a_value_override_on_a_searchpath_config_is_applied_onto_its_base(tmp_path, monkeypatch):
    folder = _configs(tmp_path)
    loader._composed(folder, "run", [])  # the base, kept
    composed_in_full = []
    hydra_compose = loader._hydra_compose
    monkeypatch.setattr(loader, "_hydra_compose", lambda *args: composed_in_full.append(args) or hydra_compose(*args))
    cfg = loader._composed(folder, "run", ["steps=5"])
    assert not composed_in_full
    assert OmegaConf.to_container(cfg) == _in_full(folder, ["steps=5"]) == {"engine": {"speed": 1}, "steps": 5}


def test_a_group_only_the_search_path_has_is_composed_in_full(tmp_path):
    folder = _configs(tmp_path)
    loader._composed(folder, "run", [])
    cfg = loader._composed(folder, "run", ["engine=fast"])
    assert OmegaConf.to_container(cfg) == _in_full(folder, ["engine=fast"]) == {"engine": {"speed": 9}, "steps": 3}
