"""`python -m codemods.migrate` on verl's own material: examples/, recipe/ and the trainer configs.

    python benchmarks/migrate_corpus.py /work/.mirror/verl-project+verl/repo
    python benchmarks/migrate_corpus.py ~/src/verl --tags v0.6.1 v0.7.1

The argument is a verl git repository (a bare mirror or a checkout) holding the release tags.
Every file of `examples/` and `recipe/` at each tag (`main` is a tag here too), the `.sh` and YAML
files of `tests/special_e2e/` and `verl/experimental/`, and `verl/trainer/config/*.yaml`, is exported
to a temporary directory once per distinct content (a file unchanged between two tags is migrated
once), migrated in place through the CLI path (`codemods.migrate.run`), and then migrated again.
Nothing of verl is copied into this project. Printed:

- files (by kind), files changed, files with an error finding;
- shell scripts that `bash -n` accepts but the tool left untouched (target 0);
- unmarked legacy keys left: an override word `key=value` on a code line of a migrated script,
  or a leaf of a migrated trainer YAML, whose key the rename table still resolves (it has a new
  home or must be decided by hand) and which no `TODO(migrate:...)` marker names (target 0). The
  scan is a plain word scan of the output, independent of the shell engine's parser;
- rewritten imports that do not resolve: `import`/`from` statements in migrated Python whose
  module or name (under `legacy_v0`, `core_v1`, `shims`) cannot be imported here (target 0);
- trainer YAML configs migrated / refused;
- idempotency: files a second run would change (target 0);
- the time of the first run (wall clock, and this process's CPU time, which other load on the
  machine does not inflate).

The checks on the output are `codemods.audit`'s, which read the migrated files without the
engines' parsers.

Measured (2 CPU cores shared with other jobs, so wall time is inflated; CPU time is the figure):
- v0.4.1..v0.7.1 (default tags): 1002 distinct files exported, 927 migrated (519 sh / 107 yaml /
  301 py), 791 changed; 0 errors, 0 untouched scripts, 0 unmarked legacy keys, 0 unresolved
  imports, 57 trainer YAML configs changed / 0 refused (verl/trainer/config: 40 files, 29 changed,
  0 refused; the rest are SFT/generation configs with nothing to move), 0 files changed by a
  second run; 67 s CPU (291 s wall under load).
- `--tags v0.5.0 v0.6.1 v0.7.1`: 578 files (341 / 71 / 166), 502 changed, all targets 0, 38 YAML
  configs changed / 0 refused; 26 s CPU.
- `--tags v0.4.1 v0.5.0 v0.6.1 v0.7.1 v0.8.0 v0.9.0 main` (after overrides in arrays handed to
  another script were found: verl main's run_v1_separate_async_ascend.sh had 3 unmarked keys in
  `params+=( ... )`): 1173 distinct files, 1092 migrated (770 sh / 116 yaml / 206 py), 984
  changed; 0 errors, 0 untouched scripts, 0 unmarked legacy keys, 0 unresolved imports, 72 YAML
  configs changed / 0 refused, 0 files changed by a second run; 64 s CPU (199 s wall under load).
Most of the time is libcst's scope analysis of the Python files.
"""

from __future__ import annotations

import argparse
import collections
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from codemods.audit import unmarked_shell_keys, unmarked_yaml_keys, unresolved_imports  # noqa: E402
from codemods.migrate import run  # noqa: E402
from codemods.rules import ALL_RULES  # noqa: E402

DEFAULT_TAGS = ("v0.4.1", "v0.5.0", "v0.6.0", "v0.6.1", "v0.7.0", "v0.7.1")
EXPORTED_TREES = ("examples", "recipe")
# Launch scripts and their configs only: the Python beside them is verl's own code.
SCRIPT_TREES = ("tests/special_e2e", "verl/experimental")
CONFIG_DIR = "verl/trainer/config"


# --------------------------------------------------------------------------- export


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _listed_blobs(repo: Path, tag: str) -> list[tuple[str, str]]:
    """(blob sha, path) of every file of the exported trees and every top-level trainer YAML."""
    rows = _git(repo, "ls-tree", "-r", tag, "--", *EXPORTED_TREES).splitlines()
    rows += [
        row
        for row in _git(repo, "ls-tree", "-r", tag, "--", *SCRIPT_TREES).splitlines()
        if row.endswith((".sh", ".yaml", ".yml"))
    ]
    rows += [
        row for row in _git(repo, "ls-tree", tag, f"{CONFIG_DIR}/").splitlines() if row.endswith((".yaml", ".yml"))
    ]
    blobs = []
    for row in rows:
        meta, path = row.split("\t", 1)
        mode, kind, sha = meta.split()
        if kind == "blob" and mode != "120000":  # symlinks are not files to migrate
            blobs.append((sha, path))
    return blobs


def export(repo: Path, tags: list[str], destination: Path) -> list[Path]:
    """Write each distinct blob once, under `<tag>/<path>` of the first tag holding it."""
    chosen: dict[str, Path] = {}
    for tag in tags:
        for sha, path in _listed_blobs(repo, tag):
            chosen.setdefault(sha, destination / tag / path)
    shas = list(chosen)
    batch = subprocess.run(
        ["git", "-C", str(repo), "cat-file", "--batch"],
        input="\n".join(shas).encode() + b"\n",
        check=True,
        capture_output=True,
    ).stdout
    cursor = 0
    for sha in shas:
        header_end = batch.index(b"\n", cursor)
        size = int(batch[cursor:header_end].split()[2])
        content = batch[header_end + 1 : header_end + 1 + size]
        cursor = header_end + 1 + size + 1
        target = chosen[sha]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
    return sorted(chosen.values())


