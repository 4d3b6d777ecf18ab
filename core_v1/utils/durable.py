"""Writing folders and small files so that a kill or a power loss at any moment leaves either the
old version or the new one, never a mix, never nothing.

- `fsync_tree` flushes every file and folder of a tree to disk (a rename is only as durable as
  the data it names and the folder that records it);
- `write_text` writes a small file through a temporary sibling: written, fsynced, renamed over
  the old one, the folder fsynced;
- `replace_directory` puts a finished staging folder in place of `target`. POSIX cannot rename a
  folder over a non-empty one, so an existing `target` is first moved aside to `<target>.retired`,
  the staging folder renamed in, and only then the retired one deleted: at every moment one
  complete version exists, under `target` or under `<target>.retired`. `recover_directory` puts a
  retired folder back when a kill left no `target`.

Fault points. `fault_point(name)` ends the process on the spot (`os._exit`, no clean-up, like a
SIGKILL) when the environment variable `RLBRIDGE_FAULT_POINT` names that point (`name@k`: the k-th
time the process reaches it); the fault tests
(`tests/faults/test_checkpoint_faults.py`) use it to stop a save between any two of its steps.
The points are listed in `FAULT_POINTS`.
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path
from typing import Optional

FAULT_ENV = "RLBRIDGE_FAULT_POINT"
FAULT_EXIT_CODE = 86
RETIRED_SUFFIX = ".retired"

FAULT_POINTS = {
    "checkpoint.staged": "a trainer checkpoint is complete and fsynced in its staging folder",
    "checkpoint.old_moved": "an older checkpoint of the same step has been moved aside",
    "checkpoint.renamed": "the staging folder has been renamed into place; the pointer is not yet written",
    "checkpoint.pointed": "the latest-step pointer names the new checkpoint; nothing pruned yet",
    "prune.moved": "a checkpoint to prune has been renamed out of the way, not yet deleted",
    "prune.deleted": "a pruned checkpoint has been deleted; others may still be due",
    "rank.staged": "a role's folder (DCP shards, HF export, extra state) is complete in staging",
    "rank.old_moved": "an older folder of the role has been moved aside",
    "rank.renamed": "the role's staging folder has been renamed into place",
}


_reached: Counter = Counter()


def fault_point(name: str) -> None:
    """End the process here, as a kill would, when `RLBRIDGE_FAULT_POINT` is `name` (the first
    time the process reaches it) or `name@k` (the k-th time)."""
    assert name in FAULT_POINTS, name
    wanted = os.environ.get(FAULT_ENV)
    if not wanted or wanted.partition("@")[0] != name:
        return
    _reached[name] += 1
    if _reached[name] == int(wanted.partition("@")[2] or 1):
        os._exit(FAULT_EXIT_CODE)


def fsync_path(path: str | os.PathLike) -> None:
    """Flush one file or folder to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: str | os.PathLike) -> None:
    """Flush every file and folder under `root`, and `root` itself, to disk."""
    for folder, _, files in os.walk(root, topdown=False):
        for name in files:
            fsync_path(os.path.join(folder, name))
        fsync_path(folder)


def write_text(path: str | os.PathLike, text: str) -> None:
    """Replace the file `path` by `text`; a kill leaves the old content or the new, whole."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    fsync_path(path.parent)


def retired_path(target: Path) -> Path:
    return target.with_name(target.name + RETIRED_SUFFIX)


def replace_directory(staging: Path, target: Path, fault_prefix: Optional[str]) -> None:
    """Make the finished folder `staging` be `target` (see the module docstring). The caller has
    fsynced `staging`'s contents; `<fault_prefix>.old_moved` / `.renamed` are the fault points."""
    retired = retired_path(target)
    if target.exists():
        shutil.rmtree(retired, ignore_errors=True)  # recover_directory found `target` whole: stale
        os.replace(target, retired)
        fsync_path(target.parent)
        if fault_prefix:
            fault_point(f"{fault_prefix}.old_moved")
    os.replace(staging, target)
    fsync_path(target.parent)
    if fault_prefix:
        fault_point(f"{fault_prefix}.renamed")


def remove_retired(target: Path) -> None:
    """Delete what `replace_directory` moved aside, once `target` is committed."""
    shutil.rmtree(retired_path(target), ignore_errors=True)


def recover_directory(target: Path) -> bool:
    """Undo a replacement a kill cut short: a retired folder with no `target` becomes `target`
    again. True when it did."""
    retired = retired_path(target)
    if target.exists() or not retired.is_dir():
        return False
    os.replace(retired, target)
    fsync_path(target.parent)
    return True
