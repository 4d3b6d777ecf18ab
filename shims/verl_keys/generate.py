"""Regenerate `verl_keys.json`: every leaf key of verl's trainer configs, with the tags it is in.

    python -m shims.verl_keys.generate VERL_MIRROR [--out shims/verl_keys/verl_keys.json]

VERL_MIRROR is a git repository of verl (a bare mirror or a clone) with its release tags. For each
release tag from v0.3 on (release candidates left out), and then verl's `main` branch (listed as
the tag `main`), it reads the trainer configs: `ppo_trainer.yaml` and `ppo_megatron_trainer.yaml`,
or, from the tags that have them, the flattened `_generated_ppo*_trainer.yaml` (one per model
engine: verl composes these from the `defaults:` lists of the former, so their leaves are the whole
key surface).

The output holds facts only: each dotted leaf key (a value that is not a mapping, or an empty
mapping), the tags it appears in, the configs it appears in, its default at the newest tag that
has it, and every distinct default it had (`defaults`, oldest first: a config copied whole from an
older verl carries that release's value). `groups` lists the config groups the `defaults:` lists
of the trainer configs declare (`model_engine`, `actor@actor_rollout_ref.actor`, ...), each with
its default choice and the choices (the group folder's YAML files) with the tags that have them.
The verdict each key or choice gets lives in `shims.verl_keys.verdicts`, not here.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

from ruamel.yaml import YAML

OUT = Path(__file__).with_name("verl_keys.json")
GENERATED_BY = "python -m shims.verl_keys.generate <verl mirror>; do not edit (facts only; verdicts: verdicts.py)"
CONFIG_DIR = "verl/trainer/config"
# (name in the table, the flattened file, the file it is flattened from)
# The FSDP config is read last, so that a default the two disagree on is the FSDP one.
CONFIGS = (
    ("ppo_megatron_trainer", "_generated_ppo_megatron_trainer.yaml", "ppo_megatron_trainer.yaml"),
    ("ppo_trainer", "_generated_ppo_trainer.yaml", "ppo_trainer.yaml"),
)  # (name, flattened, plain)
FLATTENED = re.compile(r"^_generated_(ppo(?:_\w+)?_trainer)\.yaml$")
TRAINER_CONFIGS = ("ppo_trainer.yaml", "ppo_megatron_trainer.yaml")  # whose `defaults:` declare the groups
RELEASE_TAG = re.compile(r"^v0\.([3-9]|\d\d)\.\d+(\.post\d+)?$")
BRANCH = "main"  # verl's newest configs, after its newest release


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def release_tags(repo: Path) -> list[str]:
    tags = [t for t in git(repo, "tag").split() if RELEASE_TAG.match(t)]
    return sorted(tags, key=lambda t: [int(p) if p.isdigit() else p for p in re.split(r"[.]|post", t[1:]) if p])


def config_texts(repo: Path, tag: str) -> list[tuple[str, str]]:
    """(config name, text) of the tag's trainer configs: every flattened one where there are some,
    else the plain ones; the FSDP one last, so that a default they disagree on is the FSDP one."""
    files = set(git(repo, "ls-tree", "--name-only", f"{tag}:{CONFIG_DIR}").split())
    chosen = sorted((m.group(1), name) for name in files if (m := FLATTENED.match(name)))
    if not chosen:  # an older tag
        chosen = [(name, plain) for name, _, plain in CONFIGS if plain in files]
    chosen.sort(key=lambda pair: pair[0] == "ppo_trainer")
    return [(name, git(repo, "show", f"{tag}:{CONFIG_DIR}/{file}")) for name, file in chosen]


def config_groups(repo: Path, tag: str) -> dict[str, tuple[str, list[str]]]:
    """{group as an override names it (`actor@actor_rollout_ref.actor`): (default choice, choices)}
    from the `defaults:` lists of the tag's trainer configs."""
    yaml = YAML(typ="safe")
    files = set(git(repo, "ls-tree", "-r", "--name-only", tag, "--", CONFIG_DIR).split())
    groups: dict[str, tuple[str, list[str]]] = {}
    for config in TRAINER_CONFIGS:
        if f"{CONFIG_DIR}/{config}" not in files:
            continue
        for entry in (yaml.load(git(repo, "show", f"{tag}:{CONFIG_DIR}/{config}")) or {}).get("defaults") or []:
            if not isinstance(entry, dict):
                continue
            for spec, choice in entry.items():
                if spec.startswith("override ") or spec in groups:
                    continue
                folder = f"{CONFIG_DIR}/{spec.split('@', 1)[0]}/"
                choices = sorted(
                    f[len(folder) : -len(".yaml")]
                    for f in files
                    if f.startswith(folder) and f.endswith(".yaml") and "/" not in f[len(folder) :]
                )
                groups[spec] = (str(choice), choices)
    return groups


def leaves(node: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted key, value) for every leaf; an empty mapping is a leaf (a free-form section)."""
    if isinstance(node, dict) and node:
        for key, value in node.items():
            yield from leaves(value, f"{prefix}{key}." if prefix or key else "")
    elif prefix:
        yield prefix[:-1], node


def plain(value: Any) -> Any:
    """A YAML value as plain Python (ruamel's commented containers and scalars unwrapped)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def collect(repo: Path) -> dict:
    yaml = YAML(typ="safe")
    tags = release_tags(repo) + [BRANCH]
    keys: dict[str, dict] = {}
    groups: dict[str, dict] = {}
    for tag in tags:
        for name, text in config_texts(repo, tag):
            for key, value in leaves(yaml.load(text) or {}):
                entry = keys.setdefault(key, {"tags": [], "configs": [], "default": None, "defaults": []})
                if tag not in entry["tags"]:
                    entry["tags"].append(tag)
                if name not in entry["configs"]:
                    entry["configs"].append(name)
                entry["default"] = plain(value)  # oldest tag first: the newest wins
                if entry["default"] not in entry["defaults"]:
                    entry["defaults"].append(entry["default"])
        for spec, (default, choices) in config_groups(repo, tag).items():
            group = groups.setdefault(spec, {"tags": [], "default": default, "choices": {}})
            group["tags"].append(tag)
            group["default"] = default
            for choice in choices:
                group["choices"].setdefault(choice, []).append(tag)
    return {"tags": tags, "keys": dict(sorted(keys.items())), "groups": dict(sorted(groups.items()))}


def write(table: dict, out: Path) -> None:
    """JSON, one key per line (start-up reads it, so it must load fast; diffs stay readable)."""
    lines = [
        "{",
        f' "generated_by": {json.dumps(GENERATED_BY)},',
        f' "tags": {json.dumps(table["tags"])},',
        ' "keys": {',
    ]
    rows = [f"  {json.dumps(key)}: {json.dumps(entry, sort_keys=True)}" for key, entry in table["keys"].items()]
    lines.append(",\n".join(rows))
    lines += [" },", ' "groups": {']
    rows = [f"  {json.dumps(spec)}: {json.dumps(entry, sort_keys=True)}" for spec, entry in table["groups"].items()]
    lines.append(",\n".join(rows))
    lines += [" }", "}"]
    out.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("verl", type=Path, help="a git repository of verl with its release tags")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    table = collect(args.verl)
    write(table, args.out)
    print(f"{len(table['keys'])} keys over {len(table['tags'])} tags -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