# --------------------------------------------------------------------------- checks


def bash_accepts(path: Path) -> bool:
    return subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0


# --------------------------------------------------------------------------- report


def measure(work: Path) -> dict:
    started, cpu_started = time.perf_counter(), time.process_time()
    first = run([work], ALL_RULES, write=True)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    second = run([work], ALL_RULES, write=False)
    figures: dict = collections.OrderedDict()
    figures["files"] = collections.Counter(o.kind for o in first.outcomes)
    figures["changed"] = sum(o.status == "changed" for o in first.outcomes)
    figures["errors"] = [
        (o.path, f.message)
        for o in first.outcomes
        if o.status == "error"
        for f in o.findings
        if f.severity.value == "ERROR"
    ]
    figures["untouched_bash_ok"] = [
        o.path for o in first.outcomes if o.kind == "sh" and o.status == "error" and bash_accepts(o.path)
    ]
    keys, imports, yaml_migrated, yaml_refused = {}, {}, 0, []
    for outcome in first.outcomes:
        text = outcome.path.read_text(encoding="utf-8", errors="replace")
        if outcome.kind == "sh":
            found = unmarked_shell_keys(text)
        elif outcome.kind == "yaml":
            found = unmarked_yaml_keys(text) if outcome.status != "error" else []
            if outcome.status == "error":
                yaml_refused.append(outcome.path)
            elif outcome.status == "changed":
                yaml_migrated += 1
        else:
            found = []
            missing = unresolved_imports(text)
            if missing:
                imports[outcome.path] = missing
        if found:
            keys[outcome.path] = found
    figures["unmarked_keys"] = keys
    figures["unresolved_imports"] = imports
    figures["yaml_migrated"], figures["yaml_refused"] = yaml_migrated, yaml_refused
    figures["not_idempotent"] = [o.path for o in second.outcomes if o.status == "changed"]
    figures["seconds"], figures["cpu_seconds"] = elapsed, cpu
    trainer_configs = [o for o in first.outcomes if o.kind == "yaml" and "/verl/trainer/config/" in str(o.path)]
    figures["trainer_configs"] = (
        len(trainer_configs),
        sum(o.status == "changed" for o in trainer_configs),
        sum(o.status == "error" for o in trainer_configs),
    )
    return figures


def _print(figures: dict, work: Path, verbose: bool) -> None:
    def rel(path):
        return str(Path(path).relative_to(work))

    def show(title, items):
        print(f"{title:<52}{len(items):>6}")
        if verbose:
            for item in list(items)[:40]:
                print(f"    {rel(item) if not isinstance(item, tuple) else rel(item[0]) + ': ' + item[1][:160]}")

    kinds = figures["files"]
    print(
        f"{'files (sh / yaml / py)':<52}{sum(kinds.values()):>6}  "
        f"({kinds.get('sh', 0)} / {kinds.get('yaml', 0)} / {kinds.get('py', 0)})"
    )
    print(f"{'files changed':<52}{figures['changed']:>6}")
    show("files with an error finding", figures["errors"])
    show("scripts bash accepts but left untouched", figures["untouched_bash_ok"])
    keys = figures["unmarked_keys"]
    print(f"{'unmarked legacy keys left (files)':<52}{sum(map(len, keys.values())):>6}  ({len(keys)})")
    if verbose:
        for path, found in list(keys.items())[:40]:
            print(f"    {rel(path)}: {', '.join(sorted(set(found)))}")
    imports = figures["unresolved_imports"]
    print(
        f"{'rewritten imports that do not resolve (files)':<52}{sum(map(len, imports.values())):>6}  ({len(imports)})"
    )
    if verbose:
        for path, found in imports.items():
            print(f"    {rel(path)}: {', '.join(found)}")
    print(
        f"{'trainer YAML configs changed / refused':<52}{figures['yaml_migrated']:>3} / {len(figures['yaml_refused'])}"
    )
    total, changed, refused = figures["trainer_configs"]
    print(f"{'  of them verl/trainer/config/*.yaml: files, changed, refused':<52}{total:>3}, {changed}, {refused}")
    if verbose:
        for path in figures["yaml_refused"]:
            print(f"    {rel(path)}")
    show("files a second run changes (idempotency)", figures["not_idempotent"])
    print(
        f"{'time of the first run: wall / CPU of this process (s)':<52}{figures['seconds']:>6.1f} / "
        f"{figures['cpu_seconds']:.1f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("verl", type=Path, help="a verl git repository (bare mirror or checkout) with its tags")
    parser.add_argument("--tags", nargs="+", default=list(DEFAULT_TAGS))
    parser.add_argument("--keep", type=Path, help="export and migrate here instead of a temporary directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="list the files behind each figure")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="verl-corpus-") as scratch:
        work = args.keep or Path(scratch)
        files = export(args.verl, args.tags, work)
        print(
            f"verl tags {', '.join(args.tags)}: {len(files)} distinct files of {', '.join(EXPORTED_TREES)} "
            f"and {CONFIG_DIR}/*.yaml"
        )
        figures = measure(work)
        _print(figures, work, args.verbose)
    failed = (
        figures["untouched_bash_ok"]
        or figures["unmarked_keys"]
        or figures["unresolved_imports"]
        or figures["yaml_refused"]
        or figures["not_idempotent"]
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
